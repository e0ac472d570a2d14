package egress_test

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/services/egress"
)

// ExamplePolicy_Check shows what an allowlist lets through: exact names on
// ports 80 and 443, wildcards on a label boundary, nothing by IP.
func ExamplePolicy_Check() {
	npm, _ := egress.ParseRule("registry.npmjs.org")
	gh, _ := egress.ParseRule("*.github.com")
	p, err := egress.NewPolicy(npm, gh)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range []struct {
		host string
		port int
	}{{"registry.npmjs.org", 443}, {"api.github.com", 443}, {"evil-github.com", 443}, {"github.com", 443}, {"140.82.112.3", 443}, {"registry.npmjs.org", 22}} {
		r, err := p.Check(c.host, c.port)
		if errors.Is(err, egress.ErrRefused) {
			fmt.Printf("%s:%d refused\n", c.host, c.port)
			continue
		}
		fmt.Printf("%s:%d allowed by %s\n", c.host, c.port, r)
	}
	// Output:
	// registry.npmjs.org:443 allowed by registry.npmjs.org
	// api.github.com:443 allowed by *.github.com
	// evil-github.com:443 refused
	// github.com:443 refused
	// 140.82.112.3:443 refused
	// registry.npmjs.org:22 refused
}

// ExampleNew serves a proxy for one request: the host side of the helper's
// egress relay (helper.ListenHostSocket(hostDir, helper.EgressSocket, ...)).
func ExampleNew() {
	rule := egress.Rule{Host: "pkgs.internal", Port: 8081, Private: true,
		Credential: &egress.Credential{Env: "PKG_TOKEN", Prefix: "Bearer "}}
	pol, err := egress.NewPolicy(rule)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := egress.New(egress.Options{Policy: pol, MaxBytes: 256 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = p.Close() }()
	// go p.Serve(ln) with ln on {hostDir}/egress.sock; Close at the end of
	// the request cuts every connection.
	fmt.Println(p.Stats().Connections)
	// Output: 0
}

package egress

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkProxy measures what watching the proxy's connections costs
// (the clientConn wrapper, the connection cap, ConnState): each case runs
// once with net/http serving the proxy's handler directly, as before
// (baseline), and once through Serve (watched), in the same run.
//
//	go test -run '^$' -bench BenchmarkProxy -count 5 ./executor/egress
func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	b.Cleanup(upstream.Close)
	port, err := strconv.Atoi(upstream.URL[len("http://127.0.0.1:"):])
	require.NoError(b, err)
	target := net.JoinHostPort("pkgs.test", strconv.Itoa(port))
	for _, mode := range []string{"baseline", "watched"} {
		start := func(b *testing.B) string {
			pol, err := NewPolicy(Rule{Host: "pkgs.test", Port: port, Private: true})
			require.NoError(b, err)
			p, err := New(Options{Policy: pol, Resolver: &mapResolver{names: map[string][]string{"pkgs.test": {"127.0.0.1"}}},
				Dial: (&loopbackOnly{}).Dial, MaxConnections: 1 << 30})
			require.NoError(b, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			if mode == "baseline" {
				srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
				go func() { _ = srv.Serve(ln) }()
				b.Cleanup(func() { _ = srv.Close() })
			} else {
				go func() { _ = p.Serve(ln) }()
			}
			b.Cleanup(func() { _ = p.Close() })
			return ln.Addr().String()
		}
		b.Run("forward/"+mode, func(b *testing.B) {
			addr := start(b)
			client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
			u := "http://" + target + "/"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
		b.Run("connect/"+mode, func(b *testing.B) {
			addr := start(b)
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, target, target)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(err, resp)
				}
				_ = resp.Body.Close() // a 200 to CONNECT has no body: the tunnel follows
				resp, err = http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				_ = c.Close()
			}
		})
	}
}

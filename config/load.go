package config

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/executor"
)

// LoadOptions tunes Load. The zero value reads the process environment
// and checks limits against this machine.
type LoadOptions struct {
	// LookupEnv resolves "$ENV.NAME" references (default os.LookupEnv).
	LookupEnv func(name string) (string, bool)
	// HostCPUs bounds max_cpu (0: this machine's count; negative: no
	// bound, e.g. when DOCKER_HOST is another machine).
	HostCPUs int
	// HostMemoryBytes is compared with max_memory for a warning (0: this
	// machine's memory; negative: no check).
	HostMemoryBytes int64
}

func (o *LoadOptions) lookupEnv() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	return os.LookupEnv
}

func (o *LoadOptions) hostCPUs() int {
	switch {
	case o.HostCPUs > 0:
		return o.HostCPUs
	case o.HostCPUs < 0:
		return 0
	}
	return runtime.NumCPU()
}

func (o *LoadOptions) hostMemory() int64 {
	switch {
	case o.HostMemoryBytes > 0:
		return o.HostMemoryBytes
	case o.HostMemoryBytes < 0:
		return 0
	}
	return executor.HostMemoryBytes()
}

// Gateway is a loaded gateway directory.
type Gateway struct {
	// Dir is the directory given to Load (absolute).
	Dir string
	// Assistants by id (directory name under assistants/).
	Assistants map[string]*Assistant
	// Connectors by id ("deepseek.v3" for connectors/deepseek/v3.conn.yao).
	Connectors map[string]*Connector
	// Problems are the warnings and excluded skills of the whole tree,
	// sorted by file and position. Errors make Load fail instead.
	Problems []Problem
}

// Load reads a gateway directory: assistants/<id>/ and connectors/**.
// It returns a *Error (wrapping ErrInvalid) listing every problem when any
// is an error; skill problems never fail it (see Gateway.Problems).
func Load(dir string, opts LoadOptions) (*Gateway, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, &Error{Problems: []Problem{{File: dir, Message: err.Error(), Severity: SeverityError}}}
	}
	ps := &problems{}
	connectors := loadConnectors(root, &opts, ps)
	g := &Gateway{Dir: root, Assistants: map[string]*Assistant{}, Connectors: connectors}
	entries, err := os.ReadDir(filepath.Join(root, "assistants"))
	if err != nil {
		ps.add(Problem{File: "assistants", Message: "cannot read the assistants directory: " + pathErr(err),
			Hint: "create assistants/<id>/package.yao in the gateway directory", Severity: SeverityError})
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		a := loadAssistant(root, e.Name(), connectors, &opts, ps)
		g.Assistants[a.ID] = a
	}
	return finish(g, ps)
}

// LoadAssistant reads the connectors and the one assistant id of a
// gateway directory, e.g. to check an assistant being edited.
func LoadAssistant(dir, id string, opts LoadOptions) (*Assistant, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, &Error{Problems: []Problem{{File: dir, Message: err.Error(), Severity: SeverityError}}}
	}
	ps := &problems{}
	connectors := loadConnectors(root, &opts, ps)
	if fi, err := os.Stat(filepath.Join(root, "assistants", id)); err != nil || !fi.IsDir() {
		ps.add(Problem{File: "assistants/" + id, Message: "no such assistant directory",
			Hint: "create assistants/" + id + "/package.yao", Severity: SeverityError})
		_, err := finish(&Gateway{}, ps)
		return nil, err
	}
	a := loadAssistant(root, id, connectors, &opts, ps)
	if _, err := finish(&Gateway{}, ps); err != nil {
		return nil, err
	}
	return a, nil
}

// finish fails with every problem when any is an error, and otherwise
// gathers the warnings and skill problems into g.Problems.
func finish(g *Gateway, ps *problems) (*Gateway, error) {
	if ps.hasErrors() {
		list := append([]Problem(nil), ps.list...)
		sortProblems(list)
		return nil, &Error{Problems: list}
	}
	var all []Problem
	seen := map[string]bool{}
	for _, p := range ps.list {
		all = append(all, p)
		seen[p.Error()] = true
	}
	ids := make([]string, 0, len(g.Assistants))
	for id := range g.Assistants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, p := range g.Assistants[id].Problems {
			if !seen[p.Error()] {
				all = append(all, p)
			}
		}
	}
	sortProblems(all)
	g.Problems = all
	return g, nil
}

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/executor/helper"
)

func TestRunArguments(t *testing.T) {
	tests := map[string]struct {
		args    []string
		code    int
		wantOut string
		wantErr string
	}{
		"no command":     {args: nil, code: 2, wantErr: "usage"},
		"unknown":        {args: []string{"frobnicate"}, code: 2, wantErr: "usage"},
		"version":        {args: []string{"version"}, code: 0, wantOut: fmt.Sprintf("protocol %d\n", helper.ProtocolVersion)},
		"bad deadline":   {args: []string{"serve", "--deadline", "tomorrow"}, code: 2, wantErr: "use RFC3339"},
		"past deadline":  {args: []string{"serve", "--dir", "/nonexistent", "--deadline", "2000-01-01T00:00:00Z"}, code: 0, wantErr: "deadline reached"},
		"missing dir":    {args: []string{"serve", "--dir", "/nonexistent/dir"}, code: 1, wantErr: "mounted writable"},
		"mcp no server":  {args: []string{"mcp"}, code: 1, wantErr: "needs --server"},
		"mcp no host":    {args: []string{"mcp", "--server", "x", "--dir", "/nonexistent"}, code: 1, wantErr: "token"},
		"bad serve flag": {args: []string{"serve", "--nope"}, code: 2, wantErr: "flag provided but not defined"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("AGENTBOX_TOKEN", "")
			var out, errb bytes.Buffer
			code := run(tc.args, strings.NewReader(""), &out, &errb)
			assert.Equal(t, tc.code, code, errb.String())
			assert.Contains(t, out.String(), tc.wantOut)
			assert.Contains(t, errb.String(), tc.wantErr)
		})
	}
}

//go:build deps

// Package deps pins the module's third-party dependencies in go.mod while
// the packages that use them are being written, so that parallel work does
// not race on go.mod. It is never built. Remove an import here once a real
// package imports it.
package deps

import (
	_ "github.com/docker/docker/client"
	_ "github.com/dop251/goja"
	_ "github.com/evanw/esbuild/pkg/api"
	_ "github.com/goccy/go-yaml"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/openai/openai-go"
	_ "github.com/stretchr/testify/require"
	_ "github.com/tailscale/hujson"
	_ "github.com/tidwall/gjson"
)

// The openai-go v1 client of middleware/openai's client matrix, a module of
// its own so that agentbox's go.mod holds only openai-go v3.
module agentbox.test/openai-go-v1

go 1.25

require github.com/openai/openai-go v1.12.0

// gjson at the version agentbox built this client with when v1 was in its
// go.mod (v1 asks for v1.14.4).
require (
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
)

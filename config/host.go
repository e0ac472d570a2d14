package config

import "github.com/agentbox/agentbox/executor"

// HostMemoryBytes returns this machine's memory (executor.HostMemoryBytes),
// the figure max_memory is checked against.
func HostMemoryBytes() int64 { return executor.HostMemoryBytes() }

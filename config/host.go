package config

// HostMemoryBytes returns this machine's memory, MemTotal of /proc/meminfo
// (0 when unknown), the figure max_memory is checked against and the
// middleware's admission control derives its memory bound from.
func HostMemoryBytes() int64 { return memTotal() }

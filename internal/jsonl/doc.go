// Package jsonl reads newline-delimited output of agent CLIs safely: a
// bounded line reader that accepts lines of tens of MiB, reports a longer
// line as a typed error instead of truncating it, and a stall watchdog that
// ends a run whose output goes quiet for too long.
//
// Concurrency: a Reader is not safe for concurrent use; one goroutine reads
// it. A Watchdog is safe for concurrent use: Kick, Stop and Err may be called
// from any goroutine.
package jsonl

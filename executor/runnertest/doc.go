// Package runnertest is the conformance suite for executor.Runner
// implementations. Each runner supplies transcripts of its CLI's stdout for
// the same scripted behaviours (a plain answer; writing a file and running a
// command; a failing tool; a failed run; a stream cut before its result)
// and Run checks the contract every runner must keep: events in the shared
// vocabulary, Content equal to the concatenation of the text events, tool
// results that answer earlier tool uses, a terminal state that matches the
// behaviour, output independent of how the pipe is chunked, and emit errors
// and cancellation that stop parsing. Run also returns each outcome's Shape
// (tool names, result errors and end state), so that a test holding two
// runners can check that they describe the same behaviour the same way.
//
// Concurrency: Run is called from one test goroutine; Outcome and Shape
// values are plain data.
package runnertest

// Package jsapi runs assistant hooks written in JavaScript or TypeScript.
// It is the only importer of goja: it compiles src/index.ts|js once at load
// (TypeScript through esbuild), and gives every invocation a fresh runtime
// with a time budget, a stack limit and the ctx, ctx.sandbox, log and
// console objects built by hand from typed Go functions.
//
// Concurrency: a compiled Program is safe for concurrent use; runtimes are
// never shared between goroutines or invocations.
package jsapi

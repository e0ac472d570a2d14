package docker

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// BenchmarkCreate measures time-to-ready and the full create-to-remove
// cycle on both exec paths against `docker run --rm <image> true` through
// the docker CLI, in the same run:
//
//	go test -run '^$' -bench Create -benchtime 20x ./executor/docker/
func BenchmarkCreate(b *testing.B) {
	img := testenv.RequireImage(b)
	if _, err := exec.LookPath("docker"); err != nil {
		b.Fatalf("the docker CLI is the baseline: %v", err)
	}
	ctx := context.Background()
	b.Run("baseline=docker-run-rm-true", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command("docker", "run", "--rm", img, "true").CombinedOutput(); err != nil {
				b.Fatalf("docker run: %v: %s", err, out)
			}
		}
	})
	for _, path := range []string{PathDockerExec, PathHelper} {
		newExec := func(b *testing.B) *Executor {
			if path == PathHelper {
				bin := testenv.HelperBinary(b)
				return newTestExecutor(b, func(o *Options) { o.HelperBinary = bin })
			}
			return newTestExecutor(b)
		}
		b.Run("ready/"+path, func(b *testing.B) {
			e := newExec(b)
			for b.Loop() {
				sb, err := e.Create(ctx, testSpec("bench-ready"))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		if path == PathHelper {
			// A new chat's Create when the pool (Options.Pool) has a
			// started container for it: the bind replaces the start.
			b.Run("ready/pooled", func(b *testing.B) {
				bin := testenv.HelperBinary(b)
				e := newTestExecutor(b, func(o *Options) { o.HelperBinary, o.Pool = bin, 1 })
				n := 0
				for b.Loop() {
					b.StopTimer()
					if n == 0 {
						sb, err := e.Create(ctx, testSpec("bench-pool-fill"))
						if err != nil {
							b.Fatal(err)
						}
						if err := sb.Close(ctx); err != nil {
							b.Fatal(err)
						}
					}
					for e.pool.size() == 0 {
						time.Sleep(10 * time.Millisecond)
					}
					n++
					b.StartTimer()
					sb, err := e.Create(ctx, testSpec(fmt.Sprintf("bench-pool-%d", n)))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := sb.Close(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
		b.Run("cycle/"+path, func(b *testing.B) {
			e := newExec(b)
			for b.Loop() {
				sb, err := e.Create(ctx, testSpec("bench-cycle"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				if err := sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExec measures one short command on both exec paths against
// os/exec on the host:
//
//	go test -run '^$' -bench Exec -benchtime 50x ./executor/docker/
func BenchmarkExec(b *testing.B) {
	testenv.RequireImage(b)
	ctx := context.Background()
	b.Run("baseline=os-exec-local", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, path := range []string{PathDockerExec, PathHelper} {
		b.Run(path, func(b *testing.B) {
			var e *Executor
			if path == PathHelper {
				bin := testenv.HelperBinary(b)
				e = newTestExecutor(b, func(o *Options) { o.HelperBinary = bin })
			} else {
				e = newTestExecutor(b)
			}
			sb := create(b, e, testSpec("bench-exec"))
			for b.Loop() {
				res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					b.Fatal(res, err)
				}
			}
		})
	}
}

//go:build linux

// Command pause is the pod sandbox's main process for the offline test
// cluster: it sleeps, reaps children that are reparented to it, and exits on
// SIGTERM or SIGINT. It replaces registry.k8s.io/pause, which the offline
// cluster cannot pull.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

package kubernetes_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/kubernetes"
)

// A gateway with a kubeconfig runs one command in a sandbox pod. In a
// cluster, leave Kubeconfig empty to use the pod's service account.
func Example() {
	ctx := context.Background()
	e, err := kubernetes.New(ctx, kubernetes.Options{
		Kubeconfig:       os.Getenv("AGENTBOX_KUBECONFIG"),
		Namespace:        "agentbox",
		Image:            "agentbox/sandbox-claude:latest",
		RuntimeClassName: "nonet",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Close() }()
	sb, err := e.Create(ctx, executor.Spec{UserID: "alice", ChatID: "c1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = sb.Close(ctx) }()
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"id", "-u"}, Stdout: os.Stdout})
	fmt.Println(res.ExitCode, err)
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// replicaArgsEnv, set to a JSON array of flags, makes the test binary run
// the gateway with them instead of the tests: TestReplicasKubernetes
// starts its replicas so, as processes of their own that it can kill -9.
const replicaArgsEnv = "AGENTBOX_TEST_GATEWAY_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(replicaArgsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", replicaArgsEnv, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, args, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// replica is an example gateway running as a process of its own.
type replica struct {
	name string
	url  string
	cmd  *exec.Cmd
	log  string // its stderr
	// exited is closed when the process ended, with err its Wait's.
	exited chan struct{}
	err    error
}

var listening = regexp.MustCompile(`gateway listening: url=(http://127\.0\.0\.1:\d+)`)

// startReplica starts the gateway on the kubernetes executor of kubeconfig
// as instance name, with a data directory of its own (replicas share
// nothing but the cluster), and waits until it listens. A replica still
// running when the test ends is killed; its log is printed when the test
// failed.
func startReplica(t *testing.T, name, kubeconfig string) *replica {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	args, err := json.Marshal([]string{"-addr", "127.0.0.1:0", "-dir", "..", "-data", filepath.Join(dir, "data"), "-offline", "always",
		"-executor", "kubernetes", "-kubeconfig", kubeconfig, "-storage-class", "agentbox-local", "-image-pull-policy", "Never",
		"-instance", name})
	require.NoError(t, err)
	r := &replica{name: name, log: filepath.Join(dir, "stderr"), exited: make(chan struct{})}
	logf, err := os.Create(r.log)
	require.NoError(t, err)
	defer func() { _ = logf.Close() }()
	r.cmd = exec.Command(self, "-test.run=^$")
	r.cmd.Env = append(os.Environ(), replicaArgsEnv+"="+string(args))
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	require.NoError(t, r.cmd.Start())
	go func() {
		r.err = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(r.log)
			t.Logf("replica %s:\n%s", name, b)
		}
	})
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(r.log)
		if m := listening.FindSubmatch(b); m != nil {
			r.url = string(m[1])
			return true
		}
		return r.cmd.ProcessState != nil
	}, 2*time.Minute, 50*time.Millisecond, "replica %s did not start", name)
	require.NotEmpty(t, r.url, "replica %s exited before it listened", name)
	return r
}

// runsLog is the command each turn of the spread phase runs: it appends
// when its run started and ended to runs.log in the chat's workspace and
// prints the file, so the later turn of a chat prints both turns' runs.
// The clock is the kernel's uptime in centiseconds (the image's busybox
// date has only seconds), the same for every pod of the node.
const runsLog = "$ echo start $(cut -d' ' -f1 /proc/uptime) >> runs.log; sleep 0.5; echo end $(cut -d' ' -f1 /proc/uptime) >> runs.log; cat runs.log"

// runIntervals parses what runsLog printed into [start, end] pairs, in
// the file's order.
func runIntervals(t *testing.T, answer string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	sc := bufio.NewScanner(strings.NewReader(answer))
	for sc.Scan() {
		kind, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		n, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			continue
		}
		switch kind {
		case "start":
			out = append(out, [2]float64{n, 0})
		case "end":
			require.NotEmpty(t, out, "end before any start: %s", answer)
			require.Zero(t, out[len(out)-1][1], "two ends in a row, runs interleaved: %s", answer)
			out[len(out)-1][1] = n
		}
	}
	return out
}

// TestReplicasKubernetes runs two example gateways as separate processes
// against one cluster (internal/k8s/test.sh sets AGENTBOX_KUBECONFIG to the
// gateway's service account). 20 chats get two turns each, sent at the
// same moment, one to each replica: the runs each turn's agent records in
// the chat's workspace never overlap. Then one replica is killed with
// SIGKILL while its agents run: the other serves a chat of the dead one
// once the chat's lease expired, the dead replica's pods are removed (the
// chat's by the takeover, the other by the reconciler), and when the
// surviving replica shuts down no pod and no lease is left in the
// namespace; only the chats' workspace claims stay.
func TestReplicasKubernetes(t *testing.T) {
	kc := testenv.RequireCluster(t)
	ctx := t.Context()
	obs, err := kubernetes.New(ctx, kubernetes.Options{Kubeconfig: kc, InstanceID: "replicas-test-observer", ReconcileInterval: -1})
	require.NoError(t, err)
	defer func() { assert.NoError(t, obs.Close()) }()
	replicas := []*replica{startReplica(t, "replica-a", kc), startReplica(t, "replica-b", kc)}
	// Workspace claims outlive the test: chats of this run are its own.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	// Spread: every chat's two turns at once, one on each replica; two
	// chats at a time.
	const chats = 20
	type result struct {
		chat, replica int
		status        int
		answer        string
	}
	results := make(chan result, 2*chats)
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range chats {
		sem <- struct{}{}
		var turns sync.WaitGroup
		for r := range replicas {
			turns.Go(func() {
				status, body := postChat(ctx, replicas[r].url, fmt.Sprintf("user-%d", c), fmt.Sprintf("spread-%d-%s", c, run), runsLog)
				results <- result{chat: c, replica: r, status: status, answer: body}
			})
		}
		wg.Go(func() {
			turns.Wait()
			<-sem
		})
	}
	wg.Wait()
	close(results)
	t.Logf("%d turns of %d chats over two replicas in %v", 2*chats, chats, time.Since(start).Round(time.Millisecond))
	byChat := map[int][]result{}
	for res := range results {
		require.Equal(t, http.StatusOK, res.status, "chat %d on replica %d: %s", res.chat, res.replica, res.answer)
		byChat[res.chat] = append(byChat[res.chat], res)
	}
	first := [2]int{}
	for c := range chats {
		require.Len(t, byChat[c], 2)
		a, b := runIntervals(t, byChat[c][0].answer), runIntervals(t, byChat[c][1].answer)
		if len(a) > len(b) {
			a, b = b, a
			byChat[c][0], byChat[c][1] = byChat[c][1], byChat[c][0]
		}
		require.Len(t, a, 1, "chat %d: the first turn saw only its own run: %s", c, byChat[c][0].answer)
		require.Len(t, b, 2, "chat %d: the second turn saw both runs: %s", c, byChat[c][1].answer)
		assert.Equal(t, a[0], b[0], "chat %d: the first run as both turns saw it", c)
		assert.Less(t, b[0][1], b[1][0], "chat %d: the runs overlap: %v", c, b)
		first[byChat[c][0].replica]++
	}
	t.Logf("chats whose first turn ran on replica a, b: %v", first)

	// Kill -9 replica a while two of its agents run.
	dead, live := replicas[0], replicas[1]
	// Not `sleep 600`: Claude Code 2.1.330 refuses a command that starts
	// with a long sleep, and the run would end before the kill.
	running := make(chan string, 2)
	ended := make(chan error, 2)
	dies := []string{"dies-1-" + run, "dies-2-" + run}
	for _, chat := range dies {
		go func() {
			_, err := chatRequest(ctx, newClient(dead.url, "killed", chat), chat, "$ "+longCommand, func(ext extension, _ string) {
				if ext.Tool != nil && ext.Tool.Name == "Bash" {
					running <- chat
				}
			})
			ended <- err
		}()
	}
	for range 2 {
		select {
		case <-running:
		case err := <-ended:
			t.Fatalf("a run of replica a ended before the kill: %v", err)
		case <-time.After(3 * time.Minute):
			t.Fatal("the agents of replica a did not start their command")
		}
	}
	// podsOf lists inst's pods: its sandbox pods, and its checkpoint pods
	// too if withCheckpoints (those of turns that ended just before run
	// beside the sandboxes).
	podsOf := func(inst string, withCheckpoints bool) []string {
		inv, err := obs.Inventory(ctx)
		require.NoError(t, err)
		var names []string
		for _, p := range inv.Pods {
			if p.Instance == inst && (withCheckpoints || !p.Checkpoint) {
				names = append(names, p.Name+" ("+p.Chat+")")
			}
		}
		return names
	}
	require.Len(t, podsOf(dead.name, false), 2, "replica a's two sandbox pods")
	t.Logf("replica a's pods at the kill: %v", podsOf(dead.name, true))
	require.NoError(t, dead.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	<-dead.exited
	require.Error(t, dead.err, "replica a was killed")
	// Both runs were still going: their answers never came.
	for range 2 {
		require.Error(t, <-ended, "a run of replica a answered, so it ended before the kill")
	}

	status, body := postChat(ctx, live.url, "killed", dies[0], "$ echo taken over")
	served := time.Since(killed)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "taken over")
	t.Logf("chat %s answered by replica b %v after replica a was killed (lease %v + skew %v)", dies[0], served.Round(time.Millisecond),
		kubernetes.DefaultLeaseDuration, kubernetes.DefaultClockSkew)
	// a renewed the lease at most a third of its duration before it died.
	assert.Greater(t, served, kubernetes.DefaultLeaseDuration*2/3, "replica b ran the chat before replica a's lease expired")

	require.Eventually(t, func() bool { return len(podsOf(dead.name, true)) == 0 }, 3*time.Minute, 250*time.Millisecond,
		"replica a's pods are still there")
	t.Logf("replica a's pods gone %v after it was killed", time.Since(killed).Round(time.Millisecond))

	require.NoError(t, live.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-live.exited:
		require.NoError(t, live.err, "replica b's exit")
	case <-time.After(2 * time.Minute):
		t.Fatal("replica b did not shut down")
	}
	inv, err := obs.Inventory(ctx)
	require.NoError(t, err)
	var left []string
	for _, p := range inv.Pods {
		left = append(left, "pod "+p.Name+" of "+p.Instance)
	}
	for _, l := range inv.Leases {
		if l.Instance != obs.Instance() {
			left = append(left, "lease "+l.Name+" of "+l.Instance)
		}
	}
	assert.Empty(t, left, "left in the namespace after replica b shut down")
	var claims []string
	for _, c := range inv.Claims {
		if strings.HasSuffix(c.Chat, "-"+run) && !c.Checkpoint {
			claims = append(claims, c.User+"/"+c.Chat)
		}
	}
	for c := range chats {
		assert.Contains(t, claims, fmt.Sprintf("user-%d/spread-%d-%s", c, c, run))
	}
	assert.Subset(t, claims, []string{"killed/" + dies[0], "killed/" + dies[1]})
	t.Logf("workspace claims kept for this test's chats: %d", len(claims))
}

// postChat sends one non-streamed chat request for the coder assistant
// and returns the status and the answer's text (the body, or the error,
// when it is not a completion). It is safe to call from any goroutine.
func postChat(ctx context.Context, url, user, chat, prompt string) (int, string) {
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": %q}]}`, demoAssistant, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("X-Agentbox-User", user)
	req.Header.Set("X-Agentbox-Chat", chat)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	var comp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err.Error()
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &comp) != nil || len(comp.Choices) == 0 {
		return resp.StatusCode, string(raw)
	}
	return resp.StatusCode, comp.Choices[0].Message.Content
}

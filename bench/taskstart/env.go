package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// binaries are the four programs the benchmark runs. podium-runner must sit
// next to podium-agent: that is where the agent looks for it.
type binaries struct {
	podium, agent, runner, coordinator string
}

func binariesIn(dir string) binaries {
	return binaries{
		podium:      filepath.Join(dir, "podium"),
		agent:       filepath.Join(dir, "podium-agent"),
		runner:      filepath.Join(dir, "podium-runner"),
		coordinator: filepath.Join(dir, "podium-coordinator"),
	}
}

// findBinaries takes the binaries from dir, or builds them into work the way
// `make build` does (static, since podium-runner runs inside an image with no
// C library), so that a plain `go run` measures the code in the working tree.
func findBinaries(ctx context.Context, log *slog.Logger, dir, work string) (binaries, error) {
	if dir != "" {
		b := binariesIn(dir)
		for _, p := range []string{b.podium, b.agent, b.runner, b.coordinator} {
			if _, err := os.Stat(p); err != nil {
				return b, fmt.Errorf("-bin %s: %v (run `make build` first, or leave -bin empty to build them)", dir, err)
			}
		}
		return b, nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return binaries{}, fmt.Errorf("find the module root to build the binaries (run from the repository, or pass -bin bin after `make build`): %v", err)
	}
	dest := filepath.Join(work, "bin")
	log.Info("building podium, podium-agent, podium-runner and podium-coordinator")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", dest+"/",
		"./cmd/podium", "./cmd/podium-agent", "./cmd/podium-runner", "./cmd/podium-coordinator")
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return binaries{}, fmt.Errorf("build the binaries: %v\n%s", err, b)
	}
	return binariesIn(dest), nil
}

// env is a coordinator on a throwaway Postgres with one enrolled agent.
type env struct {
	bins  binaries
	url   string
	token string
	node  string
	coord *benchkit.Process
	agent *benchkit.Process
	api   *api
}

// startEnv starts everything, appending what undoes each step to cleanups as
// soon as the step is done, so that a failure or ^C half-way still cleans up.
func startEnv(ctx context.Context, log *slog.Logger, bins binaries, work string, networkPool int, durable bool, cleanups *[]func()) (*env, error) {
	e := &env{bins: bins, token: randomToken()}

	log.Info("starting Postgres", "durable", durable)
	cluster, err := pgtest.StartCluster(benchkit.PostgresSettings(durable)...)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, cluster.Stop)
	dbURL, err := benchkit.CreateDB(ctx, cluster, "taskstart")
	if err != nil {
		return nil, err
	}

	port, err := benchkit.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	e.url = "http://" + addr
	log.Info("starting the coordinator", "url", e.url)
	e.coord, err = benchkit.StartProcess(filepath.Join(work, "coordinator.log"), []string{"PODIUM_TOKEN=" + e.token},
		bins.coordinator, "serve", "--database", dbURL, "--listen", addr)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, func() { _ = e.coord.Stop(10 * time.Second) })
	if err := benchkit.WaitReady(ctx, e.url, e.coord.LogPath, e.coord.Exited, func() error { return e.coord.WaitErr }, 30*time.Second); err != nil {
		return nil, err
	}
	e.api = newAPI(e.url, e.token)

	enroll, err := e.podium(ctx, "token", "create", "--label", "bench")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(work, "agent")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bins.agent, "enroll", "--coordinator", e.url, "--data-dir", data)
	cmd.Env = append(os.Environ(), "PODIUM_ENROLL_TOKEN="+strings.TrimSpace(enroll))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("podium-agent enroll: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	e.node = strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(e.node, "node_") {
		return nil, fmt.Errorf("podium-agent enroll printed no node id:\n%s%s", out, stderr.String())
	}

	log.Info("starting the agent", "node", e.node, "network_pool", networkPool)
	e.agent, err = benchkit.StartProcess(filepath.Join(work, "agent.log"), nil, bins.agent, "run", "--data-dir", data,
		"--network-pool", strconv.Itoa(networkPool))
	if err != nil {
		return nil, err
	}
	// Stopping the agent leaves its tasks running by design, so whatever of
	// its node is still in the engine is removed after it has stopped.
	*cleanups = append(*cleanups, func() {
		_ = e.agent.Stop(30 * time.Second)
		removeDockerObjects("podium.node=" + e.node)
	})
	if err := e.waitOnline(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return e, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "bench-" + hex.EncodeToString(b)
}

// waitOnline waits until the node holds a stream to the replica.
func (e *env) waitOnline(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		res, err := e.api.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err == nil {
			for _, n := range res.Msg.GetNodes() {
				if n.GetId() == e.node && n.GetStatus() == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.GetReplica() != "" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s was not online within %s (last error: %v); agent log:\n%s", e.node, within, err, benchkit.Tail(e.agent.LogPath, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.agent.Exited:
			return fmt.Errorf("the agent exited at start: %v\n%s", e.agent.WaitErr, benchkit.Tail(e.agent.LogPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// podium runs a podium command to its end and returns its stdout.
func (e *env) podium(ctx context.Context, args ...string) (string, error) {
	cmd := e.podiumCmd(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// podiumCmd is a podium command speaking to this coordinator. Cancelling ctx
// sends it SIGINT, as ^C would: `podium run` then cancels its task and waits
// for it to end rather than leaving it behind.
func (e *env) podiumCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.bins.podium, args...)
	cmd.Env = append(os.Environ(), "PODIUM_SERVER="+e.url, "PODIUM_TOKEN="+e.token)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 15 * time.Second
	return cmd
}

// warnings lists the WARN and ERROR lines the coordinator and the agent
// logged, a few of each: a run that went wrong somewhere usually says so there.
func (e *env) warnings() string {
	var b strings.Builder
	for _, p := range []*benchkit.Process{e.coord, e.agent} {
		n, sample := benchkit.LogWarnings(p.LogPath, 3)
		if n == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s log: %d WARN/ERROR lines, e.g.:\n", filepath.Base(p.LogPath), n)
		for _, s := range sample {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	return b.String()
}

// api is the coordinator's API, for waiting on the node and reading tasks.
type api struct {
	tasks podiumv1connect.TaskServiceClient
	admin podiumv1connect.AdminServiceClient
}

func newAPI(url, token string) *api {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: bearer{token: token, next: &http.Transport{Protocols: &p}}}
	return &api{tasks: podiumv1connect.NewTaskServiceClient(hc, url), admin: podiumv1connect.NewAdminServiceClient(hc, url)}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// removeDockerObjects force-removes the containers, networks and volumes
// carrying a label (key=value), with the docker CLI and a deadline of its own:
// it runs during cleanup, after ^C has cancelled the benchmark's context.
func removeDockerObjects(label string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list := func(args ...string) []string {
		out, err := exec.CommandContext(ctx, "docker", args...).Output()
		if err != nil {
			return nil
		}
		return strings.Fields(string(out))
	}
	if ids := list("ps", "-aq", "--filter", "label="+label); len(ids) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
	}
	if ids := list("network", "ls", "-q", "--filter", "label="+label); len(ids) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"network", "rm"}, ids...)...).Run()
	}
	if ids := list("volume", "ls", "-q", "--filter", "label="+label); len(ids) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"volume", "rm", "-f"}, ids...)...).Run()
	}
}

func dockerVersion() string {
	out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

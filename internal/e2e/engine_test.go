package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/internal/testenv/coordtest"
	"github.com/podiumhq/podium/internal/testenv/dockertest"
	"github.com/podiumhq/podium/internal/testenv/wait"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The Docker engine restarted under a running task, as `systemctl restart
// docker` does (SIGTERM: the engine stops its containers as it goes) and as
// a crash and a restart by systemd do (SIGKILL: the containers outlive the
// engine, and the restarted engine stops them). Each time, the task fails
// with a reason saying the engine restarted, podium run exits 125 (the task
// did nothing wrong), nothing of the task is left in the engine once it is
// back, and the node runs the next task.
func TestDockerEngineRestartFailsTheTaskAsInfrastructureAndLeavesNothing(t *testing.T) {
	t.Parallel()
	pe := dockertest.StartPrivateEngine(t)
	e := newEnvFull(t, coordtest.Options{}, nil, nil, []string{"DOCKER_HOST=" + pe.Host()})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		engineRestartRound(t, e, pe, sig)
	}
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", "echo next")
	if r.code != 0 || string(r.stdout) != "next\n" {
		t.Fatalf("the task after the engine's restarts exited %d with stdout %q, want 0 and %q; stderr:\n%s",
			r.code, r.stdout, "next\n", r.stderr)
	}
	waitNothingLeft(t, pe.Client(), e.node, "after the next task")
}

// engineRestartRound runs a task, restarts the engine with sig once the task
// has printed, and checks what the user and the engine show afterwards.
func engineRestartRound(t *testing.T, e *env, pe *dockertest.PrivateEngine, sig syscall.Signal) {
	t.Helper()
	cmd := e.podiumCmd("run", "--image", e.image, "--", "sh", "-c", "echo started; sleep 600")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wait.For(t, 2*time.Minute, "the task to print that it started", func() bool { return stdout.String() == "started\n" })

	pe.Restart(sig)

	var err error
	select {
	case err = <-exited:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-exited
		t.Fatalf("engine restarted with %v: podium run did not exit within 3 minutes (killed: %v); stderr:\n%s", sig, err, stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	id := result{stderr: []byte(stderr.String())}.taskID(t)
	tk := e.task(id)
	if code != 125 {
		t.Errorf("engine restarted with %v: podium run exited %d, want 125 (an infrastructure failure); task %s is %v, reason %q; stderr:\n%s",
			sig, code, id, tk.GetState(), tk.GetReason(), stderr.String())
	}
	if tk.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(tk.GetReason(), "engine restarted") {
		t.Errorf("engine restarted with %v: task %s is %v with reason %q, want failed with a reason saying the engine restarted",
			sig, id, tk.GetState(), tk.GetReason())
	}
	if !strings.Contains(stderr.String(), "engine restarted") {
		t.Errorf("engine restarted with %v: podium run's stderr does not say the engine restarted:\n%s", sig, stderr.String())
	}
	if stdout.String() != "started\n" {
		t.Errorf("engine restarted with %v: stdout %q, want the task's %q", sig, stdout.String(), "started\n")
	}
	if logs := e.podium("logs", id); logs.code != 0 || string(logs.stdout) != "started\n" {
		t.Errorf("engine restarted with %v: podium logs exited %d with %q, want the stored output %q", sig, logs.code, logs.stdout, "started\n")
	}
	waitNothingLeft(t, pe.Client(), e.node, fmt.Sprintf("after the engine restarted with %v", sig))
}

// waitNothingLeft waits until the engine holds no container, network or
// volume of the node: the task's teardown comes after its status, and may
// have to wait for the engine to be back.
func waitNothingLeft(t *testing.T, c *client.Client, node, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := leftovers(c, "podium.node="+node)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after 2m waiting for nothing of node %s to be left in the engine %s; still there: %s",
				node, when, strings.Join(left, ", "))
		}
		time.Sleep(wait.Poll)
	}
}

// leftovers lists the containers, networks and volumes matching label, and
// why they could not be listed if they could not.
func leftovers(c *client.Client, label string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", label))
	var left []string
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return []string{"containers: " + err.Error()}
	}
	for _, ct := range cs {
		left = append(left, fmt.Sprintf("container %v (%s)", ct.Names, ct.State))
	}
	nets, err := c.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return append(left, "networks: "+err.Error())
	}
	for _, n := range nets {
		left = append(left, "network "+n.Name)
	}
	vols, err := c.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return append(left, "volumes: "+err.Error())
	}
	for _, v := range vols.Volumes {
		left = append(left, "volume "+v.Name)
	}
	return left
}

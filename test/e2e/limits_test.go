package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The real agent's limit flags, end to end: its default user is who a task
// runs as unless the spec says otherwise; a fork bomb fails its task with
// "pids limit"; and a task above the node's maximum is not sent to it, the
// task saying why it waits.
func TestNodeLimitsAndDefaultUser(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []string{"--default-user", "65534:65534", "--default-pids", "64", "--max-memory", "256MiB"})

	if r := e.podium("run", "--image", e.image, "--", "id", "-u"); r.code != 0 || string(r.stdout) != "65534\n" {
		t.Errorf("under --default-user 65534:65534, id -u printed %q and exited %d, want 65534 and 0\n%s", r.stdout, r.code, r.stderr)
	}
	if r := e.podium("run", "--image", e.image, "--user", "1000:1000", "--", "id", "-u"); r.code != 0 || string(r.stdout) != "1000\n" {
		t.Errorf("with --user 1000:1000, id -u printed %q and exited %d, want 1000 and 0\n%s", r.stdout, r.code, r.stderr)
	}

	r := e.podium("run", "--image", e.image, "--", "sh", "-c", "f() { f | f & }; f; sleep 600")
	if tk := e.task(r.taskID(t)); r.code == 0 || tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.Reason, "pids limit") {
		t.Errorf("a fork bomb: exit %d, task %v; want it failed with a reason starting \"pids limit\"", r.code, tk)
	}

	spec := e.specFile("image: " + e.image + "\ncommand: [echo, ran]\nresources: {memory_mb: 512}\n")
	r = e.podium("run", "--detach", "--spec", spec)
	id := strings.TrimSpace(string(r.stdout))
	if r.code != 0 || !taskIDRe.MatchString(id) {
		t.Fatalf("podium run --detach: exit %d, stdout %q", r.code, r.stdout)
	}
	const why = "cannot run on any node: no node allows 512 MiB of memory for one task (largest: 256 MiB)"
	coordtest.Eventually(t, 30*time.Second, "the task to wait, unschedulable, saying "+why, func() bool {
		tk := e.task(id)
		return tk.State == podiumv1.TaskState_TASK_STATE_QUEUED && tk.Reason == why && tk.GetUnschedulable()
	})
	if out := e.podium("task", "cancel", id); out.code != 0 {
		t.Fatalf("podium task cancel: exit %d\n%s", out.code, out.stderr)
	}
}

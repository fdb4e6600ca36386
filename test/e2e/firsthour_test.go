package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// TestFirstHour walks a team's first hour on a real coordinator (with a
// secrets key) and agent, as README shows it, through the real CLI: the
// admin adds a member and stores a secret granted to her; she runs a named
// task with -e and the secret, which prints both (the secret only as its
// length) and exits with its code; she finds it by name in `podium tasks
// --json`, whose states are lower-case words and numbers numbers; a task no
// node could ever run is told so as unschedulable, not left to wait; a queue
// timeout fails one with its reason and podium run exits 125; and she may
// not read the secret list's grants, nor rotate someone else's token.
func TestFirstHour(t *testing.T) {
	t.Parallel()
	e := newEnvOpts(t, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)}, nil)
	as := func(token, stdin string, args ...string) result {
		t.Helper()
		cmd := e.podiumCmd(args...)
		if token != "" {
			cmd.Env = append(cmd.Env, "PODIUM_TOKEN="+token) // the last value wins
		}
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: cmd.ProcessState.ExitCode()}
	}
	admin := func(stdin string, args ...string) result { t.Helper(); return as("", stdin, args...) }

	r := admin("", "user", "add", "alice", "--role", "member")
	alice := strings.TrimSpace(string(r.stdout))
	if r.code != 0 || !strings.HasPrefix(alice, "podium_ut_") {
		t.Fatalf("user add alice: exit %d:\n%s", r.code, r.stderr)
	}
	if r := admin("hunter2-secret\n", "secret", "set", "db-password", "--allow", "alice"); r.code != 0 {
		t.Fatalf("secret set: exit %d:\n%s", r.code, r.stderr)
	}

	r = as(alice, "", "run", "--name", "deploy", "-e", "STAGE=prod", "--secret", "db-password=DB_PASSWORD", "--image", e.image, "--",
		"sh", "-c", `echo "deploying to $STAGE with a ${#DB_PASSWORD}-byte password"; exit 4`)
	if r.code != 4 || string(r.stdout) != "deploying to prod with a 14-byte password\n" || bytes.Contains(r.stdout, []byte("hunter2")) {
		t.Fatalf("alice's named task: exit %d (want 4), stdout %q; stderr:\n%s", r.code, r.stdout, tail(r.stderr))
	}
	deploy := r.taskID(t)

	r = as(alice, "", "tasks", "--name", "deploy", "--json")
	var listed []map[string]any
	if err := json.Unmarshal(r.stdout, &listed); err != nil || r.code != 0 || len(listed) != 1 {
		t.Fatalf("tasks --name deploy --json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	got := listed[0]
	spec, _ := got["spec"].(map[string]any)
	if got["id"] != deploy || got["state"] != "failed" || got["exit_code"] != float64(4) || spec["name"] != "deploy" || got["requested_by"] != "alice" {
		t.Errorf("the listed task: %v; want alice's deploy, state \"failed\", exit_code 4 as a number", got)
	}

	// A task no node could ever hold is told so while it waits.
	r = as(alice, "", "run", "-d", "--memory", "900000m", "--image", e.image, "--", "true")
	if r.code != 0 {
		t.Fatalf("run -d of a task too big for any node: exit %d:\n%s", r.code, r.stderr)
	}
	huge := strings.TrimSpace(string(r.stdout))
	var get result
	wait.For(t, 60*time.Second, "task get to say the too-big task is queued, unschedulable", func() bool {
		get = as(alice, "", "task", "get", huge)
		return strings.Contains(string(get.stdout), "queued, unschedulable")
	})
	if !strings.Contains(string(get.stdout), "cannot run on any node") || !strings.Contains(string(get.stdout), "MiB") {
		t.Errorf("task get of the too-big task does not say why no node can run it:\n%s", get.stdout)
	}
	if r := as(alice, "", "task", "cancel", huge); r.code != 0 {
		t.Errorf("cancel the too-big task: exit %d:\n%s", r.code, r.stderr)
	}

	// A queue timeout fails one, with its reason; podium run exits 125.
	r = as(alice, "", "run", "--queue-timeout", "3s", "--memory", "900000m", "--image", e.image, "--", "true")
	if r.code != 125 || !strings.Contains(string(r.stderr), "waited 3s in the queue without a node (queue_timeout)") {
		t.Errorf("run --queue-timeout 3s of a task no node can run: exit %d (want 125):\n%s", r.code, r.stderr)
	}

	// What a member may not do is refused with what she can do instead.
	if r := as(alice, "", "user", "rotate-token", "admin"); r.code != 125 || !strings.Contains(string(r.stderr), "ask an admin") {
		t.Errorf("alice rotating another's token: exit %d:\n%s", r.code, r.stderr)
	}
	if r := as(alice, "", "secret", "ls"); r.code != 0 || !strings.Contains(string(r.stdout), "db-password") || strings.Contains(string(r.stdout), "alice") {
		t.Errorf("alice's secret ls (want db-password, without its grants): exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

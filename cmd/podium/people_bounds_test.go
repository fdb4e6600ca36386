package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/cron"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// The people commands of issue 28 against a real coordinator: user add
// --group and user set-groups (a bad group refused naming it), user ls's
// GROUPS, whoami's groups, user add token refused as reserved, a member's
// priority over the cap and a group not theirs refused saying how, and a
// schedule paused because its owner was removed showing why in schedule
// ls and get.
func TestPeopleBoundsCommandsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	at := time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)
	r := coordtest.Start(t, db.URL, coordtest.Options{Schedules: cron.Config{Now: func() time.Time { return at }}})
	podiumAs := func(token string, args ...string) (int, string, string) {
		tc := newTestCLI(map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": token})
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	podium := func(args ...string) (int, string, string) { return podiumAs(coordtest.Token, args...) }

	code, aliceTok, errOut := podium("user", "add", "alice", "--role", "member", "--group", "ml")
	aliceTok = strings.TrimSpace(aliceTok)
	if code != 0 || !strings.Contains(errOut, "alice is a member in ml") {
		t.Fatalf("user add --group: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("user", "add", "token", "--role", "member"); code != exitPodium || !strings.Contains(errOut, `"token" is reserved`) {
		t.Errorf("user add token: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("user", "set-groups", "alice", "ml sweeps"); code != exitPodium || !strings.Contains(errOut, `"ml sweeps" is not a group name`) {
		t.Errorf("set-groups with a space: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("user", "set-groups"); code != exitUsage || !strings.Contains(errOut, "want NAME") {
		t.Errorf("set-groups without a name: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("user", "set-groups", "alice", "ml", "infra"); code != 0 || !strings.Contains(errOut, "alice now belongs to infra, ml") {
		t.Fatalf("set-groups: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("user", "ls"); code != 0 || !strings.Contains(out, "GROUPS") || !strings.Contains(out, "infra,ml") {
		t.Errorf("user ls: exit %d:\n%s", code, out)
	}
	if code, out, _ := podiumAs(aliceTok, "whoami"); code != 0 || !strings.Contains(out, "groups:") || !strings.Contains(out, "infra, ml") {
		t.Errorf("alice's whoami: exit %d:\n%s", code, out)
	}
	if code, out, _ := podium("whoami"); code != 0 || !strings.Contains(out, "any (an admin may submit to any group)") {
		t.Errorf("the bootstrap token's whoami: exit %d:\n%s", code, out)
	}

	code, _, errOut = podiumAs(aliceTok, "run", "--detach", "--priority", "5", "--image", "busybox")
	if code != exitPodium || !strings.Contains(errOut, "spec.priority: 5 is above 0") || !strings.Contains(errOut, "--max-member-priority") {
		t.Errorf("alice's run at priority 5: exit %d:\n%s", code, errOut)
	}
	spec := filepath.Join(t.TempDir(), "ops.yaml")
	if err := os.WriteFile(spec, []byte("image: busybox\ngroup: ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = podiumAs(aliceTok, "run", "--detach", "--spec", spec)
	if code != exitPodium || !strings.Contains(errOut, "alice's groups are infra, ml") || !strings.Contains(errOut, "podium user set-groups alice infra ml ops") {
		t.Errorf("alice's run in group ops: exit %d:\n%s", code, errOut)
	}

	if code, _, errOut := podiumAs(aliceTok, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--spec", spec); code != exitPodium ||
		!strings.Contains(errOut, `alice may not submit to group "ops"`) {
		t.Errorf("alice's schedule in group ops: exit %d:\n%s", code, errOut)
	}
	if err := os.WriteFile(spec, []byte("image: busybox\ngroup: ml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := podiumAs(aliceTok, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--spec", spec); code != 0 {
		t.Fatalf("alice's schedule in ml: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("user", "rm", "alice"); code != 0 {
		t.Fatalf("user rm alice: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("schedule", "ls"); code != 0 || !strings.Contains(out, "WHY PAUSED") || !strings.Contains(out, "its owner alice was removed by token") {
		t.Errorf("schedule ls after removing its owner: exit %d:\n%s", code, out)
	}
	if code, out, _ := podium("schedule", "get", "nightly"); code != 0 || !strings.Contains(out, "paused by the coordinator: its owner alice was removed") {
		t.Errorf("schedule get after removing its owner: exit %d:\n%s", code, out)
	}
	if code, _, errOut := podium("schedule", "resume", "nightly"); code != exitPodium || !strings.Contains(errOut, "cannot resume schedule nightly") {
		t.Errorf("resuming it: exit %d:\n%s", code, errOut)
	}
}

// task get of a queued task waiting on its concurrency key names the tasks
// holding the key, with their owners and states.
func TestTaskGetNamesConcurrencyHolders(t *testing.T) {
	f := newFake(t)
	f.task = &podiumv1.Task{Id: "task_01WAIT", State: podiumv1.TaskState_TASK_STATE_QUEUED, RequestedBy: "alice",
		Spec:               &podiumv1.TaskSpec{Image: "busybox", Concurrency: &podiumv1.Concurrency{Key: "deploy-prod", Limit: 1, OnConflict: "cancel_older"}},
		ConcurrencyHolders: []*podiumv1.ConcurrencyHolder{{TaskId: "task_01HOLD", RequestedBy: "token", State: podiumv1.TaskState_TASK_STATE_RUNNING}}}
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url(), "PODIUM_TOKEN": "t"})
	if code := cli.run(t, "task", "get", "task_01WAIT"); code != 0 {
		t.Fatalf("task get: exit %d:\n%s", code, cli.errOut)
	}
	if out := cli.out.String(); !strings.Contains(out, "waits for:") || !strings.Contains(out, "task_01HOLD (token, running)") {
		t.Errorf("task get does not name the key's holder:\n%s", out)
	}
}

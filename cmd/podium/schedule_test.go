package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// podium schedule create/ls/get/pause/resume/run-now/rm against a real
// coordinator: what each prints, a bad expression or zone refused with what
// is wrong and nothing stored, and run-now's task shown by get.
func TestScheduleCommandsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	// The schedule job's clock stands still: only run-now creates tasks.
	at := time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)
	r := coordtest.Start(t, db.URL, coordtest.Options{Schedules: cron.Config{Now: func() time.Time { return at }}})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	spec := filepath.Join(t.TempDir(), "backup.yaml")
	if err := os.WriteFile(spec, []byte("image: busybox\ncommand: [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"schedule", "create", "b", "--cron", "61 * * * *", "--spec", spec}, exitPodium, "cron: \"61 * * * *\" is not a 5-field cron expression"},
		{[]string{"schedule", "create", "b", "--cron", "* * * * *", "--timezone", "Europe/Atlantis", "--spec", spec}, exitPodium, "timezone: \"Europe/Atlantis\" is not an IANA time zone name"},
		{[]string{"schedule", "create", "b", "--cron", "* * * * *", "--overlap", "queue", "--spec", spec}, exitPodium, "overlap: \"queue\""},
		{[]string{"schedule", "create", "b", "--spec", spec}, exitUsage, "--cron: required"},
		{[]string{"schedule", "create", "b", "--cron", "* * * * *"}, exitUsage, "--spec: required"},
		{[]string{"schedule", "create", "--cron", "* * * * *", "--spec", spec}, exitUsage, "want the schedule's NAME"},
	} {
		if code, _, errOut := podium(c.args...); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("podium %s: exit %d, want %d saying %q:\n%s", c.args, code, c.code, c.says, errOut)
		}
	}
	if code, out, _ := podium("schedule", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("schedule ls after the refusals: %s, want none", out)
	}

	code, _, errOut := podium("schedule", "create", "backup", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin",
		"--overlap", "cancel_previous", "--spec", spec)
	if code != 0 || !strings.Contains(errOut, "schedule backup created; next run 2026-01-06 03:00 CET") {
		t.Fatalf("schedule create: exit %d:\n%s", code, errOut)
	}
	code, out, _ := podium("schedule", "ls")
	if code != 0 || !strings.Contains(out, "NEXT RUN") || !strings.Contains(out, "backup") || !strings.Contains(out, "cancel_previous") ||
		!strings.Contains(out, "active") || !strings.Contains(out, "token") {
		t.Fatalf("schedule ls: exit %d:\n%s", code, out)
	}
	code, _, errOut = podium("schedule", "run-now", "backup")
	if code != 0 || !strings.Contains(errOut, "created by schedule backup") {
		t.Fatalf("schedule run-now: exit %d:\n%s", code, errOut)
	}
	task := strings.Fields(strings.TrimPrefix(strings.TrimSpace(errOut), "→ task "))[0]
	code, out, _ = podium("schedule", "get", "backup")
	if code != 0 || !strings.Contains(out, "0 3 * * * (Europe/Berlin)") || !strings.Contains(out, task) || !strings.Contains(out, "run now") ||
		!strings.Contains(out, "busybox") {
		t.Fatalf("schedule get: exit %d:\n%s", code, out)
	}
	if code, _, errOut := podium("schedule", "pause", "backup"); code != 0 || !strings.Contains(errOut, "schedule backup paused") {
		t.Fatalf("schedule pause: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("schedule", "ls"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("schedule ls after pause:\n%s", out)
	}
	if code, _, errOut := podium("schedule", "resume", "backup"); code != 0 || !strings.Contains(errOut, "resumed; next run 2026-01-06 03:00 CET") {
		t.Fatalf("schedule resume: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("schedule", "rm", "backup"); code != 0 || !strings.Contains(errOut, "schedule backup removed") {
		t.Fatalf("schedule rm: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("schedule", "get", "backup"); code == 0 || !strings.Contains(errOut, "no schedule called backup") {
		t.Fatalf("schedule get after rm: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("task", "get", task); code != 0 || !strings.Contains(out, task) {
		t.Fatalf("the run-now task after rm: exit %d:\n%s", code, out)
	}
}

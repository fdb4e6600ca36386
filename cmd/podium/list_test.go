package main

import (
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/ids"
)

// podium tasks sends each filter and the cursor as given.
func TestTasksFiltersAndCursor(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url()}
	node, after := ids.New("node"), ids.New("task")
	cli := newTestCLI(env)
	before := time.Now()
	if code := cli.run(t, "tasks", "--label", "team=ml", "--node", node, "--since", "3d", "--after", after,
		"--user", "alice", "--limit", "1000", "--state", "failed"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	r := f.listReq
	if r.GetLabel() != "team=ml" || r.GetNode() != node || r.GetAfter() != after || r.GetRequestedBy() != "alice" ||
		r.GetLimit() != 1000 || len(r.GetStates()) != 1 {
		t.Errorf("List request = %v", r)
	}
	since := r.GetSince().AsTime()
	if lo, hi := before.Add(-72*time.Hour), time.Now().Add(-72*time.Hour); since.Before(lo) || since.After(hi) {
		t.Errorf("--since 3d sent %s, want 72h before the command ran (%s to %s)", since, lo, hi)
	}

	cli = newTestCLI(env)
	if code := cli.run(t, "tasks", "--since", "2026-01-02T03:04:05Z"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := f.listReq.GetSince().AsTime().UTC().Format(time.RFC3339); got != "2026-01-02T03:04:05Z" {
		t.Errorf("--since a time sent %s", got)
	}

	// Without flags: the default page of 100, no filter.
	cli = newTestCLI(env)
	if code := cli.run(t, "tasks"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.listReq; r.GetLimit() != 100 || r.GetSince() != nil || r.GetLabel()+r.GetNode()+r.GetAfter() != "" {
		t.Errorf("plain podium tasks sent %v", r)
	}
}

// Each filter is bounded; a bad one is refused naming the flag and what to
// give, and nothing is sent.
func TestTasksRefusesBadFilters(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url()}
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--limit", "0"}, "--limit 0: give 1 to 1000, and read further pages with --after"},
		{[]string{"--limit", "1001"}, "--limit 1001: give 1 to 1000"},
		{[]string{"--label", "a b"}, `--label: label "a b"`},
		{[]string{"--label", strings.Repeat("l", 129)}, "--label: label"},
		{[]string{"--user", strings.Repeat("u", 129)}, "--user: 129 bytes is more than 128"},
		{[]string{"--node", "web-1"}, `--node "web-1" is not a node ID`},
		{[]string{"--after", "task_nope"}, `--after "task_nope" is not a task ID: give the last ID of the previous page`},
		{[]string{"--after", ids.New("node")}, "is not a task ID"},
		{[]string{"--since", "yesterday"}, `--since "yesterday": give a duration back from now (2h, 3d) or a time`},
		{[]string{"--since", future}, "--since " + future + " is in the future: give a time in the past"},
		{[]string{"--since", "-2h"}, `--since "-2h"`},
	} {
		cli := newTestCLI(env)
		if code := cli.run(t, append([]string{"tasks"}, tc.args...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.Contains(cli.errOut.String(), tc.stderr) {
			t.Errorf("%v: stderr:\n%s\nwant %q", tc.args, cli.errOut, tc.stderr)
		}
	}
	if n := len(f.recorded()); n != 0 {
		t.Errorf("refused filters sent %d requests", n)
	}
}

package faults

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/binaries"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// TestRollingUpgrade rolls a running deployment from the previous release
// (packaging/previous-release, built from git) to this tree, the way
// docs/operations.md ("Upgrades") says to: two replicas and an agent of the
// previous release on one Postgres and one object store, with tasks in every
// state; then replica
// A is replaced by this tree's build (which migrates the schema forward)
// while B still runs the old one, and the old B is restarted on the
// migrated schema; tasks are submitted and run through both, with both
// CLIs; then B is replaced; then the agent, with a task running, is replaced
// by this tree's on the same data directory (the same node). Checked:
//   - the tasks the old release finished (succeeded, failed, cancelled) read
//     back through the new replicas as the old ones stored them;
//   - a task of some 40 s started before the upgrade, followed by the old
//     CLI while the replicas are replaced (how far it is at each step is
//     logged), ends with its own code and byte-exact output
//     (Workload.Check), as do the tasks run in the mixed deployment and the
//     one the old agent runs for the new coordinator;
//   - a task running on the old agent from the start to the end, followed
//     by the old CLI through every replacement, takes a message sent through
//     the old replica and, once the new agent has adopted it, one sent
//     through the new replica, and prints both once, in order, as attempt 1;
//   - a task queued under the old release runs once the new agent is there;
//   - an artifact the old agent uploaded through an old replica downloads
//     byte-exact through the new replicas with either CLI, and so does the
//     one the adopted task left for the new agent;
//
// and nothing is left in Docker.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	old, commit := PreviousRelease(t)
	t.Logf("previous release: %s, built in %s", commit, old)
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	emptyDatabase(t, db.URL)
	image := dockertest.EnsureImage(t)
	s3 := s3test.Start(t)
	store := []string{"--s3-endpoint", s3.URL(), "--s3-access-key", s3.AccessKey, "--s3-secret-key", s3.SecretKey}

	// The previous release, running: replicas A and B (the first makes the
	// schema with its own migrations) storing artifacts in one object store,
	// an agent enrolled and running from the same build.
	A := StartReplicaFrom(t, old, db.URL, FreeAddr(t), store...)
	B := StartReplicaFrom(t, old, db.URL, FreeAddr(t), store...)
	oldMigrations := slices.Sorted(maps.Keys(releaseMigrations(t, commit)))
	if applied := appliedMigrations(t, db.URL); !slices.Equal(applied, oldMigrations) {
		t.Fatalf("the previous release's replicas applied %v; want its own migrations %v", applied, oldMigrations)
	}
	both := []string{A.URL(), B.URL()}
	a := EnrollAgentFrom(t, old, A, A.URL())
	a.Start()
	A.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	oldVersion := nodeVersion(t, A, a.Node)

	// Tasks in every state, through the old CLI.
	succeeded := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 0}
	runSucceeded := StartRunFrom(t, old, both, succeeded.Args(t)...)
	succeeded.Check(t, A, runSucceeded)
	failed := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 3}
	runFailed := StartRunFrom(t, old, both, failed.Args(t)...)
	failed.Check(t, B, runFailed)

	runCancelled := StartRunFrom(t, old, both, "--image", image, "--", "sh", "-c", "echo started; exec sleep 600")
	runCancelled.WaitStdout(t, "started\n")
	cancelledID := runCancelled.TaskID(t)
	MustPodium(t, old, both, "task", "cancel", "--reason", "cancelled before the upgrade", cancelledID)
	runCancelled.Wait(t)
	checkCancelled(t, B, cancelledID)

	// An artifact, uploaded by the old agent through an old replica.
	runArtifact := StartRunFrom(t, old, both, "--image", image, "--", "sh", "-c",
		"mkdir -p /workspace/.podium/artifacts && seq 1 5000 > /workspace/.podium/artifacts/old.txt && echo written")
	if code := runArtifact.Wait(t); code != 0 {
		t.Fatalf("the artifact task's podium run exited %d; stderr:\n%s", code, runArtifact.Stderr())
	}
	artifactID := runArtifact.TaskID(t)

	// Queued until the node has a label added after the upgrade.
	queuedID := MustPodium(t, old, both, "run", "--detach", "--label", "rolled=yes", "--image", image, "--",
		"sh", "-c", "echo queued under the old release; echo ran under the new one >&2")
	if s := A.Task(t, queuedID).State; s != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("task %s, which asks for a label no node has, is %s; want queued", queuedID, s)
	}

	// Some 40 s of output, followed by the old CLI, meant to outlast the
	// replacement of the replicas; progress logs how far it got at each step.
	long := Workload{Lines: 200, Every: 200 * time.Millisecond, Code: 0}
	runLong := StartRunFrom(t, old, both, long.Args(t)...)
	runLong.WaitStdout(t, long.Line(3))
	progress := func(step string) {
		holder := "no replica"
		if n, err := A.Node(a.Node); err == nil {
			switch n.Replica {
			case A.ID():
				holder = "replica A"
			case B.ID():
				holder = "replica B"
			}
		}
		t.Logf("%s: the 40 s task has printed %d of its %d lines; the node's stream is on %s",
			step, bytes.Count(runLong.Stdout(), []byte("\n")), long.Lines, holder)
	}

	// Running across the agent's replacement: it waits for two messages,
	// then leaves an artifact for the new agent to upload.
	runInbox := StartRunFrom(t, old, both, "--image", image, "--", "sh", "-c",
		"echo waiting; podium-runner ask; podium-runner ask; "+
			"mkdir -p /workspace/.podium/artifacts && seq 1 3000 > /workspace/.podium/artifacts/inbox.txt; echo done")
	runInbox.WaitStdout(t, "waiting\n")
	inboxID := runInbox.TaskID(t)

	// Replica A becomes this tree's build, which migrates the schema.
	progress("before replica A's replacement")
	A.Replace("")
	if missing := missingMigrations(t, db.URL); len(missing) > 0 {
		t.Fatalf("after this tree's replica started, the database lacks its migrations %v", missing)
	}
	// The old replica still starts and serves on the migrated schema.
	B.Restart()
	A.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	progress("after replica A's replacement and the old B's restart")

	// What the old release finished reads the same through the new replica.
	succeeded.Check(t, A, runSucceeded)
	failed.Check(t, A, runFailed)
	checkCancelled(t, A, cancelledID)
	checkArtifact(t, "", A, artifactID, "old.txt", seq(5000))

	// Mixed versions: a task through each replica, each with its own
	// version's CLI; each read back through the other replica too.
	onNew := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 0}
	runOnNew := StartRunFrom(t, "", []string{A.URL()}, onNew.Args(t)...)
	onOld := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 4}
	runOnOld := StartRunFrom(t, old, []string{B.URL()}, onOld.Args(t)...)
	onNew.Check(t, A, runOnNew)
	onNew.Check(t, B, runOnNew)
	onOld.Check(t, B, runOnOld)
	onOld.Check(t, A, runOnOld)
	// A message through the old replica, with this tree's CLI.
	MustPodium(t, "", []string{B.URL()}, "task", "send", inboxID, "first message")
	runInbox.WaitStdout(t, "first message\n")

	// Replica B becomes this tree's build: the old agent now has only new
	// replicas to talk to.
	progress("before replica B's replacement")
	B.Replace("")
	progress("after replica B's replacement")
	B.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	oldAgent := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 0}
	runOldAgent := StartRunFrom(t, "", both, oldAgent.Args(t)...)
	oldAgent.Check(t, B, runOldAgent)

	// The agent becomes this tree's build, with the inbox task running.
	if s := A.Task(t, inboxID).State; s != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task %s is %s before the agent's replacement; want running", inboxID, s)
	}
	a.Replace("")
	wait.For(t, nodeWithin, "node "+a.Node+" to come back online with this tree's agent", func() bool {
		n, err := A.Node(a.Node)
		return err == nil && n.Status == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.Replica != "" && n.AgentVersion != oldVersion
	})
	MustPodium(t, "", []string{A.URL()}, "task", "send", inboxID, "second message")
	if code := runInbox.Wait(t); code != 0 {
		t.Errorf("podium run of the inbox task exited %d; stderr:\n%s", code, runInbox.Stderr())
	}
	const inboxOut = "waiting\nfirst message\nsecond message\ndone\n"
	if got := string(runInbox.Stdout()); got != inboxOut {
		t.Errorf("the inbox task printed %q, want %q", got, inboxOut)
	}
	if stored, _ := B.StoredOutput(t, inboxID); string(stored) != inboxOut {
		t.Errorf("the inbox task's stored stdout is %q, want %q", stored, inboxOut)
	}
	if tk := B.Task(t, inboxID); tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.Attempt != 1 || tk.NodeId != a.Node {
		t.Errorf("the inbox task ended %s (%q), attempt %d on %q; want succeeded as attempt 1 on %s (adopted, not run again)",
			tk.State, tk.Reason, tk.Attempt, tk.NodeId, a.Node)
	}

	checkArtifact(t, old, B, artifactID, "old.txt", seq(5000))
	checkArtifact(t, "", B, inboxID, "inbox.txt", seq(3000))

	// The task queued under the old release runs on the new agent.
	MustPodium(t, "", both, "node", "label", "--add", "rolled=yes", a.Node)
	wait.For(t, runWithin, "task "+queuedID+" (queued before the upgrade) to end", func() bool {
		return B.Task(t, queuedID).State >= podiumv1.TaskState_TASK_STATE_SUCCEEDED
	})
	if tk := B.Task(t, queuedID); tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.NodeId != a.Node {
		t.Errorf("task %s (queued before the upgrade) ended %s (%q) on %q; want succeeded on %s", queuedID, tk.State, tk.Reason, tk.NodeId, a.Node)
	}
	if out, errs := A.StoredOutput(t, queuedID); string(out) != "queued under the old release\n" || string(errs) != "ran under the new one\n" {
		t.Errorf("task %s stored stdout %q and stderr %q", queuedID, out, errs)
	}

	// The 40 s task, and a new one on the new agent.
	long.Check(t, A, runLong)
	onNewAgent := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 0}
	runOnNewAgent := StartRunFrom(t, "", both, onNewAgent.Args(t)...)
	onNewAgent.Check(t, A, runOnNewAgent)
	NothingLeft(t, a.Node)
}

// StartRunFrom is StartRun with the podium CLI in bin ("" for this tree's).
func StartRunFrom(t testing.TB, bin string, servers []string, args ...string) *Run {
	t.Helper()
	return StartPodiumFrom(t, bin, servers, append([]string{"run"}, args...)...)
}

// nodeVersion is the agent version the replica lists for the node.
func nodeVersion(t testing.TB, r *Replica, id string) string {
	t.Helper()
	n, err := r.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return n.AgentVersion
}

// checkCancelled checks that the task, which printed "started" and was
// cancelled with the reason "cancelled before the upgrade", reads so at r.
func checkCancelled(t testing.TB, r *Replica, id string) {
	t.Helper()
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED || !strings.Contains(tk.Reason, "cancelled before the upgrade") {
		t.Errorf("task %s reads %s (%q) at %s; want cancelled, saying %q", id, tk.State, tk.Reason, r.Addr, "cancelled before the upgrade")
	}
	if out, _ := r.StoredOutput(t, id); string(out) != "started\n" {
		t.Errorf("task %s's stored stdout at %s is %q, want %q", id, r.Addr, out, "started\n")
	}
}

// TestTooOldAgentRefused: an agent two releases older than the coordinator
// is refused, at its stream and at enrollment, with a message that names both
// versions and says to upgrade it; once upgraded on the same data directory
// the node is back and runs tasks. The binaries are this tree's, stamped
// with release versions: the agent v0.1.0, enrolled and running under a
// coordinator that says it is a development build (which takes any agent),
// which is then replaced by one that says it is v0.3.0.
func TestTooOldAgentRefused(t *testing.T) {
	t.Parallel()
	const agentVersion, coordinatorVersion = "v0.1.0", "v0.3.0"
	oldAgent, newCoordinator := t.TempDir(), t.TempDir()
	if err := binaries.BuildVersion(oldAgent, agentVersion, "podium-agent", "podium-runner"); err != nil {
		t.Fatal(err)
	}
	if err := binaries.BuildVersion(newCoordinator, coordinatorVersion, "podium-coordinator"); err != nil {
		t.Fatal(err)
	}
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgentFrom(t, oldAgent, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	if v := nodeVersion(t, r, a.Node); v != agentVersion {
		t.Fatalf("the node reports agent version %q, want the stamped %q", v, agentVersion)
	}

	r.Replace(newCoordinator)
	refusal := "podium-agent " + agentVersion + " is too old for this coordinator (" + coordinatorVersion + ")"
	wait.For(t, nodeWithin, "the agent to log that the coordinator refused it as too old", func() bool {
		return strings.Contains(a.Log(), refusal)
	})
	for _, log := range []string{a.Log(), r.Log()} {
		if !strings.Contains(log, "upgrade podium-agent on this node to "+coordinatorVersion) {
			t.Errorf("the refusal does not say to upgrade podium-agent to %s:\n%s", coordinatorVersion, lastLines(log, 20))
		}
	}
	if n, err := r.Node(a.Node); err != nil || n.Status == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.Replica != "" {
		t.Errorf("the refused node is listed %v on replica %q (%v); want no replica holding its stream", n.GetStatus(), n.GetReplica(), err)
	}

	// A new node with the old agent is refused at enrollment, saying why.
	tok, err := r.Admin().CreateEnrollmentToken(context.Background(), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	enroll := exec.Command(filepath.Join(oldAgent, "podium-agent"), "enroll", "--coordinator", r.URL(),
		"--token", tok.Msg.Token, "--data-dir", t.TempDir())
	out, err := enroll.CombinedOutput()
	if err == nil || !strings.Contains(string(out), refusal) || !strings.Contains(string(out), "upgrade podium-agent") {
		t.Errorf("podium-agent %s enroll against a %s coordinator: %v\n%s\nwant it refused, saying to upgrade podium-agent", agentVersion, coordinatorVersion, err, out)
	}

	// Upgraded in place, the node is back.
	a.Replace("")
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	w := Workload{Lines: 5, Every: 20 * time.Millisecond, Code: 0}
	w.Check(t, r, StartRun(t, []string{r.URL()}, w.Args(t)...))
	NothingLeft(t, a.Node)
}

// TestMigrationsSincePreviousReleaseOnlyAdd: on the schema the previous
// release's own migrations make (read from git), this tree's migrations keep
// every table and view column, of the same type, and make none NOT NULL
// without a default (the previous release's inserts leave out the columns it
// does not know): what lets the previous release's replicas keep serving
// beside this tree's during a rolling upgrade (docs/operations.md,
// "Upgrades"). TestRollingUpgrade shows that they do by running them; this
// row names the column a migration broke it with.
func TestMigrationsSincePreviousReleaseOnlyAdd(t *testing.T) {
	t.Parallel()
	root, err := binaries.Root()
	if err != nil {
		t.Fatal(err)
	}
	commit, err := binaries.PreviousRelease(root)
	if err != nil {
		t.Fatal(err)
	}
	old := releaseMigrations(t, commit)
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	emptyDatabase(t, db.URL)
	ctx, cancel := context.WithTimeout(context.Background(), runWithin)
	defer cancel()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))

	// The previous release's migrations, applied as its schema.Migrate did.
	if _, err := c.Exec(ctx, `create schema podium; create table podium.schema_migrations (
		version text primary key, applied_at timestamptz not null default now())`); err != nil {
		t.Fatal(err)
	}
	versions := slices.Sorted(maps.Keys(old))
	for _, v := range versions {
		if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, old[v]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert into podium.schema_migrations (version) values ($1)", v)
			return err
		}); err != nil {
			t.Fatalf("the previous release's migration %s: %v", v, err)
		}
	}
	before := columns(ctx, t, c)
	applied, err := schema.Migrate(ctx, c)
	if err != nil {
		t.Fatalf("this tree's migrations on the previous release's schema: %v", err)
	}
	t.Logf("the previous release (%s) has %d migrations; this tree applies %d more: %v", commit, len(versions), len(applied), applied)
	after := columns(ctx, t, c)
	for key, was := range before {
		now, ok := after[key]
		switch {
		case !ok:
			t.Errorf("%s is gone: the previous release's replicas read or write it (drop it a release after the last one that uses it)", key)
		case now.typ != was.typ:
			t.Errorf("%s changed type from %s to %s: the previous release's replicas use it as %s", key, was.typ, now.typ, was.typ)
		case was.nullable && !now.nullable && !now.hasDefault:
			t.Errorf("%s became NOT NULL without a default: the previous release's inserts leave it out", key)
		}
	}
}

// column is what TestMigrationsSincePreviousReleaseOnlyAdd compares of a
// column.
type column struct {
	typ                  string
	nullable, hasDefault bool
}

// columns are the columns of every table and view in the podium schema, by
// "table.column".
func columns(ctx context.Context, t testing.TB, c *pgx.Conn) map[string]column {
	t.Helper()
	rows, err := c.Query(ctx, `select table_name, column_name, data_type || coalesce('(' || udt_name || ')', ''),
			is_nullable = 'YES', column_default is not null
		from information_schema.columns where table_schema = 'podium'`)
	if err != nil {
		t.Fatalf("read the podium schema's columns: %v", err)
	}
	defer rows.Close()
	out := map[string]column{}
	for rows.Next() {
		var table, name string
		var col column
		if err := rows.Scan(&table, &name, &col.typ, &col.nullable, &col.hasDefault); err != nil {
			t.Fatal(err)
		}
		out[table+"."+name] = col
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplicaBehindTheSchemaSaysSo: a replica started on a database that a
// newer release has migrated (a migration it does not know is applied)
// serves, and logs which migrations it does not know and to finish the
// upgrade: what the previous release's replicas of a later roll will say.
func TestReplicaBehindTheSchemaSaysSo(t *testing.T) {
	t.Parallel()
	const newer = "9999_from_a_newer_release"
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "insert into podium.schema_migrations (version) values ($1)", newer); err != nil {
		t.Fatal(err)
	}
	r := StartReplica(t, db.URL) // waits for /readyz 200: it serves
	log := r.Log()
	warning := regexp.MustCompile(`level=WARN msg="the database holds migrations this build does not know[^\n]*finish the upgrade[^\n]*unknown=\[` + newer + `\]`)
	if !warning.MatchString(log) {
		t.Errorf("the replica did not warn that the database holds the migration %s it does not know, and to finish the upgrade; its log:\n%s", newer, lastLines(log, 30))
	}
}

// checkArtifact waits until `podium artifact get` (from bin, "" for this
// tree's) through r downloads the task's artifact name, and checks that it
// is want, byte for byte.
func checkArtifact(t testing.TB, bin string, r *Replica, id, name string, want []byte) {
	t.Helper()
	var got []byte
	var errs string
	var code int
	wait.For(t, runWithin, "podium artifact get "+id+" "+name+" through "+r.Addr+" to succeed", func() bool {
		got, errs, code = Podium(t, bin, []string{r.URL()}, "artifact", "get", "-o", "-", id, name)
		return code == 0
	})
	if !bytes.Equal(got, want) {
		t.Errorf("artifact %s of %s through %s: %d bytes, want the %d the task wrote; stderr:\n%s", name, id, r.Addr, len(got), len(want), errs)
	}
}

// seq is what `seq 1 n` prints.
func seq(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

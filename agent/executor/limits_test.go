package executor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/runner"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// start starts a task and returns its recorder, key and done channel.
func (e *env) start(t *testing.T, spec *podiumv1.TaskSpec) (*recorder, executor.Key, <-chan struct{}) {
	t.Helper()
	rec := newRecorder()
	a := e.assign(t, spec)
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	return rec, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}, done
}

// A task and a sidecar whose spec sets no resources run under the node's
// defaults, as `docker inspect` shows them: memory with swap equal to it,
// CPU quota and a pids limit. What a spec does set is kept.
func TestDefaultLimitsApplyToEveryContainer(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{DefaultCPU: 0.5, DefaultMemoryMB: 96, DefaultPids: 77})
	spec := e.sh("sleep 600")
	spec.Sidecars = []*podiumv1.Sidecar{
		{Name: "plain", Image: e.image, Command: []string{"sleep", "600"}},
		{Name: "sized", Image: e.image, Command: []string{"sleep", "600"}, Resources: &podiumv1.Resources{Cpu: 0.25, MemoryMb: 48, Pids: 33}},
	}
	rec, key, done := e.start(t, spec)
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	for name, want := range map[string][3]int64{
		executor.ContainerName(key):        {96 << 20, 5e8, 77},
		executor.SidecarName(key, "plain"): {96 << 20, 5e8, 77},
		executor.SidecarName(key, "sized"): {48 << 20, 25e7, 33},
	} {
		info, err := e.docker.ContainerInspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		h := info.HostConfig
		pids := int64(0)
		if h.PidsLimit != nil {
			pids = *h.PidsLimit
		}
		if h.Memory != want[0] || h.MemorySwap != want[0] || h.NanoCPUs != want[1] || pids != want[2] {
			t.Errorf("%s runs with Memory %d, MemorySwap %d, NanoCpus %d, PidsLimit %d; want %d, %d, %d, %d",
				name, h.Memory, h.MemorySwap, h.NanoCPUs, pids, want[0], want[0], want[1], want[2])
		}
	}
	e.exec.Cancel(key.TaskID, key.Attempt, "done", time.Second)
	waitDone(t, done, 60*time.Second)
	rec.final(t, key)
}

// A fork bomb fails its own task with a reason naming the pids limit, while
// another task on the same node, running all along, still starts processes
// and succeeds. Both run as the node's default user, so the runner's inbox
// reading (podium-runner ask) works for a task that is not root.
func TestForkBombFailsOnlyItsOwnTask(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{DefaultPids: 64, DefaultUser: "65534"})
	other, otherKey, otherDone := e.start(t, e.sh(`msg=$(podium-runner ask); echo "got $msg"; sh -c 'echo forked'; id -u`))
	other.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)

	bomb, bombKey := e.run(t, e.sh(`f() { f | f & }; f; sleep 600`))
	st := bomb.final(t, bombKey)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), executor.ReasonPidsLimit) ||
		!strings.Contains(st.GetReason(), "64 processes") || !strings.Contains(st.GetReason(), "--default-pids") {
		t.Fatalf("the fork bomb ended %v, want FAILED with a reason starting %q that names its limit of 64 and where it came from",
			st, executor.ReasonPidsLimit)
	}

	if ok, err := e.exec.Inject(otherKey.TaskID, otherKey.Attempt, 1, "hello"); err != nil || !ok {
		t.Fatalf("inject into the other task: %v, %v", ok, err)
	}
	waitDone(t, otherDone, 60*time.Second)
	if st := other.final(t, otherKey); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("the other task ended %v, want SUCCEEDED", st)
	}
	if got := string(other.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "got hello\nforked\n65534\n" {
		t.Fatalf("the other task printed %q, want its message, a line from a process it started after the bomb, and its uid", got)
	}
}

// Many fork bombs at once each end as "pids limit": the runner, PID 1 of
// each, keeps working while its task has taken every process the limit
// allows. It used to die now and then ("failed to create new OS thread":
// its threads count against the same limit), which reported the bomb as its
// own "exit code 2" (about 1 run in 15 of bombs run side by side on a loaded
// machine); the runner now makes its threads before the command starts.
func TestForkBombsSideBySideEachEndAsPidsLimit(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{DefaultPids: 64, DefaultUser: "65534"})
	const bombs = 12
	type started struct {
		rec  *recorder
		key  executor.Key
		done <-chan struct{}
	}
	var all []started
	for range bombs {
		rec, key, done := e.start(t, e.sh(`f() { f | f & }; f; sleep 600`))
		all = append(all, started{rec, key, done})
	}
	for i, b := range all {
		waitDone(t, b.done, 120*time.Second)
		st := b.rec.final(t, b.key)
		if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), executor.ReasonPidsLimit) {
			t.Errorf("fork bomb %d of %d ended %v, want FAILED with a reason starting %q", i+1, bombs, st, executor.ReasonPidsLimit)
		}
	}
}

// Under --default-user a task runs as that user unless its spec names one,
// and whoever it runs as can write its workspace and artifacts and read its
// inbox. (A UID alone takes its group from the image's /etc/passwd, which
// the test image has none of: hence UID:GID.)
func TestTaskUser(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{DefaultUser: "65534:65534"})
	script := `id -u; id -g; echo w >/workspace/f && echo workspace; mkdir -p /workspace/d/e && echo dirs; ` +
		`echo a >/workspace/.podium/artifacts/a && echo artifacts; ls /run/podium/inbox >/dev/null && echo inbox`
	for _, tc := range []struct {
		user string
		want string
	}{
		{"", "65534\n65534\n"},
		{"1000:1000", "1000\n1000\n"},
		{"0", "0\n0\n"},
	} {
		spec := e.sh(script)
		spec.User = tc.user
		rec, key := e.run(t, spec)
		st := rec.final(t, key)
		want := tc.want + "workspace\ndirs\nartifacts\ninbox\n"
		if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || got != want {
			t.Errorf("user %q: ended %v printing %q (stderr %q), want SUCCEEDED printing %q", tc.user, st, got,
				rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR), want)
		}
	}
}

// A task above the node's maximum is refused before anything is started for
// it, saying which limit and which flag: the scheduler should not have sent
// it, and the node does not run it anyway.
func TestSpecAboveTheNodeMaximumIsRefused(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{MaxMemoryMB: 128, MaxPids: 100, MaxTimeout: time.Hour})
	for _, tc := range []struct {
		name string
		edit func(*podiumv1.TaskSpec)
		want string
	}{
		{"memory with a sidecar", func(s *podiumv1.TaskSpec) {
			s.Resources = &podiumv1.Resources{MemoryMb: 100}
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: e.image, Resources: &podiumv1.Resources{MemoryMb: 100}}}
		}, "200 MiB of memory with its sidecars and this node allows at most 128 MiB for one task (podium-agent --max-memory)"},
		{"pids", func(s *podiumv1.TaskSpec) { s.Resources = &podiumv1.Resources{Pids: 101} }, "--max-pids"},
		{"timeout", func(s *podiumv1.TaskSpec) { s.TimeoutSeconds = 7200 }, "--max-timeout"},
	} {
		spec := e.sh("echo ran")
		tc.edit(spec)
		rec, key := e.run(t, spec)
		st := rec.final(t, key)
		if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), tc.want) {
			t.Errorf("%s: ended %v, want FAILED with a reason containing %q", tc.name, st, tc.want)
		}
		if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); len(out) != 0 {
			t.Errorf("%s: the task ran and printed %q", tc.name, out)
		}
	}
	// Within the maxima, and without limits of its own (the node's
	// defaults, which a maximum sets, apply), it runs.
	rec, key := e.run(t, e.sh("echo ran"))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("a task within the maxima ended %v", st)
	}
}

// A task whose spec has no timeout is stopped at the node's default timeout,
// with the usual reason and a note saying where the timeout came from.
func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{DefaultTimeout: time.Second})
	spec := e.sh("echo begun; sleep 600")
	spec.CancelGraceSeconds = 1
	rec, key := e.run(t, spec)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetReason() != executor.ReasonTimeout {
		t.Fatalf("ended %v, want FAILED reason %q", st, executor.ReasonTimeout)
	}
	if !strings.Contains(notes(rec), "default timeout of 1s") {
		t.Fatalf("no note names the node's default timeout; notes:\n%s", notes(rec))
	}
}

// A task that fills more disk than the node's workspace limit fails with a
// reason starting "workspace full": in its workspace volume, and in its
// container's own files outside any volume.
func TestWorkspaceFull(t *testing.T) {
	t.Parallel()
	e := setupWith(t, executor.Limits{WorkspaceBytes: 8 << 20, WorkspaceCheck: 100 * time.Millisecond})
	for _, where := range []string{"/workspace/big", "/big"} {
		rec, key := e.run(t, e.sh("dd if=/dev/zero of="+where+" bs=1M count=24 2>/dev/null; echo written; sleep 600"))
		st := rec.final(t, key)
		if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), executor.ReasonWorkspaceFull) ||
			!strings.Contains(st.GetReason(), "limit of 8 MiB") {
			t.Errorf("writing 24 MiB to %s ended %v, want FAILED with a reason starting %q naming the 8 MiB limit",
				where, st, executor.ReasonWorkspaceFull)
		}
	}
	// The runner log is bind-mounted writable (the runner writes it as the
	// task's user), so a task could append to it directly, past the
	// runner's output limit: that counts against the limit too.
	rec, key := e.run(t, e.sh("echo started; head -c 25165824 /dev/zero >>"+runner.LogPath+"; sleep 600"))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED ||
		!strings.HasPrefix(st.GetReason(), executor.ReasonWorkspaceFull) {
		t.Errorf("appending 24 MiB to the runner log ended %v, want FAILED with a reason starting %q", st, executor.ReasonWorkspaceFull)
	}
	// Under the limit nothing happens.
	rec, key = e.run(t, e.sh("dd if=/dev/zero of=/workspace/small bs=1M count=1 2>/dev/null; echo ok"))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("a task well under the limit ended %v", st)
	}
}

func notes(r *recorder) string {
	var b strings.Builder
	for _, ev := range r.all() {
		if n := ev.GetNote(); n != nil {
			b.WriteString(n.GetText() + "\n")
		}
	}
	return b.String()
}

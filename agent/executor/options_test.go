package executor_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// The spec's container options, seen from inside the task's container:
// with read_only the root filesystem refuses writes while /tmp, /workspace
// and the artifacts directory take them; /dev/shm has shm_size; the ulimit
// is the process's; the tmpfs is mounted, sized and executable as asked.
func TestContainerOptionsAreVisibleInside(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh(`if touch /on-root 2>/dev/null; then echo root=writable; else echo root=read-only; fi
touch /tmp/x && echo tmp=writable
touch /workspace/x && echo workspace=writable
touch /workspace/.podium/artifacts/x && echo artifacts=writable
echo nofile=$(ulimit -Sn)/$(ulimit -Hn)
grep -E ' (/dev/shm|/cache|/tmp) ' /proc/mounts
printf '#!/bin/sh\necho ran from the tmpfs\n' > /cache/hello && chmod +x /cache/hello && /cache/hello`)
	spec.ReadOnly = true
	spec.ShmSizeBytes = 96 << 20
	spec.Ulimits = []*podiumv1.Ulimit{{Name: "nofile", Soft: 1000, Hard: 2000}}
	spec.Tmpfs = []*podiumv1.TmpfsMount{{Path: "/cache", SizeBytes: 32 << 20, Exec: true}}
	rec, key := e.run(t, spec)
	out := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v; stdout %q, stderr %q", st, out, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
	}
	for _, want := range []string{"root=read-only\n", "tmp=writable\n", "workspace=writable\n", "artifacts=writable\n",
		"nofile=1000/2000\n", "ran from the tmpfs\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the task printed %q; want it to say %q", out, want)
		}
	}
	mounts := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[2] == "tmpfs" {
			mounts[f[1]] = "," + f[3] + ","
		}
	}
	for path, want := range map[string][]string{
		"/dev/shm": {",size=98304k,"},
		"/cache":   {",size=32768k,", ",nosuid,", ",nodev,"},
		// read_only's /tmp: the default size.
		"/tmp": {",size=65536k,", ",nosuid,"},
	} {
		opts, ok := mounts[path]
		if !ok {
			t.Errorf("no tmpfs at %s in /proc/mounts:\n%s", path, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(opts, w) {
				t.Errorf("%s is mounted with %s, want %s", path, opts, strings.Trim(w, ","))
			}
		}
	}
	if strings.Contains(mounts["/cache"], ",noexec,") {
		t.Errorf("/cache was asked for with exec: true and is mounted %s", mounts["/cache"])
	}
}

// Without read_only nothing changes: the root filesystem takes writes, and
// the task has no tmpfs at /tmp it did not ask for.
func TestWithoutReadOnlyTheRootIsWritable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, key := e.run(t, e.sh(`touch /on-root && echo root=writable; grep -c ' /tmp ' /proc/mounts || true`))
	out := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || out != "root=writable\n0\n" {
		t.Fatalf("final status %v, stdout %q; want success, a writable root and no /tmp mount", st, out)
	}
}

// capSet reads one capability set ("CapEff", "CapBnd") from a
// /proc/<pid>/status text.
func capSet(t *testing.T, status, name string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)` + name + `:\s*([0-9a-f]{16})`).FindStringSubmatch(status)
	if m == nil {
		t.Fatalf("no %s in %q", name, status)
	}
	v, err := strconv.ParseUint(m[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const (
	capNetAdmin = 12
	capSysAdmin = 21
	// capAuditRead is the last capability every Linux since 3.16 has and
	// every Docker release knows: a privileged container has at least
	// 0..capAuditRead whatever the versions.
	capAuditRead = 37
)

// machineCaps returns every capability this kernel has (0 through
// cap_last_cap) and this process's bounding set, which on the machine the
// engine runs on bounds what the engine itself can hand out.
func machineCaps(t *testing.T) (all, bounding uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || last < capAuditRead || last > 62 {
		t.Fatalf("cap_last_cap is %q (%v)", b, err)
	}
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return 1<<(last+1) - 1, capSet(t, string(own), "CapBnd")
}

// On a node that allows them, a privileged sidecar has every capability
// there is to have (its effective set is its whole bounding set, every
// capability through CAP_AUDIT_READ, CAP_SYS_ADMIN included) and, with
// share_workspace, the task's workspace; the task's own container, beside
// it, has none. This is what Docker-in-Docker needs of a docker:dind
// sidecar.
//
// A machine whose own bounding set is short (this test's CI runs the
// engine inside a container without CAP_SYS_RESOURCE) cannot start a
// privileged container at all: runc refuses to apply capabilities the
// engine does not hold, and `docker run --privileged` fails there too.
// There, and only there, the test checks the stand-in it can: the engine
// is asked for a privileged container, refuses, and the attempt fails with
// the reason that tells the operator why. It says so (testenv.StandIn), and
// `make test` lists it.
func TestPrivilegedSidecarHasEveryCapabilityAndTheTaskNone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.allowPrivileged = true
	e.exec = e.newExecutor()
	ctx := context.Background()
	spec := e.sh(`grep -E '^Cap(Eff|Bnd)' /proc/self/status; cat /workspace/from-sidecar; echo ready; sleep 600`)
	spec.Sidecars = []*podiumv1.Sidecar{{
		Name: "dind", Image: e.image, Privileged: true, ShareWorkspace: true,
		Command:   []string{"sh", "-c", `grep -E '^Cap(Eff|Bnd)' /proc/self/status; echo written by the sidecar > /workspace/from-sidecar; sleep 600`},
		Readiness: &podiumv1.Readiness{Command: []string{"test", "-f", "/workspace/from-sidecar"}, TimeoutSeconds: 30},
	}}
	all, bounding := machineCaps(t)
	if bounding != all {
		testenv.StandIn(t, "this machine's capability bounding set is %016x, short of the kernel's %016x, so its Docker engine "+
			"cannot start a privileged container; checking that the attempt fails saying so instead of measuring CapEff", bounding, all)
		rec, key := e.run(t, spec)
		st := rec.final(t, key)
		if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED ||
			!strings.Contains(st.GetReason(), `sidecar "dind" could not be started: this node's Docker engine cannot start privileged containers`) ||
			!strings.Contains(st.GetReason(), "unable to apply caps") || !strings.Contains(st.GetReason(), "docker run --privileged") {
			t.Fatalf("final status %v, want FAILED saying the engine cannot start privileged containers", st)
		}
		if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); len(out) != 0 {
			t.Fatalf("the task ran without its sidecar: %q", out)
		}
		return
	}

	rec := newRecorder()
	a := e.assign(t, spec)
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutputContains(t, rec, "ready\n")
	task := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	if !strings.Contains(task, "written by the sidecar\n") {
		t.Errorf("the task does not see the file its sidecar wrote to the shared workspace: %q", task)
	}
	var sidecar strings.Builder
	wait.For(t, 30*time.Second, "the sidecar's capability lines in the task's log", func() bool {
		sidecar.Reset()
		for _, n := range rec.notes() {
			if s, ok := strings.CutPrefix(n, "[dind] "); ok {
				sidecar.WriteString(s + "\n")
			}
		}
		return strings.Contains(sidecar.String(), "CapBnd")
	})
	const atLeast = 1<<(capAuditRead+1) - 1
	scEff, scBnd := capSet(t, sidecar.String(), "CapEff"), capSet(t, sidecar.String(), "CapBnd")
	if scEff != scBnd || scEff&atLeast != atLeast || scEff&^all != 0 || scEff&(1<<capSysAdmin) == 0 || scEff&(1<<capNetAdmin) == 0 {
		t.Errorf("the privileged sidecar's CapEff is %016x (bounding %016x), want every capability (at least %016x, at most the kernel's %016x), "+
			"SYS_ADMIN and NET_ADMIN included", scEff, scBnd, uint64(atLeast), all)
	}
	if eff := capSet(t, task, "CapEff"); eff != 0 {
		t.Errorf("the task's CapEff is %016x beside a privileged sidecar, want none", eff)
	}

	info, err := e.docker.ContainerInspect(ctx, executor.SidecarName(key, "dind"))
	if err != nil {
		t.Fatal(err)
	}
	if h := info.HostConfig; !h.Privileged || string(h.UsernsMode) != "host" {
		t.Errorf("the sidecar's container: privileged %v, userns %q; want privileged in the host's user namespace", h.Privileged, h.UsernsMode)
	}
	info, err = e.docker.ContainerInspect(ctx, executor.ContainerName(key))
	if err != nil {
		t.Fatal(err)
	}
	if h := info.HostConfig; h.Privileged || !slices.Equal(h.CapDrop, []string{"ALL"}) || !slices.Contains(h.SecurityOpt, "no-new-privileges") {
		t.Errorf("the task's container beside a privileged sidecar: privileged %v, cap drop %v, security %v", h.Privileged, h.CapDrop, h.SecurityOpt)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "done looking", time.Second)
	waitDone(t, done, 30*time.Second)
	rec.final(t, key)
	agenttest.AssertNoContainers(t, e.docker, e.nodeID)
}

// A sidecar that shares the workspace (and is not privileged, so any node
// runs it) sees the task's files at /workspace and writes ones the task
// reads, its artifacts directory included; the task keeps no capability.
func TestSidecarSharesTheWorkspace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh(`grep '^CapEff' /proc/self/status; cat /workspace/from-sidecar; ls /workspace/.podium/artifacts`)
	spec.Sidecars = []*podiumv1.Sidecar{{
		Name: "files", Image: e.image, ShareWorkspace: true,
		Command: []string{"sh", "-c", `echo written by the sidecar > /workspace/from-sidecar; ` +
			`echo report > /workspace/.podium/artifacts/sidecar-report.txt; sleep 600`},
		Readiness: &podiumv1.Readiness{Command: []string{"test", "-f", "/workspace/from-sidecar"}, TimeoutSeconds: 30},
	}}
	rec, key := e.run(t, spec)
	out := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v; stdout %q", st, out)
	}
	if want := "CapEff:\t0000000000000000\nwritten by the sidecar\nsidecar-report.txt\n"; out != want {
		t.Fatalf("the task printed %q, want %q", out, want)
	}
}

// A node whose agent runs without --allow-privileged-sidecars refuses a
// task with a privileged sidecar, whatever sent it there: the attempt fails
// before any container of it is made, saying why and what to do.
func TestPrivilegedSidecarIsRefusedWithoutTheFlag(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("echo the task must not run")
	spec.Sidecars = []*podiumv1.Sidecar{{Name: "dind", Image: e.image, Privileged: true, Command: []string{"sh", "-c", "echo started; sleep 600"}}}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), `sidecar "dind" asks to run privileged`) ||
		!strings.Contains(st.GetReason(), "does not allow privileged sidecars") || !strings.Contains(st.GetReason(), "--allow-privileged-sidecars") {
		t.Fatalf("final status %v, want FAILED saying the node does not allow privileged sidecars", st)
	}
	if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); len(out) != 0 {
		t.Fatalf("the task ran: %q", out)
	}
	for _, n := range rec.notes() {
		if strings.HasPrefix(n, "[dind]") {
			t.Fatalf("the sidecar ran: %q", n)
		}
	}
	agenttest.AssertNoContainers(t, e.docker, e.nodeID)
}

// Container options the coordinator should have refused are refused by the
// node too, before anything runs.
func TestBadContainerOptionsAreRefusedByTheNode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("echo the task must not run")
	spec.Tmpfs = []*podiumv1.TmpfsMount{{Path: "/podium/log"}}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "container options refused: spec.tmpfs[0].path") ||
		!strings.Contains(st.GetReason(), "over /podium") {
		t.Fatalf("final status %v, want FAILED naming spec.tmpfs[0].path", st)
	}
}

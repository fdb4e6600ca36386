package runner_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/agent/runner"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// logOf reads a runner log back: both streams and the exit record.
func logOf(t *testing.T, path string) (stdout, stderr string, exit *runlog.Exit) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _ := runlog.NewReader(f, runlog.Position{})
	var out, errb bytes.Buffer
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out.String(), errb.String(), nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Exit != nil {
			return out.String(), errb.String(), rec.Exit
		}
		if rec.Stream == runlog.Stdout {
			out.Write(rec.Data)
		} else {
			errb.Write(rec.Data)
		}
	}
}

func TestRunRecordsOutputAndExit(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	var stderr bytes.Buffer
	code := runner.Main([]string{"run", "--log", log, "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, io.Discard, &stderr)
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr %s", code, stderr.String())
	}
	out, errs, exit := logOf(t, log)
	if out != "out\n" || errs != "err\n" || exit == nil || exit.Code != 3 || exit.Signal != 0 {
		t.Fatalf("stdout %q stderr %q exit %+v", out, errs, exit)
	}
}

func TestRunCommandNotFound(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	code := runner.Main([]string{"run", "--log", log, "--", "no-such-command-anywhere"}, io.Discard, io.Discard)
	_, errs, exit := logOf(t, log)
	if code != runner.ExitNotFound || exit == nil || exit.Code != runner.ExitNotFound || !strings.Contains(errs, "no-such-command-anywhere") {
		t.Fatalf("exit %d, record %+v, stderr %q", code, exit, errs)
	}
}

func TestRunPathAppend(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	runner.Main([]string{"run", "--log", log, "--path-append", "/podium", "--", "sh", "-c", `echo "$PATH"`}, io.Discard, io.Discard)
	if out, _, _ := logOf(t, log); !strings.HasSuffix(strings.TrimSpace(out), ":/podium") {
		t.Fatalf("PATH %q does not end with :/podium", out)
	}
}

// startRunner runs the real binary as a process of its own, so the test can
// signal it the way Docker signals a container's PID 1.
func startRunner(t *testing.T, script string) (*exec.Cmd, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "out.log")
	cmd := exec.Command(agenttest.Runner(t), "run", "--log", log, "--", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, log
}

func waitLog(t *testing.T, log, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(log); err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if out, _, _ := logOf(t, log); strings.Contains(out, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the log never showed %q", want)
}

func TestSignalsReachTheCommandsGroup(t *testing.T) {
	// The trap that answers is in a grandchild: the signal must reach the
	// whole group, not just the runner's direct child. The grandchild says
	// ready once its trap is set (its parent's was set before it started).
	cmd, log := startRunner(t, `trap 'wait $pid; exit $?' TERM
sh -c 'trap "echo child got TERM; exit 5" TERM; echo ready; while :; do sleep 0.05; done' &
pid=$!
wait $pid`)
	waitLog(t, log, "ready\n")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	out, _, exit := logOf(t, log)
	if !strings.Contains(out, "child got TERM") || exit == nil || exit.Code != 5 || cmd.ProcessState.ExitCode() != 5 {
		t.Fatalf("stdout %q, exit record %+v, runner exit %v", out, exit, err)
	}
}

// A command that leaves a background process holding its output open still
// ends when it ends: what it left behind is killed, as in a container.
//
// The leftover would run for a day, so the runner ending at all shows it did
// not wait for it; the deadline only bounds a failure.
func TestLeftoversDoNotHoldTheRunner(t *testing.T) {
	leftover := fmt.Sprintf("sleep 86400.%d", os.Getpid()) // a day, and no other test's
	cmd, log := startRunner(t, leftover+" & echo started")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	wait.Closed(t, time.Minute, "the runner to end after its command did, with a leftover still running", exited)
	wait.For(t, 30*time.Second, "the leftover "+leftover+" to be killed", func() bool { return !running(t, leftover) })
	if out, _, exit := logOf(t, log); out != "started\n" || exit == nil || exit.Code != 0 {
		t.Fatalf("stdout %q exit %+v", out, exit)
	}
}

func TestAskPrintsTheNextMessage(t *testing.T) {
	dir := t.TempDir()
	if err := inbox.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := runner.Main([]string{"ask", "--inbox", dir, "--timeout", "50ms"}, &out, &errb); code != runner.ExitNoMessage {
		t.Fatalf("ask on an empty inbox: exit %d, want %d", code, runner.ExitNoMessage)
	}
	_, _ = inbox.Deliver(dir, 1, "hello")
	_, _ = inbox.Deliver(dir, 2, "two\n")
	for _, want := range []string{"hello\n", "two\n"} {
		out.Reset()
		if code := runner.Main([]string{"ask", "--inbox", dir, "--timeout", "5s"}, &out, &errb); code != 0 || out.String() != want {
			t.Fatalf("ask: exit %d, printed %q, want %q; stderr %s", code, out.String(), want, errb.String())
		}
	}
	if code := runner.Main([]string{"ask", "--inbox", filepath.Join(dir, "missing")}, &out, &errb); code != runner.ExitRunnerError ||
		!strings.Contains(errb.String(), "no inbox") {
		t.Fatalf("ask without an inbox: exit %d, stderr %q", code, errb.String())
	}
}

func TestArtifactAdd(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(src, []byte("<testsuite/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	// Flags before or after PATH; the name defaults to PATH's base name.
	for _, args := range [][]string{
		{"artifact", "add", "--dir", dir, src},
		{"artifact", "add", src, "--dir", dir, "--name", "reports/unit.xml"},
	} {
		if code := runner.Main(args, io.Discard, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
		}
	}
	for _, name := range []string{"junit.xml", "reports/unit.xml"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "<testsuite/>" {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	t.Setenv("PODIUM_ARTIFACTS", dir)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"artifact", "add", filepath.Join(dir, "missing")}, runner.ExitArtifactFailed, "no such file"},
		{[]string{"artifact", "add", src, "--name", "../up"}, runner.ExitArtifactFailed, `".." segment`},
		{[]string{"artifact", "add"}, runner.ExitUsage, "exactly one PATH"},
		{[]string{"artifact", "add", src, src}, runner.ExitUsage, "exactly one PATH"},
		{[]string{"artifact", "remove", src}, runner.ExitUsage, "artifact add PATH"},
		{[]string{"artifact", "add", "--dir", filepath.Join(dir, "nope"), src}, runner.ExitRunnerError, "no artifacts directory"},
	} {
		errb.Reset()
		if code := runner.Main(c.args, io.Discard, &errb); code != c.code || !strings.Contains(errb.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", c.args, code, errb.String(), c.code, c.says)
		}
	}
}

// running reports whether a process with this command line exists (a zombie
// has none, so a killed one not yet reaped does not count).
func running(t *testing.T, cmdline string) bool {
	t.Helper()
	want := strings.ReplaceAll(cmdline, " ", "\x00") + "\x00"
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && string(b) == want {
			return true
		}
	}
	return false
}

// runLimited runs the real binary on a command with extra flags for `run`
// and returns it with its log.
func runLimited(t *testing.T, flags []string, script string) (*exec.Cmd, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "out.log")
	args := append(append([]string{"run", "--log", log}, flags...), "--", "sh", "-c", script)
	cmd := exec.Command(agenttest.Runner(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, log
}

// Past --output-limit the runner writes one byte more, which is how the
// agent learns there was more, and drops the rest; the command goes on to
// its own end. Output of exactly the limit is written whole, with nothing
// more.
func TestOutputLimitKeepsTheLimitAndOneByte(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		printed, want int
	}{{5000, 1001}, {1000, 1000}, {999, 999}} {
		cmd, log := runLimited(t, []string{"--output-limit", "1000"},
			fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; exit 4", c.printed))
		_ = cmd.Wait()
		out, errs, exit := logOf(t, log)
		if exit == nil || exit.Code != 4 || cmd.ProcessState.ExitCode() != 4 {
			t.Fatalf("printing %d: exit record %+v, runner exit %d; want the command's 4", c.printed, exit, cmd.ProcessState.ExitCode())
		}
		if got := len(out) + len(errs); got != c.want || strings.Trim(out, "x") != "" {
			t.Fatalf("printing %d: the log holds %d bytes (stdout %d x's?, stderr %q), want %d", c.printed, got, len(out), errs, c.want)
		}
	}
}

// With a progress file the runner writes no further than its backlog ahead
// of what the agent has read: the command is held back (its pipe fills) until
// the agent reads on, and nothing it printed is lost. The test plays the
// agent: it lets the runner fill its backlog, checks it stopped there, and
// then says it has read everything.
func TestBackPressureHoldsTheCommandUntilTheAgentReads(t *testing.T) {
	t.Parallel()
	const backlog = 64 << 10
	const total = 1 << 20
	progress := filepath.Join(t.TempDir(), "progress")
	if err := runlog.CreateProgress(progress); err != nil {
		t.Fatal(err)
	}
	pw, err := runlog.OpenProgress(progress)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd, log := runLimited(t, []string{"--progress", progress, "--backlog", fmt.Sprint(backlog)},
		fmt.Sprintf("head -c %d /dev/zero; exit 7", total))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	size := func() int64 {
		st, err := os.Stat(log)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	// One record beyond the backlog is as far as the runner may go: it
	// checks before each record.
	const slack = runlog.MaxRecordData + 17
	read, rounds := int64(0), 0
	for done := false; !done; {
		wait.For(t, 30*time.Second, "the runner to fill its backlog or end", func() bool {
			select {
			case <-exited:
				done = true
				return true
			default:
				return size()-read > backlog
			}
		})
		if ahead := size() - read; ahead > backlog+slack {
			t.Fatalf("the runner wrote %d bytes past what the agent read, more than the backlog of %d", ahead, backlog)
		}
		read = size()
		if err := pw.Set(read); err != nil {
			t.Fatal(err)
		}
		rounds++
	}
	out, _, exit := logOf(t, log)
	if len(out) != total || exit == nil || exit.Code != 7 {
		t.Fatalf("the log holds %d bytes of %d and exit %+v; nothing may be lost", len(out), total, exit)
	}
	if rounds < total/(backlog+slack) {
		t.Fatalf("the runner was held back %d times; %d MiB through a %d KiB backlog takes at least %d", rounds, total>>20, backlog>>10, total/(backlog+slack))
	}
}

// A log with no room for the command's output for --disk-full-after stops
// the command: it does not hang blocked on its next write. The runner exits
// with ExitDiskFull, says why on its stderr, and the log holds an exact
// prefix of what the command printed.
func TestDiskFullStopsTheCommand(t *testing.T) {
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a 1 MiB tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	log := filepath.Join(disk, "out.log")
	var stderr bytes.Buffer
	code := runner.Main([]string{"run", "--log", log, "--disk-full-after", "1s", "--",
		"sh", "-c", "yes 0123456789abcdef | head -c 8000000; echo done"}, io.Discard, &stderr)
	if code != runner.ExitDiskFull || !strings.Contains(stderr.String(), "no room") {
		t.Fatalf("exit %d, want %d; stderr %q", code, runner.ExitDiskFull, stderr.String())
	}
	out, _, exit := logOf(t, log)
	want := strings.Repeat("0123456789abcdef\n", 8000000/17+1)
	if len(out) == 0 || len(out) >= 8000000 || out != want[:len(out)] {
		t.Fatalf("the log holds %d bytes of stdout; want a non-empty exact prefix of the 8000000 the command printed", len(out))
	}
	if exit != nil && !exit.DiskFull {
		t.Fatalf("an exit record without DiskFull: %+v", exit)
	}
}

// With --lease the runner fences the command once the moment the agent's
// lease holds has passed: SIGTERM first, then, after the lease's grace, every
// process of the command killed — here the command ignores SIGTERM, so only
// the SIGKILL ends it — and the exit record says it was fenced. While the
// agent keeps moving the lease on, the command runs; a lease that never
// fences (zero) is the default.
func TestLeaseRunningOutFencesTheCommand(t *testing.T) {
	t.Parallel()
	lease := filepath.Join(t.TempDir(), "lease")
	if err := runlog.CreateLease(lease); err != nil {
		t.Fatal(err)
	}
	cmd, log := runLimited(t, []string{"--lease", lease}, `trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done`)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	waitLog(t, log, "ready\n")

	// The agent renews: each lease is a little ahead, and the runner must
	// still be running after several have come and gone.
	renewals := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); renewals++ {
		if err := runlog.WriteLease(lease, runlog.LeaseUntil(time.Now().Add(300*time.Millisecond), time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
			t.Fatalf("the runner ended after %d renewals of its lease; a renewed lease must not fence", renewals)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The agent stops renewing (hung): the lease runs out.
	ranOut := time.Now().Add(200 * time.Millisecond)
	if err := runlog.WriteLease(lease, runlog.LeaseUntil(ranOut, 500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	wait.Closed(t, 30*time.Second, "the runner to fence its command once the lease ran out", exited)
	out, _, exit := logOf(t, log)
	if !strings.Contains(out, "got TERM") {
		t.Errorf("the command's stdout %q does not show the SIGTERM that fencing sends first", out)
	}
	if exit == nil || !exit.Fenced || exit.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit record %+v; want fenced, killed by SIGKILL after ignoring SIGTERM", exit)
	}
	if exit.Time.Before(ranOut.Add(500 * time.Millisecond)) {
		t.Errorf("the command ended at %s, before the lease (%s) and its grace (500ms) had passed", exit.Time, ranOut)
	}
}

// A lease that never fences (as the agent writes it for a task the control
// plane would not run again elsewhere) leaves the command to its own end.
func TestLeaseThatNeverFencesLeavesTheCommand(t *testing.T) {
	t.Parallel()
	lease := filepath.Join(t.TempDir(), "lease")
	if err := runlog.CreateLease(lease); err != nil {
		t.Fatal(err)
	}
	cmd, log := runLimited(t, []string{"--lease", lease}, `sleep 0.5; echo done; exit 3`)
	_ = cmd.Wait()
	out, _, exit := logOf(t, log)
	if out != "done\n" || exit == nil || exit.Code != 3 || exit.Fenced {
		t.Fatalf("stdout %q, exit record %+v; want the command's own end, exit 3, not fenced", out, exit)
	}
}

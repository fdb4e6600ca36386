package faults

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// floodFor is how long the flooding task prints as fast as it can; the
// issue saw the node go unreachable 28 s into such a flood.
const floodFor = 60 * time.Second

// floodScript prints numbers as fast as busybox's seq can for floodFor (so
// every line differs and a chunk dropped, repeated or moved changes the
// checksum), through tee into a FIFO that sha256sum reads, so that the
// task's own checksum of what it printed needs no disk; then prints it as
// the last line "sha256 HEX" and exits code. timeout stops seq in the middle
// of a line; the echo after it ends that line, so the checksum line is one
// of its own.
func floodScript(code int) string {
	return fmt.Sprintf(`mkdir -p /tmp && mkfifo /tmp/flood.fifo && { sha256sum < /tmp/flood.fifo > /tmp/flood.sum & } && `+
		`{ { timeout %d seq 1 999999999999; echo; } | tee /tmp/flood.fifo; } && wait && echo "sha256 $(cut -c1-64 /tmp/flood.sum)"; exit %d`,
		int(floodFor.Seconds()), code)
}

// TestFloodingTaskKeepsItsNodeOnline is defect 0: a task that prints
// without pause for floodFor keeps the agent's outbox refilled from its
// backlog as fast as the coordinator acknowledges it. Before the fix the
// agent's writer sent heartbeats only between flushes, and a flush went on
// until the outbox was empty, which it never was: the heartbeats stopped,
// the node went unreachable, then offline, and every task on it was lost.
//
// Beside the flood a bystander task prints a line a second and ends
// while the flood goes on. Throughout, the node must be listed online, and
// the replica's podium_heartbeats_written_total must keep increasing; both
// tasks end with their own status and code, and both outputs, printed by
// podium run and stored, are byte-exact against the tasks' own checksums.
func TestFloodingTaskKeepsItsNodeOnline(t *testing.T) {
	t.Parallel()
	const (
		heartbeat = 2 * time.Second
		floodCode = 6
	)
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	// Default thresholds (unreachable after 30 s of silence); heartbeats
	// every 2 s so that the metric moves often enough to be sampled.
	r := StartReplica(t, db.URL, "--heartbeat-interval", heartbeat.String())
	a := EnrollAgent(t, r, r.URL())
	// The output limit (1 GiB by default) must not cut the flood: on a quiet
	// machine it printed exactly 1 GiB in its 60 s, the rest was dropped
	// with a note, and its checksum line never reached podium run.
	a.Args = append(a.Args, "--output-limit", "16GiB")
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	flood := startHashedRun(t, r, "--image", dockertest.EnsureImage(t), "--", "sh", "-c", floodScript(floodCode))
	floodID := flood.TaskID(t)
	wait.For(t, runWithin, "the flooding task's output to reach podium run", func() bool { return flood.sum.count() > 1<<20 })
	bystander := Workload{Lines: 30, Every: time.Second, Code: 4}
	by := StartRun(t, []string{r.URL()}, bystander.Args(t)...)

	// Sample the node's status and the replica's heartbeat count until the
	// flood's podium run exits: the node must never leave online, and the
	// count must grow between samples ten heartbeat intervals apart.
	var (
		statuses   = map[podiumv1.NodeStatus]int{}
		notOnline  []string
		beats      []float64
		lastBeatAt time.Time
		start      = time.Now()
		deadline   = start.Add(floodFor + runWithin)
		tick       = time.NewTicker(250 * time.Millisecond)
	)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-flood.p.done:
			done = true
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flooding task's podium run has not exited %s after it started; stderr:\n%s", time.Since(start), flood.stderr.String())
		}
		n, err := r.Node(a.Node)
		if err != nil {
			t.Fatalf("list the node during the flood: %v", err)
		}
		statuses[n.Status]++
		if n.Status != podiumv1.NodeStatus_NODE_STATUS_ONLINE && len(notOnline) < 10 {
			notOnline = append(notOnline, fmt.Sprintf("+%s %s", time.Since(start).Round(time.Second), n.Status))
		}
		if time.Since(lastBeatAt) >= 10*heartbeat {
			beats = append(beats, heartbeatsWritten(t, r))
			lastBeatAt = time.Now()
		}
	}
	elapsed := time.Since(start)
	t.Logf("the flooding task's podium run exited after %s with %d bytes printed; node statuses sampled: %v; podium_heartbeats_written_total every %s: %v",
		elapsed.Round(time.Second), flood.sum.count(), statuses, 10*heartbeat, beats)
	if len(notOnline) > 0 {
		t.Errorf("during the flood the node left online: %v (samples %v)", notOnline, statuses)
	}
	for i := 1; i < len(beats); i++ {
		if beats[i] <= beats[i-1] {
			t.Errorf("podium_heartbeats_written_total did not grow over %s during the flood (samples %v): the node's heartbeats stopped", 10*heartbeat, beats)
			break
		}
	}

	bystander.Check(t, r, by)
	flood.check(t, r, floodID, floodCode)
	NothingLeft(t, a.Node)
}

// heartbeatsWritten is the replica's podium_heartbeats_written_total.
func heartbeatsWritten(t testing.TB, r *Replica) float64 {
	t.Helper()
	res, err := http.Get(r.URL() + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", r.URL(), err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "podium_heartbeats_written_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("podium_heartbeats_written_total %q: %v", v, err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s/metrics: %v", r.URL(), err)
	}
	t.Fatalf("%s/metrics has no podium_heartbeats_written_total", r.URL())
	return 0
}

// tailSum is a writer that hashes everything written to it but its last
// line, kept aside, so that output too large to hold can be checked
// against a checksum printed as its last line.
type tailSum struct {
	mu   sync.Mutex
	h    hash.Hash
	n    int64
	tail []byte // the last bytes written, not yet hashed
}

// tailKeep is more than a checksum line ("sha256 " + 64 hex + "\n").
const tailKeep = 256

func newTailSum() *tailSum { return &tailSum{h: sha256.New()} }

func (s *tailSum) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += int64(len(p))
	s.tail = append(s.tail, p...)
	if over := len(s.tail) - tailKeep; over > 0 {
		s.h.Write(s.tail[:over])
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	return len(p), nil
}

// count is the bytes written so far.
func (s *tailSum) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// split is the sha256 of everything before the last line, the hex of a
// last line "sha256 HEX", and the last line as written; ok is false if
// there is no such last line.
func (s *tailSum) split() (body, claimed, last string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	trimmed := bytes.TrimSuffix(s.tail, []byte("\n"))
	i := bytes.LastIndexByte(trimmed, '\n')
	last = string(s.tail[i+1:])
	hexs, found := bytes.CutPrefix(trimmed[i+1:], []byte("sha256 "))
	if i < 0 || !found || len(hexs) != 64 || len(trimmed) == len(s.tail) {
		return "", "", last, false
	}
	// Hash the rest of the body on a copy of the running state.
	state, err := s.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(err)
	}
	sum := sha256.New()
	if err := sum.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		panic(err)
	}
	sum.Write(s.tail[:i+1])
	return hex.EncodeToString(sum.Sum(nil)), string(hexs), last, true
}

// hashedRun is a `podium run` whose stdout is hashed as it comes, not
// kept: a flood is too large to hold.
type hashedRun struct {
	p      *proc
	sum    *tailSum
	stderr *logBuffer
}

// startHashedRun starts `podium --server r run ARGS...` with the test token.
func startHashedRun(t testing.TB, r *Replica, args ...string) *hashedRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "podium"), append([]string{"--server", r.URL(), "run"}, args...)...)
	cmd.Env = append(os.Environ(), "PODIUM_TOKEN="+coordtest.Token)
	h := &hashedRun{sum: newTailSum(), stderr: &logBuffer{}}
	cmd.Stdout, cmd.Stderr = h.sum, h.stderr
	h.p = startProc(t, cmd)
	t.Cleanup(func() {
		select {
		case <-h.p.done:
		default:
			h.p.kill()
			t.Logf("podium run was still running at the end; stderr:\n%s", h.stderr.String())
		}
	})
	return h
}

// TaskID is the task id podium run announced on stderr, waited for.
func (h *hashedRun) TaskID(t testing.TB) string {
	t.Helper()
	var id string
	wait.For(t, runWithin, "podium run to print the task id", func() bool {
		id = taskIDRe.FindString(h.stderr.String())
		return id != ""
	})
	return id
}

// check checks, once podium run has exited, that it exited code; that
// what it printed ends with the task's own checksum of the rest; that the
// output stored at r is the same bytes; and that the task ended with its
// own status and code.
func (h *hashedRun) check(t testing.TB, r *Replica, id string, code int) {
	t.Helper()
	select {
	case <-h.p.done:
	case <-time.After(runWithin):
		t.Fatalf("podium run did not exit within %s; stderr:\n%s", runWithin, h.stderr.String())
	}
	if got := h.p.cmd.ProcessState.ExitCode(); got != code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", got, code, h.stderr.String())
	}
	body, claimed, last, ok := h.sum.split()
	if !ok {
		t.Fatalf("podium run's stdout (%d bytes) does not end with the task's checksum line; it ends %q; stderr:\n%s", h.sum.count(), last, h.stderr.String())
	}
	if body != claimed {
		t.Errorf("podium run printed %d bytes whose sha256 before the last line is %s; the task's own checksum of what it printed is %s", h.sum.count(), body, claimed)
	}
	stored := storedSum(t, r, id)
	sbody, sclaimed, slast, ok := stored.split()
	switch {
	case !ok:
		t.Errorf("the stored stdout (%d bytes) does not end with the task's checksum line; it ends %q", stored.count(), slast)
	case stored.count() != h.sum.count() || sbody != body || sclaimed != claimed:
		t.Errorf("the stored stdout (%d bytes, sha256 before its last line %s, last line %q) differs from what podium run printed (%d bytes, %s, %q)",
			stored.count(), sbody, slast, h.sum.count(), body, last)
	}
	tk := r.Task(t, id)
	want := podiumv1.TaskState_TASK_STATE_SUCCEEDED
	if code != 0 {
		want = podiumv1.TaskState_TASK_STATE_FAILED
	}
	if tk.State != want || tk.ExitCode == nil || tk.GetExitCode() != int32(code) {
		t.Errorf("task %s ended %s (%q) with exit code %v, want %s with its own %d", id, tk.State, tk.Reason, tk.ExitCode, want, code)
	}
}

// storedSum is the stdout stored for the task at r, as `podium logs` prints
// it, hashed as it streams. The CLI reads the stored output back, not this
// test binary: a flood is hundreds of MB of events, and decoding them under
// the race detector took minutes of a 2-core machine's CPU.
func storedSum(t testing.TB, r *Replica, id string) *tailSum {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "podium"), "--server", r.URL(), "logs", "--quiet", id)
	cmd.Env = append(os.Environ(), "PODIUM_TOKEN="+coordtest.Token)
	s, stderr := newTailSum(), &logBuffer{}
	cmd.Stdout, cmd.Stderr = s, stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podium logs %s: %v\n%s", id, err, stderr.String())
	}
	return s
}

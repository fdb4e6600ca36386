package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// violations is the checker's verdict: each a line saying which invariant
// broke, for which task, with what was seen.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) add(format string, a ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lines = append(v.lines, fmt.Sprintf(format, a...))
}

func terminal(s podiumv1.TaskState) bool {
	return s >= podiumv1.TaskState_TASK_STATE_SUCCEEDED
}

// maxAttempts is the most attempts the spec allows, the first included.
func maxAttempts(s *podiumv1.TaskSpec) int {
	n := int(max(s.GetMaxAttempts(), s.GetRetry().GetAttempts()))
	return max(n, 1)
}

// cliExit is the exit code `podium run` documents for a task that ended so
// (cmd/podium's exitCode, restated here as the user reads it).
func cliExit(t *podiumv1.Task) int {
	switch t.State {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED:
		return 0
	case podiumv1.TaskState_TASK_STATE_CANCELLED:
		return 130
	case podiumv1.TaskState_TASK_STATE_FAILED:
		if s := t.GetSignal(); s > 0 && s < 128 {
			return 128 + int(s)
		}
		if t.ExitCode != nil && *t.ExitCode > 0 && *t.ExitCode <= 255 {
			return int(*t.ExitCode)
		}
	}
	return 125
}

// listTasks is every task the coordinator has, newest first, paged.
func (c *cluster) listTasks(states ...podiumv1.TaskState) ([]*podiumv1.Task, error) {
	var all []*podiumv1.Task
	after := ""
	for {
		var page []*podiumv1.Task
		err := c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
			res, err := tasksAt(url).List(ctx, connect.NewRequest(&podiumv1.ListRequest{Limit: 100, After: after, States: states}))
			if err != nil {
				return err
			}
			page = res.Msg.Tasks
			return nil
		})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 100 {
			return all, nil
		}
		after = page[len(page)-1].Id
	}
}

var activeStates = []podiumv1.TaskState{podiumv1.TaskState_TASK_STATE_QUEUED, podiumv1.TaskState_TASK_STATE_SCHEDULED,
	podiumv1.TaskState_TASK_STATE_PROVISIONING, podiumv1.TaskState_TASK_STATE_RUNNING}

// taskLog is a task's stored log, as the API returns it.
type taskLog struct {
	events []*podiumv1.EventsResponse
}

func (c *cluster) readLog(id string) (*taskLog, error) {
	var l *taskLog
	err := c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
		l = &taskLog{}
		stream, err := tasksAt(url).Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			l.events = append(l.events, stream.Msg())
		}
		return stream.Err()
	})
	return l, err
}

// attemptOutput is one attempt's stdout, chunk by chunk.
type attemptOutput struct {
	stdout []byte
}

var checksumLine = []byte("sha256 ")

// splitChecksum splits an attempt's stdout into what precedes its last line
// and the hex of a last line "sha256 HEX"; ok is false when the attempt
// did not get to print it.
func splitChecksum(out []byte) (body []byte, sum string, ok bool) {
	if !bytes.HasSuffix(out, []byte("\n")) {
		return nil, "", false
	}
	trimmed := out[:len(out)-1]
	i := bytes.LastIndexByte(trimmed, '\n')
	last := trimmed[i+1:]
	hexs, found := bytes.CutPrefix(last, checksumLine)
	if !found || len(hexs) != 64 {
		return nil, "", false
	}
	return out[:i+1], string(hexs), true
}

// checker holds the history and Podium's stored state against the
// invariants.
type checker struct {
	c       *cluster
	h       *history
	n       *nemesis
	watches []*engineWatch
	v       *violations
	// counts for the summary
	mu      sync.Mutex
	tasks   int
	states  map[string]int
	reasons map[string]int
}

// checkTask holds one finished task to the invariants about it.
func (k *checker) checkTask(tk *podiumv1.Task, s *submitted, runs []run) {
	id := tk.Id
	if !terminal(tk.State) {
		k.v.add("task %s (%s) never reached a terminal state: %s (%q), attempt %d", id, kindOf(s, tk), tk.State, tk.Reason, tk.Attempt)
		return
	}
	k.mu.Lock()
	k.tasks++
	k.states[strings.TrimPrefix(tk.State.String(), "TASK_STATE_")]++
	if (tk.State == podiumv1.TaskState_TASK_STATE_FAILED && tk.ExitCode == nil) || tk.State == podiumv1.TaskState_TASK_STATE_LOST {
		// Podium's failures, not the task's: what the faults cost.
		reason, _, _ := strings.Cut(tk.Reason, ":")
		k.reasons[strings.ToLower(strings.TrimPrefix(tk.State.String(), "TASK_STATE_"))+" ("+reason+")"]++
	}
	k.mu.Unlock()
	max := maxAttempts(tk.Spec)
	if int(tk.Attempt) > max {
		k.v.add("task %s (%s) is at attempt %d, more than its %d", id, kindOf(s, tk), tk.Attempt, max)
	}
	log, err := k.c.readLog(id)
	if err != nil {
		k.v.add("task %s: read its log: %v", id, err)
		return
	}
	// The log: positions strictly increase; no node event is stored twice
	// (an attempt's node seq once); each attempt's output is contiguous
	// from offset 0 (nothing repeated, nothing skipped); status changes
	// stop at the first terminal one of the final attempt.
	outs := map[int32]*attemptOutput{}
	nodeSeqs := map[string]bool{}
	var lastPos uint64
	var terminals []string
	succeeded, lost := false, false
	for _, e := range log.events {
		ev := e.GetEvent()
		if ev == nil {
			continue
		}
		if e.Seq <= lastPos {
			k.v.add("task %s: log position %d follows %d", id, e.Seq, lastPos)
		}
		lastPos = e.Seq
		if ev.GetSeq() > 0 && (ev.GetLog() != nil || ev.GetStatus() != nil) {
			key := fmt.Sprintf("%d/%d", ev.Attempt, ev.Seq)
			if nodeSeqs[key] {
				k.v.add("task %s: event %d of attempt %d is stored twice (log position %d)", id, ev.Seq, ev.Attempt, e.Seq)
			}
			nodeSeqs[key] = true
		}
		if l := ev.GetLog(); l != nil && l.Stream == podiumv1.LogStream_LOG_STREAM_STDOUT {
			o := outs[ev.Attempt]
			if o == nil {
				o = &attemptOutput{}
				outs[ev.Attempt] = o
			}
			if l.Offset != uint64(len(o.stdout)) {
				k.v.add("task %s attempt %d: a stdout chunk at offset %d follows %d bytes stored (repeated or missing output)", id, ev.Attempt, l.Offset, len(o.stdout))
			}
			if l.Offset <= uint64(len(o.stdout)) {
				o.stdout = append(o.stdout[:l.Offset], l.Data...)
			}
		}
		if st := ev.GetStatus(); st != nil {
			if terminal(st.State) {
				terminals = append(terminals, fmt.Sprintf("attempt %d %s (%q) at position %d", ev.Attempt, st.State, st.Reason, e.Seq))
			}
			switch st.State {
			case podiumv1.TaskState_TASK_STATE_SUCCEEDED:
				succeeded = true
			case podiumv1.TaskState_TASK_STATE_LOST:
				lost = true
			}
		}
	}
	if tk.State == podiumv1.TaskState_TASK_STATE_LOST {
		lost = true
	}
	if tk.State == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		succeeded = true
	}
	if lost && succeeded {
		k.v.add("task %s (%s) is %s, and its log has both a lost and a succeeded status: %s", id, kindOf(s, tk), tk.State, strings.Join(terminals, "; "))
	}
	// Every terminal status in the log but the last belongs to an attempt
	// that a later one followed (a retry); the last is the task's state.
	finalTerminals := 0
	for _, e := range log.events {
		if st := e.GetEvent().GetStatus(); st != nil && terminal(st.State) && e.GetEvent().Attempt >= tk.Attempt {
			finalTerminals++
			if st.State != tk.State {
				k.v.add("task %s (%s) is %s, but its final attempt's log says %s (%q)", id, kindOf(s, tk), tk.State, st.State, st.Reason)
			}
		}
	}
	if finalTerminals > 1 {
		k.v.add("task %s (%s) reached a terminal state %d times in its final attempt %d: %s", id, kindOf(s, tk), finalTerminals, tk.Attempt, strings.Join(terminals, "; "))
	}
	// Each attempt's stdout is byte-exact against the task's own checksum,
	// and, where the workload knows what the task prints, it is that (or,
	// for an attempt cut short, a prefix of it).
	want := []byte(nil)
	if s != nil {
		want = s.want
	} else if tk.ScheduleId != "" {
		_, want = linesScript(3, 10*time.Millisecond, 0)
	}
	artifactSums := map[int32]string{}
	for attempt, o := range outs {
		body, sum, ok := splitChecksum(o.stdout)
		if ok {
			if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
				k.v.add("task %s (%s) attempt %d: its stored stdout (%d bytes before the checksum line) has sha256 %x; the task printed %s",
					id, kindOf(s, tk), attempt, len(body), got, sum)
			}
			if want != nil && !bytes.Equal(body, want) {
				k.v.add("task %s (%s) attempt %d: the stored stdout is not what the task prints:\n%s", id, kindOf(s, tk), attempt, clip(body))
			}
			if a, found := bytes.CutPrefix(body, []byte("artifact ")); found {
				artifactSums[attempt] = strings.TrimSpace(string(a))
			}
		} else if want != nil && !bytes.HasPrefix(want, o.stdout) {
			k.v.add("task %s (%s) attempt %d: the stored stdout of the attempt, cut short, is not a prefix of what the task prints:\n%s",
				id, kindOf(s, tk), attempt, clip(o.stdout))
		}
	}
	if s != nil && s.kind == "inbox" && tk.State == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		if o := outs[tk.Attempt]; o == nil || !bytes.HasPrefix(o.stdout, []byte("waiting\ngot m1\ngot m2\n")) {
			k.v.add("task %s (inbox) succeeded without printing its two messages in order", id)
		}
	}
	// `podium run` exited with the task's state.
	if s != nil && s.via == "cli" && s.cliCode != cliExit(tk) {
		k.v.add("task %s: podium run exited %d, but the task ended %s (%q, exit code %s): want %d; its stderr:\n%s",
			id, s.cliCode, tk.State, tk.Reason, exitCodeOf(tk), cliExit(tk), clip([]byte(s.cliStderr)))
	}
	// Every stored artifact is the bytes its attempt hashed.
	k.checkArtifacts(tk, artifactSums)
	// No two attempts ran at the same instant, and never more attempts
	// than allowed, by what the engines saw.
	var taskRuns []run
	attempts := map[int]bool{}
	for _, r := range runs {
		if r.role == "sidecar" {
			continue
		}
		taskRuns = append(taskRuns, r)
		attempts[r.attempt] = true
		if r.attempt > max {
			k.v.add("task %s (%s): engine %s ran a container of attempt %d, more than its %d", id, kindOf(s, tk), r.engine, r.attempt, max)
		}
	}
	if len(attempts) > max {
		k.v.add("task %s (%s): the engines ran %d attempts, more than its %d", id, kindOf(s, tk), len(attempts), max)
	}
	for i, a := range taskRuns {
		for _, b := range taskRuns[i+1:] {
			if a.attempt != b.attempt && overlap(a, b) {
				k.v.add("task %s (%s): attempt %d (%s, %s) and attempt %d (%s, %s) ran at the same time", id, kindOf(s, tk),
					a.attempt, a.engine, span(a), b.attempt, b.engine, span(b))
			}
		}
	}
}

func overlap(a, b run) bool {
	aEnd, bEnd := a.end, b.end
	if aEnd == 0 {
		aEnd = 1<<63 - 1
	}
	if bEnd == 0 {
		bEnd = 1<<63 - 1
	}
	return a.start < bEnd && b.start < aEnd
}

func span(r run) string {
	end := "not seen to die"
	if r.end != 0 {
		end = time.Unix(0, r.end).UTC().Format("15:04:05.000")
	}
	return time.Unix(0, r.start).UTC().Format("15:04:05.000") + ".." + end
}

func kindOf(s *submitted, tk *podiumv1.Task) string {
	switch {
	case s != nil:
		return s.kind
	case tk.ScheduleId != "":
		return "schedule"
	}
	return "submitted, answer lost"
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:300]) + fmt.Sprintf("\n... (%d bytes) ...\n", len(b)-600) + string(b[len(b)-300:])
	}
	return string(b)
}

// checkArtifacts downloads each of the task's artifacts and checks the
// bytes against the SHA-256 the object store row gives and, where its
// attempt printed one, the task's own.
func (k *checker) checkArtifacts(tk *podiumv1.Task, printed map[int32]string) {
	var arts []*podiumv1.Artifact
	err := k.c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
		res, err := tasksAt(url).ListArtifacts(ctx, connect.NewRequest(&podiumv1.ListArtifactsRequest{Id: tk.Id}))
		if err != nil {
			return err
		}
		arts = res.Msg.Artifacts
		return nil
	})
	if err != nil {
		k.v.add("task %s: list its artifacts: %v", tk.Id, err)
		return
	}
	for _, a := range arts {
		if p, ok := printed[a.Attempt]; ok && a.Name == "blob.bin" && p != a.Sha256 {
			k.v.add("task %s attempt %d: artifact %s is stored with sha256 %s; the task's own is %s", tk.Id, a.Attempt, a.Name, a.Sha256, p)
		}
		var got []byte
		err := k.c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
			stream, err := tasksAt(url).DownloadArtifact(ctx, connect.NewRequest(&podiumv1.DownloadArtifactRequest{Id: tk.Id, Name: a.Name, Attempt: a.Attempt}))
			if err != nil {
				return err
			}
			defer stream.Close()
			h := sha256.New()
			for stream.Receive() {
				_, _ = h.Write(stream.Msg().GetChunk())
			}
			if err := stream.Err(); err != nil {
				return err
			}
			got = h.Sum(nil)
			return nil
		})
		if err != nil {
			k.v.add("task %s: download artifact %s: %v", tk.Id, a.Name, err)
			continue
		}
		if hex.EncodeToString(got) != a.Sha256 {
			k.v.add("task %s attempt %d: artifact %s downloads as bytes with sha256 %x, stored as %s", tk.Id, a.Attempt, a.Name, got, a.Sha256)
		}
	}
}

// checkConcurrency holds the containers of each concurrency key's tasks,
// as the engines saw them run, to the key's limit at every instant. A
// violation names every container of the key running at that instant, with
// its engine and span ("not seen to die" when its engine recorded no end),
// so that a report says which two overlapped and how.
func (k *checker) checkConcurrency(tasks map[string]*podiumv1.Task, runs map[string][]run) {
	type edge struct {
		at    int64
		delta int
		r     run
	}
	byKey := map[string][]edge{}
	limits := map[string]int{}
	for id, tk := range tasks {
		cc := tk.Spec.GetConcurrency()
		if cc == nil || cc.Key == "" {
			continue
		}
		limits[cc.Key] = max(int(cc.Limit), 1)
		for _, r := range runs[id] {
			if r.role == "sidecar" {
				continue
			}
			end := r.end
			if end == 0 {
				end = 1<<63 - 1
			}
			byKey[cc.Key] = append(byKey[cc.Key], edge{r.start, 1, r}, edge{end, -1, r})
		}
	}
	for key, es := range byKey {
		sort.Slice(es, func(i, j int) bool {
			if es[i].at != es[j].at {
				return es[i].at < es[j].at
			}
			return es[i].delta < es[j].delta // an end before a start at the same instant
		})
		running := map[string]run{}
		for _, e := range es {
			if e.delta < 0 {
				delete(running, e.r.engine+"/"+e.r.container)
				continue
			}
			running[e.r.engine+"/"+e.r.container] = e.r
			if len(running) > limits[key] {
				var who []string
				for _, r := range running {
					who = append(who, fmt.Sprintf("task %s attempt %d on %s: %s", r.task, r.attempt, r.engine, span(r)))
				}
				sort.Strings(who)
				k.v.add("concurrency key %s (limit %d): %d of its tasks' containers ran at once at %s (task %s started): %s",
					key, limits[key], len(running), time.Unix(0, e.at).UTC().Format("15:04:05.000"), e.r.task, strings.Join(who, "; "))
				break
			}
		}
	}
}

// checkDrains: no attempt was assigned to a node while it was drained.
// assigned_at is the assigning transaction's start, so one later than the
// moment the drain was acknowledged saw the drain.
func (k *checker) checkDrains(ctx context.Context) {
	k.n.mu.Lock()
	drains := append([]*drainWindow(nil), k.n.drains...)
	k.n.mu.Unlock()
	if len(drains) == 0 {
		return
	}
	conn, err := pgx.Connect(ctx, k.c.primary().URL(k.c.dbName))
	if err != nil {
		k.v.add("connect to Postgres to read the attempts: %v", err)
		return
	}
	defer conn.Close(ctx)
	for _, d := range drains {
		to := d.to
		if to.IsZero() {
			to = time.Now()
		}
		rows, err := conn.Query(ctx, `select task_id, attempt, assigned_at from podium.attempts
			where node_id = $1 and assigned_at > $2 and assigned_at < $3`, d.node, d.from, to)
		if err != nil {
			k.v.add("read the attempts assigned to node %s: %v", d.node, err)
			continue
		}
		for rows.Next() {
			var task string
			var attempt int
			var at time.Time
			if err := rows.Scan(&task, &attempt, &at); err == nil {
				k.v.add("node %s, drained from %s to %s, was given attempt %d of task %s at %s", d.node,
					d.from.UTC().Format("15:04:05.000"), to.UTC().Format("15:04:05.000"), attempt, task, at.UTC().Format("15:04:05.000"))
			}
		}
		rows.Close()
	}
}

// checkNoOrphans: no attempt is left open on a task that has ended.
func (k *checker) checkNoOrphans(ctx context.Context) {
	conn, err := pgx.Connect(ctx, k.c.primary().URL(k.c.dbName))
	if err != nil {
		k.v.add("connect to Postgres to look for orphan rows: %v", err)
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `select a.task_id, a.attempt, t.state from podium.attempts a join podium.tasks t on t.id = a.task_id
		where a.finished_at is null and t.state in ('succeeded', 'failed', 'cancelled', 'lost')`)
	if err != nil {
		k.v.add("look for open attempts of ended tasks: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var task, state string
		var attempt int
		if err := rows.Scan(&task, &attempt, &state); err == nil {
			k.v.add("task %s is %s, but its attempt %d is still open in podium.attempts (no finished_at)", task, state, attempt)
		}
	}
}

// checkEnginesEmpty: nothing labelled with a node is left in its engine.
func (k *checker) checkEnginesEmpty() {
	for i, e := range k.c.engines {
		label := "podium.node=" + k.c.agents[i].node
		var left []string
		err := waitUntil(2*time.Minute, "agent "+k.c.agents[i].name+"'s engine to hold nothing of its node", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			left, err = dockertest.LeftFor(ctx, e.Client(), label)
			return err == nil && len(left) == 0
		})
		if err != nil {
			k.v.add("%v: still there:\n%s", err, strings.Join(left, "\n"))
		}
	}
}

// exitCodeOf is the task's exit code as text, "none" when it has none.
func exitCodeOf(tk *podiumv1.Task) string {
	if tk.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(tk.GetExitCode())
}

// The concurrency check counts a container its engine never saw die as
// running to the end of the record, and a violation names every container
// of the key running then, with its span, so a report says which overlapped
// and whether one was simply not seen to die.
func TestConcurrencyViolationNamesTheContainers(t *testing.T) {
	t.Parallel()
	spec := &podiumv1.TaskSpec{Concurrency: &podiumv1.Concurrency{Key: "one", Limit: 1}}
	tasks := map[string]*podiumv1.Task{"task_a": {Id: "task_a", Spec: spec}, "task_b": {Id: "task_b", Spec: spec}, "task_c": {Id: "task_c", Spec: spec}}
	at := func(s int) int64 { return time.Date(2026, 12, 7, 23, 28, s, 0, time.UTC).UnixNano() }
	runs := map[string][]run{
		"task_a": {{engine: "a2", container: "c1", task: "task_a", attempt: 1, role: "task", start: at(0)}}, // never seen to die
		"task_b": {{engine: "a1", container: "c2", task: "task_b", attempt: 1, role: "task", start: at(6), end: at(8)}},
	}
	k := &checker{v: &violations{}}
	k.checkConcurrency(tasks, runs)
	if len(k.v.lines) != 1 || !strings.Contains(k.v.lines[0], "task task_a attempt 1 on a2: 23:28:00.000..not seen to die") ||
		!strings.Contains(k.v.lines[0], "task task_b attempt 1 on a1: 23:28:06.000..23:28:08.000") {
		t.Fatalf("violations %q; want one naming both containers and their spans", k.v.lines)
	}
	runs["task_a"][0].end = at(5)
	runs["task_c"] = []run{{engine: "a3", container: "c3", task: "task_c", attempt: 1, role: "task", start: at(8), end: at(9)}}
	k = &checker{v: &violations{}}
	k.checkConcurrency(tasks, runs)
	if len(k.v.lines) != 0 {
		t.Fatalf("one after another (and one ending the instant the next starts) reported as at once: %q", k.v.lines)
	}
}

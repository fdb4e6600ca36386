package faults

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/netfault"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// handoverBound is what docs/operations.md promises for a replica cut off
// from Postgres alone: its nodes are online on a healthy replica within it.
// The cut replica gives its lease connection up after 3 s without an answer
// and closes its node streams; Postgres frees the locks it held once that
// connection has been idle 10 s.
const handoverBound = 30 * time.Second

// TestReplicaCutFromPostgresHandsItsNodesOver cuts one replica (B) off from
// Postgres only, mid-task, while the other (A) stays healthy: B reaches
// Postgres through a netfault.Proxy, which is black-holed; the agent, the
// CLI and A reach B and Postgres as before. The agent was enrolled with B
// alone and its task prints a line every half second. What a user sees must
// hold: the node is online on A within handoverBound of the cut (B closes
// the node's stream, the agent moves on with its unacknowledged output, and
// Postgres lets go of B's lock); the task is never lost while it runs and
// ends succeeded, its output printed (by a `podium run` given B then A,
// which follows from B first) and stored byte-exact against its own
// checksum; B had ended the node's session before A started one (no two
// replicas drove it); never were two attempts of the task running at once;
// and a `podium --server B,A nodes` run after the cut lists the node through
// A, saying it moved on from B. When the link is mended B is ready again.
func TestReplicaCutFromPostgresHandsItsNodesOver(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	link := netfault.New(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	viaLink := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", link.Addr(), db.Name)
	// Thresholds past the handover bound, so that a node the cut replica
	// kept would be declared offline (and its task lost) within the row.
	thresholds := []string{"--unreachable-after", "20s", "--offline-after", "45s"}
	a := StartReplica(t, pg.TCPURL(db.Name), thresholds...)
	b := StartReplica(t, viaLink, thresholds...)
	ag := EnrollAgent(t, b, b.URL())
	ag.Start()
	b.WaitOnlineOn(t, ag.Node)
	waitKept(t, ag, a)

	w := Workload{Lines: 60, Every: 500 * time.Millisecond, Code: 0}
	run := StartRun(t, []string{b.URL(), a.URL()}, w.Args(t)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(5))
	two := copies(t, id)
	states := sampleStates(t, a, id)

	link.BlackHole()
	cut := time.Now()
	a.WaitOnlineOn(t, ag.Node)
	handover := time.Since(cut)
	t.Logf("the node was online on A %s after B was cut from Postgres", handover.Round(100*time.Millisecond))
	if handover > handoverBound {
		t.Errorf("the node was online on A %s after the cut, past the documented bound of %s", handover.Round(time.Second), handoverBound)
	}
	if strings.Contains(string(run.Stdout()), "sha256 ") {
		t.Fatal("the task ended before its node moved: the row tested nothing")
	}

	list := StartPodium(t, []string{b.URL(), a.URL()}, "nodes")
	if code := list.Wait(t); code != 0 {
		t.Errorf("podium --server B,A nodes exited %d; stderr:\n%s", code, list.Stderr())
	} else if !strings.Contains(string(list.Stdout()), ag.Node) {
		t.Errorf("podium --server B,A nodes does not list %s:\n%s", ag.Node, list.Stdout())
	}
	if !strings.Contains(list.Stderr(), b.URL()) || !strings.Contains(list.Stderr(), a.URL()) {
		t.Errorf("podium --server B,A nodes did not say it moved on from B to A; stderr:\n%s", list.Stderr())
	}
	t.Logf("podium --server B,A nodes said: %s", strings.TrimSpace(list.Stderr()))

	w.Check(t, a, run)
	if seen := states(); len(seen) > 0 {
		t.Errorf("while it ran the task was listed %s", strings.Join(seen, "; "))
	}
	if most, when := two(); most > 1 {
		t.Errorf("%d attempts of the task ran at once: %s", most, strings.Join(when, "; "))
	}
	ended, okEnd := logTime(b.Log(), "node disconnected", ag.Node)
	started, okStart := lastLogTime(a.Log(), "node connected", ag.Node)
	switch {
	case !okEnd:
		t.Errorf("B never logged the end of the node's session")
	case !okStart:
		t.Errorf("A never logged the node's session")
	case !ended.Before(started):
		t.Errorf("A started the node's session at %s, before B ended its own at %s: two replicas drove the node", started.Format(time.StampMilli), ended.Format(time.StampMilli))
	default:
		t.Logf("B ended the node's session %s after the cut, A started one %s after", ended.Sub(cut).Round(100*time.Millisecond), started.Sub(cut).Round(100*time.Millisecond))
	}

	link.Restore()
	b.WaitReady()
	NothingLeft(t, ag.Node)
}

// sampleStates asks r for the task's state until it ends or stop is called,
// and returns the states other than running (and the terminal one it ended
// in) that it saw, with when: a task listed lost while its container still
// runs is what the row exists to catch.
func sampleStates(t *testing.T, r *Replica, task string) (stop func() []string) {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []string
	)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: task}))
			cancel()
			if err == nil {
				st := res.Msg.Task.State
				if st == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
					return
				}
				if st != podiumv1.TaskState_TASK_STATE_RUNNING {
					mu.Lock()
					seen = append(seen, time.Now().Format(time.StampMilli)+": "+st.String()+" ("+res.Msg.Task.Reason+")")
					mu.Unlock()
				}
			}
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() []string {
		once.Do(func() { close(done); <-stopped })
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	t.Cleanup(func() { stop() })
	return stop
}

var logTimeRe = regexp.MustCompile(`^time=(\S+) `)

// logTime is the time of the first line of a replica's log with the message
// msg about the node.
func logTime(log, msg, node string) (time.Time, bool) {
	for _, l := range strings.Split(log, "\n") {
		if at, ok := lineTime(l, msg, node); ok {
			return at, true
		}
	}
	return time.Time{}, false
}

// lastLogTime is logTime's last such line.
func lastLogTime(log, msg, node string) (time.Time, bool) {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if at, ok := lineTime(lines[i], msg, node); ok {
			return at, true
		}
	}
	return time.Time{}, false
}

func lineTime(l, msg, node string) (time.Time, bool) {
	if !strings.Contains(l, `msg="`+msg+`"`) || !strings.Contains(l, "node="+node) {
		return time.Time{}, false
	}
	m := logTimeRe.FindStringSubmatch(l)
	if m == nil {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	return at, err == nil
}

package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/leader"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// One replica leads; when its lease goes, a standby takes over: it schedules,
// and its watchdog notices a node that stopped heartbeating.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	opts := coordtest.Options{
		Nodes:    nodes.Config{HeartbeatInterval: 500 * time.Millisecond}, // the sim node never beats
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: time.Second, OfflineAfter: 2 * time.Second},
	}
	a := coordtest.Start(t, db.URL, opts)
	b := coordtest.Start(t, db.URL, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coordtest.Eventually(t, 10*time.Second, "a leader", func() bool { return a.Leading() || b.Leading() })
	if a.Leading() && b.Leading() {
		t.Fatal("two leaders at once")
	}
	leader, standby := a, b
	if b.Leading() {
		leader, standby = b, a
	}
	l, err := leader.Leases().Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killBackend(t, ctx, db.URL, l.PID())
	coordtest.Eventually(t, 10*time.Second, "the standby to lead", func() bool { return standby.Leading() })

	// The new leader schedules: a node on the standby gets a task submitted there.
	id, key := enroll(t, standby)
	node, _ := connectNode(t, ctx, standby, id, key)
	taskID := submit(t, ctx, standby, &podiumv1.TaskSpec{Image: "busybox"})
	a1 := assignOf(t, node)
	if a1.TaskId != taskID {
		t.Fatalf("assigned %s, want %s", a1.TaskId, taskID)
	}
	node.send(t, status(taskID, a1.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	// And its watchdog runs: the silent node goes offline and its task is lost.
	coordtest.Eventually(t, 15*time.Second, "the task to be lost", func() bool {
		res, err := standby.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
		return err == nil && res.Msg.Task.State == podiumv1.TaskState_TASK_STATE_LOST
	})
}

// A leading replica that shuts down hands leadership over at once: its leader
// releases the lock while the replica's lease connection still stands (the
// stop order of server.Run) and rings the standby. The standby has lost a try
// before the leader stops and its retry is a minute away, so only a ring after
// the lock came free makes it lead in time. (Its bus's start-up ring could in
// principle be that ring; coordinator/leader's own test rules it out.)
func TestLeaderShutdownHandsOver(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	start := func() (*coordtest.Replica, *logBuffer) {
		var log logBuffer
		opts := coordtest.Options{Leader: leader.Config{Retry: time.Minute},
			Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		return coordtest.Start(t, db.URL, opts), &log
	}
	a, aLog := start()
	b, bLog := start()
	coordtest.Eventually(t, 10*time.Second, "a leader", func() bool { return a.Leading() || b.Leading() })
	leading, standby, standbyLog := a, b, bLog
	if b.Leading() {
		leading, standby, standbyLog = b, a, aLog
	}
	if standby.Leading() {
		t.Fatal("two leaders at once")
	}
	coordtest.Eventually(t, 10*time.Second, "the standby to lose a try for the lock", func() bool {
		return standbyLog.has("another replica leads; standing by")
	})
	leading.Stop()
	coordtest.Eventually(t, 20*time.Second, "the standby to lead (well before its one-minute retry)", func() bool { return standby.Leading() })
}

// logBuffer keeps a replica's log for a test to read.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

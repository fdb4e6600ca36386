package executor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// File descriptors. The agent holds a few for each running task (its
// attach stream, the runner log it tails, its spool file) and many more for
// a moment while a task starts (engine calls, iptables' pipes, the task's
// files). Out of descriptors (EMFILE), everything the agent does fails at
// once: every task then starting failed with a different, unclear reason,
// and the running ones lost their spool files. So a task starts only while
// the agent has room for its start and headroom for the rest of its work;
// otherwise it waits for descriptors to free (a running task ending), and,
// past FDWait, fails with a reason that names the limit and how to raise it.

const (
	// DefaultFDWait is how long a task waits for file descriptors before it
	// fails with ReasonNoFileDescriptors.
	DefaultFDWait = time.Minute
	// fdsToStart is what a starting task is counted at until it runs.
	fdsToStart = 6
	// fdsHeadroom is left for the agent's own work: its coordinator
	// connection, spool files, artifact uploads, the running tasks' ends.
	fdsHeadroom = 8
	// lowFDLimit is the limit below which the agent warns at start.
	lowFDLimit = 1024
	// ReasonNoFileDescriptors starts the reason of a task failed for want
	// of file descriptors on its node.
	ReasonNoFileDescriptors = "node out of file descriptors"
	// fdAdvice says what to do about a limit too low.
	fdAdvice = "raise LimitNOFILE in the podium-agent unit (systemctl edit podium-agent; or `ulimit -n` where it is started by hand), or lower --max-tasks"
)

// fdGate admits starting tasks while the agent has descriptors to spare.
type fdGate struct {
	limit int // the soft RLIMIT_NOFILE; 0: none worth counting
	wait  time.Duration

	mu       sync.Mutex
	starting int // tasks admitted that have not yet launched
}

func newFDGate(wait time.Duration, log *slog.Logger) *fdGate {
	if wait <= 0 {
		wait = DefaultFDWait
	}
	g := &fdGate{wait: wait}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur >= 1<<24 {
		return g
	}
	g.limit = int(rl.Cur)
	if g.limit < lowFDLimit {
		log.Warn("the agent may open few files: tasks that find no file descriptors to start wait, then fail with \""+ReasonNoFileDescriptors+"\"; "+fdAdvice,
			"limit", g.limit, "per_running_task", "about 4", "per_starting_task", fdsToStart)
	}
	return g
}

// openFDs is how many descriptors the process has open.
func openFDs() (int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// acquire waits until the task may start: until the descriptors open, those
// of the tasks already starting, this one's and the headroom fit the
// limit. While it waits it notes why, once. It returns release, to call
// once the task has launched (or not); or a failed status after the wait;
// or ok false if ctx ended or cancelled says so first (the agent is
// stopping, or the task was cancelled).
func (g *fdGate) acquire(ctx context.Context, note func(format string, args ...any), cancelled func() bool) (release func(), st *podiumv1.StatusChange, ok bool) {
	if g.limit == 0 {
		return func() {}, nil, true
	}
	deadline := time.Now().Add(g.wait)
	noted := false
	for {
		g.mu.Lock()
		open, err := openFDs()
		if err != nil || open+(g.starting+1)*fdsToStart+fdsHeadroom <= g.limit {
			g.starting++
			g.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					g.mu.Lock()
					g.starting--
					g.mu.Unlock()
				})
			}, nil, true
		}
		starting := g.starting
		g.mu.Unlock()
		if !noted {
			note("waiting for file descriptors on the node: the agent has %d open of the %d it may (RLIMIT_NOFILE), with %d tasks starting; it waits up to %s for running tasks to free some",
				open, g.limit, starting, g.wait)
			noted = true
		}
		if time.Now().After(deadline) {
			return nil, failed("%s: the agent had %d open of the %d it may (RLIMIT_NOFILE) for %s, too few to start a task (about %d while it starts); %s",
				ReasonNoFileDescriptors, open, g.limit, g.wait, fdsToStart, fdAdvice), true
		}
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-time.After(250 * time.Millisecond):
		}
		if cancelled() {
			return nil, nil, false
		}
	}
}

// withFDAdvice adds what to do to a reason that quotes EMFILE or ENFILE
// ("too many open files", "too many open files in system"): the error came
// from deep in a start, with nothing saying which limit it hit.
func withFDAdvice(reason string) string {
	if !strings.Contains(reason, "too many open files") || strings.HasPrefix(reason, ReasonNoFileDescriptors) {
		return reason
	}
	return fmt.Sprintf("%s (the agent ran out of file descriptors: %s)", reason, fdAdvice)
}

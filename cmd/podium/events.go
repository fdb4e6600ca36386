package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/statusline"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// printer writes a task's events for a person: log chunks to stdout or stderr
// unchanged, everything Podium says as "→ " lines on stderr. It is safe for
// concurrent use, because run's cancel goroutine reports on the same stderr
// the follower writes the task's stderr to.
type printer struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	// quiet leaves out the "→ " lines, so stderr holds only the task's stderr
	// (and podium's own errors).
	quiet bool
	// midLine is true when the last byte podium wrote to stderr was not a
	// newline: the task left a partial line there, and a "→ " line written
	// now would be glued onto it.
	midLine bool
	// node, when set, says which node runs an attempt, for "→ running on
	// node_…". StatusChange events do not carry the node; the task does.
	node func(ctx context.Context) (nodeID string, attempt int32)
	// ended is true once a terminal status has been printed.
	ended bool
}

func newPrinter(stdout, stderr io.Writer, quiet bool) *printer {
	return &printer{stdout: stdout, stderr: stderr, quiet: quiet}
}

// event prints one event. Log chunks are written as they are, in one Write
// each and without buffering, so output appears as soon as it arrives and a
// binary stream survives byte for byte.
func (p *printer) event(ctx context.Context, ev *podiumv1.TaskEvent) error {
	switch b := ev.GetBody().(type) {
	case *podiumv1.TaskEvent_Log:
		data := b.Log.GetData()
		if len(data) == 0 {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if b.Log.GetStream() == podiumv1.LogStream_LOG_STREAM_STDERR {
			p.midLine = data[len(data)-1] != '\n'
			if _, err := p.stderr.Write(data); err != nil {
				return fmt.Errorf("write the task's stderr: %w", err)
			}
			return nil
		}
		// STDOUT, and UNSPECIFIED from a sender that did not say: stdout
		// is where output goes when nothing says otherwise.
		if _, err := p.stdout.Write(data); err != nil {
			return fmt.Errorf("write the task's stdout: %w", err)
		}
	case *podiumv1.TaskEvent_Note:
		p.note(b.Note.GetText())
	case *podiumv1.TaskEvent_Status:
		s := b.Status
		node := ""
		if p.node != nil && statusline.OnNode(s.GetState()) {
			if id, attempt := p.node(ctx); attempt == ev.GetAttempt() || ev.GetAttempt() == 0 {
				node = id
			}
		}
		p.note(statusline.Line(s.GetState(), s.GetReason(), s.ExitCode, s.GetSignal(), node))
		if terminal(s.GetState()) {
			p.mu.Lock()
			p.ended = true
			p.mu.Unlock()
		}
	}
	return nil
}

// final prints the task's end if no StatusChange event has shown it, which
// happens when the coordinator ends a task (writes it off, loses its node)
// without an event for it in the log.
func (p *printer) final(t *podiumv1.Task) {
	p.mu.Lock()
	ended := p.ended
	p.ended = true
	p.mu.Unlock()
	if !ended {
		p.note(statusline.Line(t.GetState(), t.GetReason(), t.ExitCode, t.GetSignal(), t.GetNodeId()))
	}
}

// note writes a "→ " line on stderr unless quiet.
func (p *printer) note(text string) {
	if p.quiet {
		return
	}
	text = strings.TrimRight(text, "\n")
	p.line("→ " + strings.ReplaceAll(text, "\n", "\n  "))
}

func (p *printer) notef(format string, args ...any) { p.note(fmt.Sprintf(format, args...)) }

// fail writes a "podium: " line on stderr, quiet or not: an error of podium
// itself must always be seen.
func (p *printer) fail(format string, args ...any) {
	p.line("podium: " + fmt.Sprintf(format, args...))
}

func (p *printer) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.midLine {
		s = "\n" + s
		p.midLine = false
	}
	_, _ = io.WriteString(p.stderr, s+"\n")
}

func terminal(s podiumv1.TaskState) bool {
	switch s {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
		return true
	}
	return false
}

// follower reads a task's events from the coordinator and hands them to a
// printer, reconnecting when the stream breaks. It resumes after the last seq
// it printed, so a coordinator restart or a move to another replica neither
// repeats nor skips a byte: seq is the one order the coordinator's log has,
// and every replica serves the same log. (Chunk offsets are not used to
// dedupe: they restart with every attempt, and the log's seq already says
// everything about order.)
//
// Each reconnect goes to the next of the coordinator's addresses: the replica
// that broke the stream is the one most likely to be gone. Reconnecting is
// bounded: a follower that cannot reach any replica for reconnectTimeout
// gives up with errGaveUp rather than hang, because a script waiting on
// "podium run" is better told that the task's state is unknown.
type follower struct {
	cl *client
	id string
	p  *printer
	// follow keeps the stream open until the task ends; without it the
	// follower stops once it has caught up with the stored log.
	follow bool
	// reached says the coordinator has answered already (run's Submit did).
	// Until it has, a failure is reported once every address has failed:
	// retrying a coordinator that was never there only makes the user wait
	// for the same error.
	reached    bool
	minBackoff time.Duration
	maxBackoff time.Duration
	// reconnectTimeout bounds the time without a stream; zero means
	// defaultReconnectTimeout.
	reconnectTimeout time.Duration
	// noteEvery is how often a "→ reconnecting" line is repeated while the
	// stream is down; zero means defaultReconnectNote.
	noteEvery time.Duration
	// lastSeq is the seq of the last event printed.
	lastSeq uint64
}

const (
	defaultReconnectTimeout = 2 * time.Minute
	defaultReconnectNote    = 5 * time.Second
)

// errGaveUp is returned when no replica could be reached for the follower's
// reconnect timeout.
var errGaveUp = errors.New("gave up reconnecting")

// gaveUpError is errGaveUp with the last failure and how long it lasted.
type gaveUpError struct {
	after time.Duration
	last  string
}

func (e *gaveUpError) Error() string {
	return fmt.Sprintf("no coordinator answered for %s (last: %s)", e.after, e.last)
}

func (e *gaveUpError) Unwrap() error { return errGaveUp }

// maxCatchUpFailures bounds retries when not following: "podium logs" of a
// finished task should fail, not wait forever, if the coordinator is gone.
const maxCatchUpFailures = 5

// run follows until the task ends (returning it), until the stored log has
// been printed (follow off: returns nil), or until an error that retrying
// cannot fix. Cancelling ctx stops it with ctx's error.
func (f *follower) run(ctx context.Context) (*podiumv1.Task, error) {
	minB, maxB := f.minBackoff, f.maxBackoff
	if minB <= 0 {
		minB = 250 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(5*time.Second, minB)
	}
	bound, every := f.reconnectTimeout, f.noteEvery
	if bound <= 0 {
		bound = defaultReconnectTimeout
	}
	if every <= 0 {
		every = defaultReconnectNote
	}
	backoff := minB
	failures := 0
	broken := false
	// down is when the stream was lost; noted, when the last
	// "→ reconnecting" line was written.
	var down, noted time.Time
	for {
		ep := f.cl.current()
		var sent atomic.Bool
		final, progressed, err := f.once(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(w httptrace.WroteRequestInfo) { sent.Store(w.Err == nil) },
		}), ep, &broken)
		if final != nil {
			return final, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil && !f.follow {
			return nil, nil
		}
		if err == nil {
			// The stream ended without the final task: the coordinator
			// went away cleanly (a rolling restart). Unless the task has
			// in fact ended with nothing left to read, reconnect.
			if t := f.endedAndRead(ctx); t != nil {
				return t, nil
			}
			err = errors.New("the coordinator closed the event stream before the task ended")
		}
		if isDefinitive(err) {
			return nil, err
		}
		if progressed {
			backoff, failures = minB, 0
		}
		failures++
		if !f.reached && failures >= len(f.cl.endpoints) {
			return nil, err
		}
		if !f.follow && failures >= max(maxCatchUpFailures, len(f.cl.endpoints)) {
			return nil, err
		}
		what := describeAt(ep.server, f.cl.hasToken, err, "")
		if !strings.Contains(what, ep.server) {
			what = ep.server + ": " + what
		}
		now := time.Now()
		if broken && sent.Load() && !connect.IsWireError(err) {
			// The stream was open again (a quiet task sends nothing for a
			// while, so no event need have come) and has broken anew: a
			// new outage, whose bound starts now. An error the replica
			// sent at once does not count: it was not serving the task.
			down = now
		}
		switch {
		case !f.reached:
			// Not yet connected anywhere: no stream was lost, and the
			// error is reported once every address has failed.
		case !broken:
			broken, down, noted = true, now, now
			f.p.notef("lost the event stream (%s); reconnecting", what)
		case now.Sub(down) >= bound:
			return nil, &gaveUpError{after: now.Sub(down).Round(time.Second), last: what}
		case now.Sub(noted) >= every:
			noted = now
			f.p.notef("still reconnecting (%s without the event stream, giving up after %s): %s",
				now.Sub(down).Round(time.Second), bound, what)
		}
		// The next try goes to the next address: when the replica that
		// broke the stream is dead, another one serves the same log.
		f.cl.cur.Store(int32((f.cl.index(ep) + 1) % len(f.cl.endpoints)))
		// Full jitter around the backoff keeps many CLIs that lost the same
		// coordinator from returning to it in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		if broken {
			wait = min(wait, max(bound-time.Since(down), 0))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxB)
	}
}

// once reads one Events stream to its end. progressed reports whether any
// message arrived, which resets the backoff.
func (f *follower) once(ctx context.Context, ep *endpoint, broken *bool) (final *podiumv1.Task, progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ep.tasks.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: f.id, AfterSeq: f.lastSeq, Follow: f.follow}))
	if err != nil {
		return nil, false, err
	}
	defer stream.Close()
	for stream.Receive() {
		msg := stream.Msg()
		if !progressed {
			progressed, f.reached = true, true
			if *broken {
				*broken = false
				f.p.notef("reconnected to %s", ep.server)
			}
		}
		if ev := msg.GetEvent(); ev != nil {
			// A replayed position is skipped: a coordinator may resend
			// around a reconnect, and the bytes are already on screen.
			if msg.GetSeq() == 0 || msg.GetSeq() > f.lastSeq {
				if err := f.p.event(ctx, ev); err != nil {
					return nil, progressed, err
				}
				f.lastSeq = max(f.lastSeq, msg.GetSeq())
			}
		}
		if t := msg.GetTask(); t != nil && terminal(t.GetState()) {
			return t, progressed, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, progressed, err
	}
	// A clean end: for a non-followed stream this is "caught up".
	f.reached = true
	return nil, progressed, nil
}

// endedAndRead asks whether the task has ended and every event of its log has
// been printed; if so it returns the task.
func (f *follower) endedAndRead(ctx context.Context) *podiumv1.Task {
	resp, err := unary(ctx, f.cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GetResponse], error) {
		return e.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: f.id}))
	})
	if err != nil {
		return nil
	}
	t := resp.Msg.GetTask()
	if terminal(t.GetState()) && t.GetLastSeq() <= f.lastSeq {
		return t
	}
	return nil
}

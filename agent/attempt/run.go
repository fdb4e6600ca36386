package attempt

// What a run of an attempt and the one who started it tell each other: the
// events it emits, how far it has got, and the two errors a caller branches
// on. The executor runs attempts and the session reports them; both speak
// these types, so neither has to import the other.

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrAlreadyRunning is what starting an attempt that is already running
// returns. A coordinator may repeat an assignment after a reconnect; running
// it twice would run the user's task twice, so the caller ignores the repeat.
var ErrAlreadyRunning = errors.New("attempt: the task attempt is already running on this node")

// RunnerFenced starts the reason of an attempt whose runner fenced it: the
// agent's lease on it ran out while the agent hung, was stopped or reached no
// coordinator replica. Such an end is the node's, not the task's: the
// session holds it as a fenced attempt's, so the control plane applies its
// node-loss policy and runs the task again.
const RunnerFenced = "fenced: the task's runner stopped it"

// ErrNotRunning is what delivering a message to an attempt this node does not
// run returns. The attempt has just ended, or never came here: the caller
// drops the message.
var ErrNotRunning = errors.New("attempt: the task attempt is not running on this node")

// Emit receives a run's events. The run fills task_id, attempt, time and
// the body; the caller assigns seq. cur, when not nil, is how far the run has
// read its runner logs once this event is stored: the caller must store the
// two together (see package spool), and hand the newest cursor back when it
// resumes the attempt after a restart. The caller assigns seq by setting
// ev.Seq before Emit returns: the executor keeps the newest with an
// attempt's pending uploads, so that the notes of a restarted agent continue
// the task's log. A run calls Emit from one goroutine at a time, in the
// order of its events. Emit may block a log chunk, or a note that carries a
// cursor (a sidecar's line: output read from a runner log), to push back on
// a task that writes faster than its output can be shipped; the run then reads its runner log later, and nothing is
// lost or held in memory. A status change, or a note without a cursor (the
// run's own remarks, which are few), never blocks, so a run can always end.
type Emit func(ev *podiumv1.TaskEvent, cur *Cursor)

// Cursor is how far a run has turned its runner logs into events. Whoever
// stores events stores it with them as bytes (Marshal), without looking
// inside; only the run that resumes from it reads it (ParseCursor).
type Cursor struct {
	// Started is set once the task's container started and RUNNING was
	// emitted.
	Started bool `json:"started,omitempty"`
	// Task is the position in the task's runner log.
	Task runlog.Position `json:"task"`
	// Sidecars are the positions in the sidecars' runner logs, by name.
	Sidecars map[string]runlog.Position `json:"sidecars,omitempty"`
	// Output is how many bytes of the attempt's output limit its events
	// have used: the task's output sent, and the notes that count against
	// the limit. Capped is set once the limit was reached and noted. Both
	// ride with the positions so that an agent that resumes the attempt
	// neither lets it print a second limit's worth nor notes the limit
	// twice.
	Output uint64 `json:"output,omitempty"`
	Capped bool   `json:"capped,omitempty"`
}

// Clone is a copy of c that shares nothing with it, for a run that keeps
// moving its own cursor after handing one to Emit.
func (c *Cursor) Clone() *Cursor {
	out := *c
	if c.Sidecars != nil {
		out.Sidecars = make(map[string]runlog.Position, len(c.Sidecars))
		for k, v := range c.Sidecars {
			out.Sidecars[k] = v
		}
	}
	return &out
}

// Marshal encodes the cursor for storage.
func (c *Cursor) Marshal() []byte {
	b, _ := json.Marshal(c) // a struct of numbers and strings always encodes
	return b
}

// ParseCursor decodes a stored cursor; empty input is the zero cursor.
func ParseCursor(b []byte) (Cursor, error) {
	var c Cursor
	if len(b) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Cursor{}, fmt.Errorf("attempt: stored cursor %q: %w", b, err)
	}
	return c, nil
}

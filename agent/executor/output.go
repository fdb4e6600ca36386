package executor

// What a run lets through of its output: the cap on an attempt's bytes, the
// rate of its sidecars' lines, and the notes that stand for what was left
// out.

import (
	"fmt"
	"strings"
	"time"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultOutputLimit is how much output an attempt keeps when neither its
// spec nor the node's configuration says otherwise. It is far beyond what a
// person reads, and it keeps one task that prints without end from filling
// the coordinator's database, the object store that archives its events and
// the node's disk.
const DefaultOutputLimit = 1 << 30

// DefaultRunnerBacklog is how much of a runner log may go unread by the agent
// before the runner holds the task's output back (see package runlog's
// progress file). A task printing faster than its output is shipped is then
// slowed down, and this, not the task's whole output, is what waits on the
// host's disk. A few MiB keep a fast task's output flowing between the
// agent's reads.
const DefaultRunnerBacklog = 8 << 20

// A sidecar's lines become notes, one event each, so a sidecar that prints
// without pause (a database in debug mode, `yes`) would make a flood of tiny
// events for every part of the way to the coordinator. Each sidecar may show
// noteBurst lines at once and noteRate a second after that; the lines over it
// are counted and said in one note ("… 12345 lines skipped"), which is what a
// person reading the log needs.
const (
	noteBurst = 200
	noteRate  = 20
)

// maxSkippedNotes is how many "artifact … skipped" notes a run writes; the
// rest are counted in one note. A task can leave a million files behind.
const maxSkippedNotes = 20

// lineBudget is a token bucket of sidecar lines.
type lineBudget struct {
	tokens float64
	last   time.Time
}

// left refills the bucket for the time passed and reports whether it holds
// a line.
func (b *lineBudget) left(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = noteBurst
	} else if now.After(b.last) {
		b.tokens = min(noteBurst, b.tokens+now.Sub(b.last).Seconds()*noteRate)
	}
	b.last = now
	return b.tokens >= 1
}

// take spends a line; left must have said there is one.
func (b *lineBudget) take() { b.tokens-- }

// roomLocked is how many of n bytes of output still fit under the attempt's
// limit; emitMu must be held.
func (r *run) roomLocked(n int) int {
	if r.cur.Capped {
		return 0
	}
	left := r.outputLimit - int64(r.cur.Output)
	if left <= 0 {
		return 0
	}
	return int(min(int64(n), left))
}

// capLocked notes, once, that the attempt reached its output limit, and drops
// its output from here on; emitMu must be held. withCursor says whether the
// note carries the cursor: it does when a tail reached the limit (its
// position has moved past what it dropped), not when the run's own notes
// did.
func (r *run) capLocked(withCursor bool) {
	if r.cur.Capped {
		return
	}
	r.cur.Capped = true
	r.capped.Store(true)
	r.log.Info("the task reached its output limit; its further output is dropped", "limit_bytes", r.outputLimit)
	text := fmt.Sprintf("output limit of %s reached: further output of this attempt is dropped", taskspec.FormatSize(r.outputLimit))
	ev := &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: text}}}
	if withCursor {
		r.emitLocked(ev, r.cur.Clone())
	} else {
		r.emitLocked(ev, nil)
	}
}

// countedNoteLocked emits a note that counts against the output limit, or
// drops it once the limit is reached. cur, when set, is stored with it.
func (r *run) countedNoteLocked(text string, withCursor bool) {
	if r.roomLocked(len(text)) < len(text) {
		r.capLocked(withCursor)
		return
	}
	r.cur.Output += uint64(len(text))
	ev := &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: strings.ToValidUTF8(text, "\uFFFD")}}}
	if withCursor {
		r.emitLocked(ev, r.cur.Clone())
	} else {
		r.emitLocked(ev, nil)
	}
}

// countedNote is countedNoteLocked for a note of the run's own, without a
// cursor.
func (r *run) countedNote(format string, args ...any) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.countedNoteLocked(fmt.Sprintf(format, args...), false)
}

// checkOutputLimit refuses a spec that asks for more output than this node
// keeps; the scheduler does not place one here, so it is a coordinator that
// did not know the node's maximum.
func (r *run) checkOutputLimit() *podiumv1.StatusChange {
	n := r.spec.GetOutputLimitBytes()
	if n < 0 {
		return failed("the spec's output_limit_bytes is negative (%d): give 0 for the node's default, or a size", n)
	}
	if n > r.e.maxOutputLimit {
		return failed("the spec's output limit of %s is more than this node keeps (%s): lower output_limit, "+
			"or raise the node's --max-output-limit", taskspec.FormatSize(n), taskspec.FormatSize(r.e.maxOutputLimit))
	}
	return nil
}

package session

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// retireAfter is how long the outbox remembers a task attempt it stopped
// tracking. It is what keeps a repeated assignment of an attempt that already
// ran from running again, and what lets a rejected attempt that is assigned
// once more continue its seq numbering instead of colliding with the events
// the coordinator already stored.
const retireAfter = time.Hour

// taskLog is the unacknowledged tail of one task attempt's events.
type taskLog struct {
	key attempt.Key
	// events hold seq acked+1 .. lastSeq, oldest first.
	events  []*podiumv1.TaskEvent
	bytes   int
	lastSeq uint64 // highest seq given out
	acked   uint64 // highest seq the coordinator stored
	sent    uint64 // highest seq sent on the current stream
	// final is whether the newest event ends the attempt on this node: a
	// terminal status, or the QUEUED status of a rejected assignment.
	final bool
	// ended is whether the attempt ran to a terminal status (as opposed to
	// being rejected).
	ended bool
	// progress is when acks last moved, or when sending started after a
	// quiet period; the stall check measures from it.
	progress time.Time
	// volatile marks the notes of an attempt that was already retired (an
	// artifact upload's, after the terminal status was stored): they are
	// kept in memory only, because a spool file of them alone would read as
	// an attempt still running after a restart.
	volatile bool
}

type retired struct {
	lastSeq uint64
	ended   bool
	at      time.Time
}

// outbox numbers task events and keeps them until the coordinator has
// acknowledged storing them, so that a stream that drops loses nothing: the
// next stream re-sends everything after the acknowledged seq.
//
// It outlives streams, which is the point of it, and it is the only place the
// session's knowledge of which attempts it holds lives. With a spool it also
// outlives the agent process: every event is on disk, with the cursor the
// executor reached, before it can be sent, and every acknowledgement is
// recorded, so the next process knows exactly what to re-send.
type outbox struct {
	maxBytes int   // unacked bytes (see cost) above which output blocks
	maxSpool int64 // spool bytes above which output blocks; 0: no bound
	spool    *spool.Spool
	log      *slog.Logger

	mu    sync.Mutex
	tasks map[attempt.Key]*taskLog
	order []attempt.Key // tasks in the order they first emitted
	// turn is where in order the next batch starts; see nextBatch.
	turn    int
	retired map[attempt.Key]retired
	// forgotten are attempts the coordinator disowned (Adopt keep=false):
	// whatever they still emit while being torn down is dropped.
	forgotten map[attempt.Key]time.Time
	// fenced are attempts the node stopped itself, cut off from the control
	// plane past its offline threshold (see Session.fence): Hello leaves them
	// out, so a coordinator that still holds one applies its node-loss
	// policy. Until a HelloAck has come after the fence (true: held) their
	// events are not sent: the stream open when the node fenced may carry
	// them to a coordinator that has not given the node up yet, and their
	// final status would end the task as if it had been cancelled. Once
	// held no more, their last events (the note saying why, the final
	// status) are sent and stored as late.
	fenced map[attempt.Key]bool
	bytes  int           // unacked bytes over all tasks
	space  chan struct{} // closed (and replaced) when bytes drop
	closed bool

	notify chan struct{} // non-blocking "there is something to send"
}

func newOutbox(maxBytes int, maxSpool int64, sp *spool.Spool, log *slog.Logger) *outbox {
	return &outbox{
		maxBytes:  maxBytes,
		maxSpool:  maxSpool,
		spool:     sp,
		log:       log,
		tasks:     make(map[attempt.Key]*taskLog),
		retired:   make(map[attempt.Key]retired),
		forgotten: make(map[attempt.Key]time.Time),
		fenced:    make(map[attempt.Key]bool),
		space:     make(chan struct{}),
		notify:    make(chan struct{}, 1),
	}
}

// eventOverhead is what an event costs beyond its encoded size: the Go
// structs that hold it in memory (the event, its time, its body). Counting
// it is what makes a bound on bytes a bound on memory for tiny events too: a
// sidecar's one-letter lines cost ten times their encoded size.
const eventOverhead = 256

// cost is what an event counts against the outbox's memory bound.
func cost(ev *podiumv1.TaskEvent) int {
	return proto.Size(ev) + eventOverhead
}

// add numbers ev, spools it with cur (the executor's cursor, nil if
// unchanged) and queues it. Output — a log chunk, or a note that moves a
// cursor (a sidecar's line) — blocks while too much is
// unacknowledged (maxBytes) or the spool holds too much (maxSpool); the
// executor then stops reading the task's runner log, whose runner in turn
// holds the task back, so the output waits in the task rather than in the
// agent's memory or on its disk. Status changes and the run's own notes (no
// cursor, and few) never block, so a task can always end.
//
// Only a status change moves an attempt's final and ended flags: a note that
// comes after the terminal status (an artifact upload that failed once the
// task had ended) is sent like any other event, and the attempt stays ended.
// A note for an attempt the outbox knows nothing of is dropped: a run's
// first event is a status, so it belongs to an attempt the coordinator
// disowned, or one retired long ago.
//
// It reports whether ev ended an attempt the coordinator disowned, or one
// the node fenced: its teardown is over and its slot free, which the
// coordinator counts as busy until the node says so.
func (o *outbox) add(ev *podiumv1.TaskEvent, cur []byte) (released bool) {
	size := cost(ev)
	output := ev.GetLog() != nil || ev.GetNote() != nil && len(cur) > 0
	o.mu.Lock()
	for output && !o.closed && o.bytes > 0 && (o.bytes+size > o.maxBytes || o.spoolFullLocked()) {
		wait := o.space
		o.mu.Unlock()
		<-wait
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	key := attempt.Of(ev)
	final, ended := attempt.IsFinal(ev)
	if _, gone := o.forgotten[key]; gone {
		if final {
			delete(o.forgotten, key)
		}
		return final
	}
	isStatus := ev.GetStatus() != nil
	tl := o.tasks[key]
	if tl == nil {
		r, wasRetired := o.retired[key]
		if ev.GetNote() != nil && !wasRetired {
			o.log.Debug("dropping an event of a task attempt this node no longer tracks", "task_id", key.TaskID, "attempt", key.Attempt)
			return false
		}
		tl = &taskLog{key: key, progress: time.Now()}
		if wasRetired {
			// Continue where the attempt's earlier events stopped; see
			// retireAfter.
			tl.lastSeq, tl.acked, tl.sent = r.lastSeq, r.lastSeq, r.lastSeq
			tl.final, tl.ended, tl.volatile = true, r.ended, !isStatus
			delete(o.retired, key)
		}
		o.tasks[key] = tl
		o.order = append(o.order, key)
	}
	if isStatus {
		tl.volatile = false
	}
	tl.lastSeq++
	ev.Seq = tl.lastSeq
	if o.spool != nil && !tl.volatile {
		if err := o.spool.Append(ev, cur); err != nil {
			// Keep going in memory: the task's output is still safe in its
			// runner log, and only an agent restart from here on would
			// lose track of the attempt.
			o.log.Error("could not spool an event; it is kept in memory until the disk has room", "task_id", key.TaskID, "attempt", key.Attempt, "err", err)
		}
	}
	tl.events = append(tl.events, ev)
	tl.bytes += size
	if isStatus {
		tl.final, tl.ended = final, ended
	}
	o.bytes += size
	o.wake()
	if !ended {
		return false
	}
	_, fenced := o.fenced[key]
	return fenced
}

// spoolFullLocked reports whether the spool holds more than its bound. With
// nothing unacknowledged (o.bytes == 0) add does not ask: what the spool
// holds then is acknowledged, and compacted away on the next ack.
func (o *outbox) spoolFullLocked() bool {
	return o.spool != nil && o.maxSpool > 0 && o.spool.Size() > o.maxSpool
}

func (o *outbox) wake() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// nextBatch takes events not yet sent on the current stream, task by task,
// until the batch holds at least maxBytes or maxEvents. It marks them sent;
// if the send fails the stream is gone and resetSent rewinds.
//
// Each batch starts with the next task in turn. A task that prints faster
// than the coordinator stores has a backlog that fills every batch, and
// refills as acks free room; were batches always to start with the oldest
// task, the others' events would wait for the flood to end: an accepted
// assignment's status past the coordinator's ack deadline (the assignment
// revoked), a bystander's output and end unseen by its follower.
func (o *outbox) nextBatch(maxBytes, maxEvents int) []*podiumv1.TaskEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var batch []*podiumv1.TaskEvent
	size := 0
	n := len(o.order)
	if n == 0 {
		return nil
	}
	start := o.turn % n
	o.turn = start + 1
	for i := range n {
		key := o.order[(start+i)%n]
		if o.fenced[key] {
			continue // held until the next HelloAck; see fenced
		}
		tl := o.tasks[key]
		for _, ev := range tl.unsentLocked() {
			if len(batch) >= maxEvents || size >= maxBytes {
				return batch
			}
			if tl.sent == tl.acked {
				tl.progress = time.Now() // the stall clock starts with the first unacked send
			}
			batch = append(batch, ev)
			size += proto.Size(ev)
			tl.sent = ev.GetSeq()
		}
	}
	return batch
}

// unsentLocked is the tail of events not yet sent on the current stream.
// events holds seq acked+1 onwards without gaps, so it is found by index.
func (tl *taskLog) unsentLocked() []*podiumv1.TaskEvent {
	i := int(tl.sent - tl.acked)
	if i < 0 || i > len(tl.events) {
		return nil
	}
	return tl.events[i:]
}

// urgent reports whether a status change waits to be sent: someone (a
// `podium run`, the scheduler) is waiting on it, so it is not held back to
// gather a bigger batch.
func (o *outbox) urgent() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, tl := range o.tasks {
		if o.fenced[key] {
			continue
		}
		for _, ev := range tl.unsentLocked() {
			if ev.GetStatus() != nil {
				return true
			}
		}
	}
	return false
}

// unsent reports how much is waiting to be sent on the current stream.
func (o *outbox) unsent() (bytes, events int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, tl := range o.tasks {
		if o.fenced[key] {
			continue
		}
		for _, ev := range tl.unsentLocked() {
			events++
			bytes += proto.Size(ev)
			if bytes >= flushBytes || events >= flushEvents {
				return bytes, events // enough to know a batch is full
			}
		}
	}
	return bytes, events
}

// stats reports the events kept until acknowledged and their log bytes.
func (o *outbox) stats() (events, bytes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tl := range o.tasks {
		events += len(tl.events)
	}
	return events, o.bytes
}

// ack drops what the coordinator stored, up to seq. Once the final event of an
// attempt is stored the attempt is retired: nothing about it is left to send.
func (o *outbox) ack(key attempt.Key, seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tl := o.tasks[key]
	if tl == nil {
		return
	}
	seq = min(seq, tl.lastSeq)
	if seq <= tl.acked {
		return
	}
	tl.acked = seq
	tl.sent = max(tl.sent, seq)
	if o.spool != nil {
		if err := o.spool.Ack(key, seq); err != nil {
			o.log.Warn("could not record an acknowledgement in the spool; a restart would re-send those events", "err", err)
		}
	}
	tl.progress = time.Now()
	n := 0
	freed := 0
	for n < len(tl.events) && tl.events[n].GetSeq() <= seq {
		freed += cost(tl.events[n])
		n++
	}
	tl.events = slices.Delete(tl.events, 0, n)
	tl.bytes -= freed
	o.bytes -= freed
	if tl.final && tl.acked == tl.lastSeq {
		o.retireLocked(tl)
	}
	if freed > 0 {
		o.signalSpaceLocked()
	}
}

// signalSpaceLocked wakes producers waiting for unacked bytes to drop.
func (o *outbox) signalSpaceLocked() {
	if !o.closed {
		close(o.space)
		o.space = make(chan struct{})
	}
}

func (o *outbox) retireLocked(tl *taskLog) {
	now := time.Now()
	o.retired[tl.key] = retired{lastSeq: tl.lastSeq, ended: tl.ended, at: now}
	o.dropLocked(tl.key)
	for k, r := range o.retired {
		if now.Sub(r.at) > retireAfter {
			delete(o.retired, k)
		}
	}
	for k, at := range o.forgotten {
		if now.Sub(at) > retireAfter {
			delete(o.forgotten, k)
		}
	}
}

func (o *outbox) dropLocked(key attempt.Key) {
	if o.spool != nil {
		if err := o.spool.Remove(key); err != nil {
			o.log.Warn("could not remove a spool file", "task_id", key.TaskID, "attempt", key.Attempt, "err", err)
		}
	}
	tl := o.tasks[key]
	if tl == nil {
		return
	}
	o.bytes -= tl.bytes
	delete(o.tasks, key)
	delete(o.fenced, key)
	o.order = slices.DeleteFunc(o.order, func(k attempt.Key) bool { return k == key })
	o.signalSpaceLocked()
}

// forget stops tracking an attempt the coordinator no longer holds on this
// node, dropping its unsent events and everything it emits from now on. live
// says whether a run is still tearing it down and will emit a final event.
func (o *outbox) forget(key attempt.Key, live bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropLocked(key)
	if live {
		o.forgotten[key] = time.Now()
	}
}

// resetSent rewinds every attempt to its acknowledged seq, so a new stream
// re-sends everything the coordinator has not confirmed.
func (o *outbox) resetSent() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tl := range o.tasks {
		tl.sent = tl.acked
		tl.progress = time.Now()
	}
	o.wake()
}

// adopt applies the coordinator's view of an attempt from HelloAck: it has
// stored everything up to ackedSeq, so sending resumes after it.
func (o *outbox) adopt(key attempt.Key, ackedSeq uint64) (known bool) {
	o.ack(key, ackedSeq)
	o.mu.Lock()
	defer o.mu.Unlock()
	if tl := o.tasks[key]; tl != nil {
		if ackedSeq > tl.lastSeq {
			// The coordinator stored more than this node remembers making
			// (its spool could not be written). Numbering on from below
			// would have every new event dropped as a repeat.
			o.log.Warn("the coordinator stored more events of a task than this node remembers; numbering on after them",
				"task_id", key.TaskID, "attempt", key.Attempt, "node_last_seq", tl.lastSeq, "acked_seq", ackedSeq)
			o.bytes -= tl.bytes
			tl.events, tl.bytes = nil, 0
			tl.lastSeq, tl.acked = ackedSeq, ackedSeq
			if o.spool != nil {
				_ = o.spool.Ack(key, ackedSeq)
			}
			o.signalSpaceLocked()
		}
		tl.sent = tl.acked
		return true
	}
	return false
}

// rewindStalled re-sends the unacknowledged events of attempts whose acks
// have not moved for longer than after. On a healthy stream acks follow sends
// within milliseconds; if they stop, the coordinator may have dropped a batch
// it could not store, and sending again is cheap because ingest is
// idempotent on seq.
func (o *outbox) rewindStalled(after time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	rewound := false
	for _, tl := range o.tasks {
		if tl.sent > tl.acked && now.Sub(tl.progress) > after {
			tl.sent = tl.acked
			tl.progress = now
			rewound = true
		}
	}
	if rewound {
		o.wake()
	}
	return rewound
}

// running is what Hello reports: every attempt the node still holds, with the
// highest seq it produced.
func (o *outbox) running() []*podiumv1.RunningTask {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*podiumv1.RunningTask, 0, len(o.order))
	for _, key := range o.order {
		if _, fenced := o.fenced[key]; fenced {
			continue
		}
		out = append(out, &podiumv1.RunningTask{TaskId: key.TaskID, Attempt: key.Attempt, LastSeq: o.tasks[key].lastSeq})
	}
	return out
}

// stopping counts the fenced attempts whose run has not ended yet: Hello
// leaves them out of running, but each still holds a slot (see
// Hello.stopping).
func (o *outbox) stopping() int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int32
	for key := range o.fenced {
		if tl := o.tasks[key]; tl != nil && !tl.ended {
			n++
		}
	}
	return n
}

// stored reports whether the coordinator has acknowledged an attempt's
// events up to seq. An attempt the outbox no longer holds was retired once
// everything was acknowledged, or dropped; either way nothing of it is left
// to send.
func (o *outbox) stored(key attempt.Key, seq uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tl := o.tasks[key]; tl != nil {
		return tl.acked >= seq
	}
	return true
}

// fence marks an attempt the node stopped itself past the offline
// threshold; see fenced.
func (o *outbox) fence(key attempt.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tasks[key] != nil {
		o.fenced[key] = true
	}
}

// releaseFenced lets the events of fenced attempts go, once a HelloAck has
// settled them (the Hello before it left them out).
func (o *outbox) releaseFenced() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.fenced {
		o.fenced[k] = false
	}
	o.wake()
}

// ended reports whether an attempt already ran to a terminal status on this
// node, whether or not that status has been acknowledged yet.
func (o *outbox) ended(key attempt.Key) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tl := o.tasks[key]; tl != nil {
		return tl.ended
	}
	return o.retired[key].ended
}

// close releases every blocked producer and drops whatever comes after: the
// session is over and nobody will send it.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		close(o.space)
	}
}

// begin opens the spool of an attempt the node accepts, so that it can be
// resumed after a restart. It reports false for an attempt already being run
// (a repeated assignment), whose spool must not be touched.
//
// An attempt offered again after a give-back (here or on another node)
// numbers its events after what the coordinator stored of it (the
// assignment's acked_seq), or after what this node gave out, whichever is
// higher: numbering from below would have the new events dropped as
// repeats.
func (o *outbox) begin(a *podiumv1.Assign) bool {
	key := attempt.Of(a)
	o.mu.Lock()
	defer o.mu.Unlock()
	var last uint64
	stored := a.GetAckedSeq()
	if tl := o.tasks[key]; tl != nil {
		if !tl.final {
			return false
		}
		if tl.lastSeq < stored {
			o.bytes -= tl.bytes
			tl.events, tl.bytes = nil, 0
			tl.lastSeq, tl.acked, tl.sent = stored, stored, stored
			o.signalSpaceLocked()
		}
		last = tl.lastSeq
	} else {
		r, ok := o.retired[key]
		if !ok || r.lastSeq < stored {
			// add continues a retired attempt's numbering: record where.
			r = retired{lastSeq: max(r.lastSeq, stored), ended: r.ended, at: time.Now()}
			if r.lastSeq > 0 {
				o.retired[key] = r
			}
		}
		last = r.lastSeq
	}
	if o.spool != nil {
		if err := o.spool.Begin(a, last); err != nil {
			o.log.Error("could not start the task's spool; it runs, but an agent restart would lose track of it",
				"task_id", key.TaskID, "attempt", key.Attempt, "err", err)
		}
	}
	return true
}

// load takes the attempts a spool held when the agent started: their seqs
// continue where they stopped, and their unacknowledged events are sent
// again once a HelloAck says from where.
func (o *outbox) load(attempts []*spool.Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range attempts {
		key := a.Key
		tl := &taskLog{key: key, lastSeq: a.LastSeq, acked: a.Acked, sent: a.Acked,
			final: a.Final, ended: a.Ended, progress: time.Now(), events: a.Events}
		for _, ev := range a.Events {
			tl.bytes += cost(ev)
		}
		o.bytes += tl.bytes
		o.tasks[key] = tl
		o.order = append(o.order, key)
	}
	o.wake()
}

// continueAfter makes an ended attempt nobody holds retired at lastSeq, so
// that notes about it are sent after that seq instead of dropped; see
// Session.ContinueAfter.
func (o *outbox) continueAfter(key attempt.Key, lastSeq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, held := o.tasks[key]; held {
		return
	}
	if _, ok := o.retired[key]; ok {
		return
	}
	o.retired[key] = retired{lastSeq: lastSeq, ended: true, at: time.Now()}
}

// drop forgets an attempt entirely, spool included: one that an agent
// restart found nothing left of.
func (o *outbox) drop(key attempt.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropLocked(key)
}

// empty reports whether nothing is waiting for an acknowledgement.
func (o *outbox) empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.tasks) == 0
}

// active reports whether an attempt is in progress here: it has events and
// none of them ended it.
func (o *outbox) active(key attempt.Key) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	tl := o.tasks[key]
	return tl != nil && !tl.final
}

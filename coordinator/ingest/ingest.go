// Package ingest writes the events nodes send (their tasks' output, notes and
// state changes) into the store: many sessions' messages to a transaction,
// on a few lanes, ringing the doorbells of what they changed after each
// commit. coordinator/nodes hands it each message a node's stream brings and
// answers the node from the outcomes; coordinator/server makes one Ingester
// per replica and runs it. It also bounds the usage a node reports
// (CheckEventUsage) before that is stored.
package ingest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/podiumhq/podium/coordinator/groupcommit"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/store"
)

// maxIngestBatch bounds one shared transaction, in events: a bigger one holds
// its row locks longer than the sessions waiting behind it gain.
const maxIngestBatch = 2048

// bulkLanes is how many writers take the messages that carry a lot of
// output (bulkMessageBytes), beside the one that takes every other message.
// One writer is one transaction at a time, so one Postgres backend: a flood
// of output from many nodes was stored at the speed of one backend, while
// COPY from as many connections ran at three times that. Small messages
// (status changes, a few lines) stay on one writer, where they share commits
// best.
const bulkLanes = 4

// bulkMessageBytes is the output from which a message goes to a bulk lane.
const bulkMessageBytes = 256 << 10

// Ingester writes the events of every session on this replica in shared
// transactions (store.IngestBatch): a session hands over a message's events
// and waits for its own outcomes, and whatever arrives while a batch is
// written goes into the next one. Each lane writes one batch at a time; a
// message goes to the shared lane, or, if it carries bulkMessageBytes of
// output, to the next bulk lane in turn. A session hands over its next
// message only once the last one is stored, so its messages are stored in
// order whichever lanes they take; two sessions writing the same attempt are
// ordered by the row locks and the epoch fencing of store.IngestBatch. After
// each commit a lane rings, in one statement, the doorbell of every task
// whose log grew and, if a slot came free or a task went back to the queue,
// the scheduler's.
type Ingester struct {
	store   *store.Store
	log     *slog.Logger
	metrics *metrics.Metrics
	// lanes[0] is the shared lane; the others are bulk lanes.
	lanes []*groupcommit.Batcher[[]store.IngestItem, []store.IngestOutcome]
	// turn picks the next bulk lane.
	turn atomic.Uint32
}

// BulkLanesFor is how many bulk lanes a replica whose pool opens at most
// poolSize connections runs: up to bulkLanes, and no more than half the
// pool. Each lane holds a connection for as long as its transaction lasts;
// a flood on every lane at once must leave connections for the heartbeats,
// the Hellos and the API, which would otherwise queue behind it.
func BulkLanesFor(poolSize int32) int {
	return max(1, min(bulkLanes, int(poolSize)/2))
}

// Deps are what the ingester works with.
type Deps struct {
	Store *store.Store
	// Metrics counts what is stored; nil counts nothing.
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// New returns an ingester with as many bulk lanes as the store's pool
// allows (BulkLanesFor). It writes nothing until Run.
func New(deps Deps) *Ingester {
	return newIngester(deps, BulkLanesFor(deps.Store.PoolSize()))
}

func newIngester(deps Deps, bulk int) *Ingester {
	in := &Ingester{store: deps.Store, metrics: deps.Metrics, log: deps.Log}
	for range 1 + bulk {
		in.lanes = append(in.lanes, groupcommit.New(groupcommit.Config[[]store.IngestItem, []store.IngestOutcome]{
			Flush:     in.write,
			After:     in.ring,
			MaxWeight: maxIngestBatch,
			Weight:    countEvents,
		}))
	}
	return in
}

// Ingest stores one message's items and returns their outcomes, in order.
// A session hands over its next message only once this returns, so that its
// messages are stored in order. It fails with groupcommit.ErrStopped once Run
// has returned.
func (in *Ingester) Ingest(ctx context.Context, items []store.IngestItem) ([]store.IngestOutcome, error) {
	return in.lanes[in.laneOf(items)].Do(ctx, items)
}

// laneOf is the lane of a message's items: 0 unless they carry
// bulkMessageBytes of output, else the next bulk lane in turn. Taking turns
// rather than a lane per node keeps every bulk lane busy however few nodes
// are flooding.
func (in *Ingester) laneOf(items []store.IngestItem) int {
	size := 0
	for _, it := range items {
		for _, ev := range it.Events {
			size += len(ev.GetLog().GetData())
		}
	}
	bulk := uint32(len(in.lanes) - 1)
	if size < bulkMessageBytes || bulk == 0 {
		return 0
	}
	return 1 + int(in.turn.Add(1)%bulk)
}

// Run writes batches until ctx ends, then returns nil. Sessions can store
// no events unless it runs.
func (in *Ingester) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, l := range in.lanes {
		wg.Go(func() { l.Run(ctx) })
	}
	wg.Wait()
	return nil
}

func countEvents(items []store.IngestItem) int {
	n := 0
	for _, it := range items {
		n += len(it.Events)
	}
	return n
}

// write stores the messages of many sessions in one transaction.
func (in *Ingester) write(ctx context.Context, msgs [][]store.IngestItem) ([][]store.IngestOutcome, error) {
	var items []store.IngestItem
	for _, m := range msgs {
		items = append(items, m...)
	}
	outcomes, err := in.store.IngestBatch(ctx, items)
	if err != nil {
		return nil, err
	}
	// Counted before anyone is answered: what a session was told is stored
	// is already in the figures.
	stored, bytes := 0, 0
	for _, o := range outcomes {
		if o.Err == nil {
			stored += o.Result.Stored
			bytes += o.Result.Bytes
		}
	}
	if stored > 0 {
		in.metrics.Ingested(stored, bytes)
	}
	res := make([][]store.IngestOutcome, len(msgs))
	off := 0
	for i, m := range msgs {
		res[i] = outcomes[off : off+len(m)]
		off += len(m)
	}
	return res, nil
}

// ring tells followers of every task whose log grew, and the scheduler when a
// slot came free or a task went back to the queue, in one statement.
func (in *Ingester) ring(ctx context.Context, msgs [][]store.IngestItem, res [][]store.IngestOutcome) {
	var chans, payloads []string
	grew := map[string]bool{}
	freed := false
	for i, m := range msgs {
		for j, o := range res[i] {
			if o.Err != nil || o.Result.Stored == 0 {
				continue
			}
			if id := m[j].TaskID; !grew[id] {
				grew[id] = true
				chans, payloads = append(chans, store.ChannelTaskEvents), append(payloads, id)
			}
			if o.Result.Terminal != "" || o.Result.Requeued || o.Result.Retried {
				freed = true
			}
		}
	}
	if freed {
		chans, payloads = append(chans, store.ChannelSubmit), append(payloads, "")
	}
	if len(chans) == 0 {
		return
	}
	if err := in.store.NotifyMany(ctx, chans, payloads); err != nil && ctx.Err() == nil {
		in.log.Warn("nodes: ring the doorbells of ingested tasks (followers and the scheduler also poll, so this only delays them)", "err", err)
	}
}

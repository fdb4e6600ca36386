package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

type nodeStream = connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]

// fleet is N simulated nodes, each one real Connect stream speaking the node
// protocol: Hello, wait for HelloAck, then a Heartbeat every interval, while
// reading (and discarding) whatever the coordinator sends. Nothing is mocked on
// the coordinator's side: these are the same bytes an agent sends.
type fleet struct {
	creds      []benchkit.NodeCred
	clients    []podiumv1connect.NodeServiceClient
	transports []*http.Transport
	inflight   chan struct{} // bounds Hellos awaiting their HelloAck
	interval   time.Duration // used when a HelloAck names none
	// helloTimeout bounds one Hello's wait for its HelloAck; a stream that
	// gets none is torn down and retried, as the agent does.
	helloTimeout time.Duration

	began   time.Time // first Hello; also the origin of the heartbeat phases
	allUp   chan struct{}
	upOnce  sync.Once
	upAt    atomic.Int64 // UnixNano when every node was first connected
	mu      sync.Mutex
	helloRT []time.Duration
	errs    map[string]int

	connected atomic.Int64 // nodes holding a stream right now
	retries   atomic.Int64 // failed Hellos
	dropped   atomic.Int64 // streams that ended without the bench asking
	beats     atomic.Int64 // heartbeats sent
}

// newFleet spreads the nodes over ceil(N/perClient) HTTP/2 cleartext
// connections. Each client has its own Transport, so each is its own TCP
// connection: the Go server allows 250 concurrent streams on one connection,
// and a real fleet is one connection per machine anyway, so many connections
// is the closer picture.
func newFleet(url string, creds []benchkit.NodeCred, cfg config) *fleet {
	nc := (len(creds) + cfg.perClient - 1) / cfg.perClient
	f := &fleet{creds: creds, inflight: make(chan struct{}, cfg.inflight), interval: cfg.interval, helloTimeout: cfg.helloTimeout,
		allUp: make(chan struct{}), errs: map[string]int{}}
	for range nc {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t := &http.Transport{Protocols: &p}
		f.transports = append(f.transports, t)
		f.clients = append(f.clients, podiumv1connect.NewNodeServiceClient(&http.Client{Transport: t}, url))
	}
	return f
}

// start runs every node until ctx ends; the returned channel closes when all
// of them have stopped.
func (f *fleet) start(ctx context.Context) <-chan struct{} {
	f.began = time.Now()
	var wg sync.WaitGroup
	for i := range f.creds {
		wg.Add(1)
		go func() { defer wg.Done(); f.runNode(ctx, i) }()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		for _, t := range f.transports {
			t.CloseIdleConnections()
		}
		close(done)
	}()
	return done
}

// runNode is one node's life: connect, serve the stream until it ends,
// reconnect with the protocol's backoff (1 s doubling to 30 s, jittered) if it
// ended without the bench asking.
func (f *fleet) runNode(ctx context.Context, i int) {
	backoff := time.Second
	for ctx.Err() == nil {
		select {
		case f.inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		st, ack, sctx, cancel, err := f.hello(ctx, i)
		<-f.inflight
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.retries.Add(1)
			f.noteErr("hello", err)
			jitter := time.Duration(rand.Int64N(int64(backoff) / 2))
			if sleep(ctx, backoff/2+jitter) != nil {
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if f.connected.Add(1) == int64(len(f.creds)) {
			f.upOnce.Do(func() { f.upAt.Store(time.Now().UnixNano()); close(f.allUp) })
		}
		err = f.serve(sctx, i, st, ack, cancel)
		f.connected.Add(-1)
		if ctx.Err() != nil {
			return
		}
		f.dropped.Add(1)
		f.noteErr("stream", err)
	}
}

// hello opens a stream, says Hello and waits for the HelloAck. The stream has
// its own context so that a missing HelloAck, or the end of the session, tears
// down just this stream.
func (f *fleet) hello(ctx context.Context, i int) (*nodeStream, *podiumv1.HelloAck, context.Context, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(ctx)
	client := f.clients[i%len(f.clients)]
	st := client.Stream(sctx)
	deadline := time.Now().Add(f.helloTimeout)
	timer := time.AfterFunc(f.helloTimeout, cancel)
	began := time.Now()
	err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: f.creds[i].ID, NodeKey: f.creds[i].Key, AgentVersion: "bench", Hostname: f.creds[i].ID,
		Capacity: capacity(),
	}}})
	expired := !timer.Stop()
	var m *podiumv1.StreamResponse
	if !expired && (err == nil || errors.Is(err, io.EOF)) {
		// On io.EOF from Send the reason is what Receive returns. Once the
		// response has begun, cancelling alone does not end a Receive (see
		// serve), so the deadline also closes the request side; that may run
		// beside Receive, unlike beside Send.
		timer = time.AfterFunc(time.Until(deadline), func() { cancel(); _ = st.CloseRequest() })
		m, err = st.Receive()
		expired = !timer.Stop()
	}
	if expired {
		err = fmt.Errorf("no HelloAck within %s (%v)", f.helloTimeout, err)
	}
	if err == nil && m.GetHelloAck() == nil {
		err = fmt.Errorf("first message was %T, not a HelloAck", m.GetMsg())
	}
	if err != nil {
		cancel()
		_ = st.CloseRequest()
		_ = st.CloseResponse()
		return nil, nil, nil, nil, err
	}
	rt := time.Since(began)
	f.mu.Lock()
	f.helloRT = append(f.helloRT, rt)
	f.mu.Unlock()
	return st, m.GetHelloAck(), sctx, cancel, nil
}

func capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 4, MemoryMb: 8192, DiskFreeMb: 100_000, MaxTasks: 4}
}

// serve heartbeats and drains the stream until either fails or ctx ends.
//
// The heartbeat goroutine, the stream's only sender, closes the request side
// when it stops. That close is what ends the stream when ctx is cancelled: the
// HTTP/2 transport notices a cancelled context only once the request body is
// finished, so a Receive on a stream whose request side is still open would
// wait for the server for ever.
func (f *fleet) serve(ctx context.Context, i int, st *nodeStream, ack *podiumv1.HelloAck, cancel context.CancelFunc) error {
	interval := time.Duration(ack.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = f.interval
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		f.heartbeat(ctx, i, st, interval)
		_ = st.CloseRequest()
	}()
	var err error
	for err == nil {
		_, err = st.Receive()
	}
	cancel()
	<-sent
	_ = st.CloseResponse()
	return err
}

// heartbeat sends node i's heartbeats at began + i·interval/N + k·interval.
// Spreading the phases evenly over one interval is what a real fleet looks
// like (agents start at random times) and keeps every flush the same size;
// had every node beaten at once, one flush would carry all N and the next nine
// none.
func (f *fleet) heartbeat(ctx context.Context, i int, st *nodeStream, interval time.Duration) {
	phase := time.Duration(int64(interval) * int64(i) / int64(len(f.creds)))
	next := f.began.Add(phase)
	for now := time.Now(); !next.After(now); {
		next = next.Add(interval)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	msg := &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
		Capacity: capacity(), RunningTasks: 0, FreeSlots: 4}}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := st.Send(msg); err != nil {
			return // the receive loop reports why
		}
		f.beats.Add(1)
		next = next.Add(interval)
		t.Reset(time.Until(next))
	}
}

func (f *fleet) noteErr(what string, err error) {
	key := what + ": " + err.Error()
	if len(key) > 160 {
		key = key[:160] + "…"
	}
	f.mu.Lock()
	f.errs[key]++
	f.mu.Unlock()
}

func (f *fleet) errSamples() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.errs))
	for k, v := range f.errs {
		out[k] = v
	}
	return out
}

// connectTime is from the first Hello to the moment every node had its
// HelloAck, or up to now if some never did.
func (f *fleet) connectTime() time.Duration {
	if at := f.upAt.Load(); at != 0 {
		return time.Unix(0, at).Sub(f.began)
	}
	return time.Since(f.began)
}

func (f *fleet) helloPercentiles() (p50, p99 time.Duration) {
	f.mu.Lock()
	rt := slices.Clone(f.helloRT)
	f.mu.Unlock()
	if len(rt) == 0 {
		return 0, 0
	}
	slices.Sort(rt)
	return rt[len(rt)*50/100], rt[min(len(rt)-1, len(rt)*99/100)]
}

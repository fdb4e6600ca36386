package benchkit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

type nodeStream = connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]

// Node is what one benchmark's simulated nodes do beyond the part every
// simulated node shares (connect, Hello, wait for the HelloAck, heartbeat,
// reconnect with backoff), which Fleet does. Fleet calls it for node i from
// that node's goroutines: Hello and Adopt while connecting, Heartbeat and
// Unsent from the stream's sender, Handle from its receiver. The sender and
// the receiver run at once, so an implementation guards node i's state.
type Node interface {
	// Hello fills in node i's Hello beyond its identity: its capacity and
	// the tasks it still holds.
	Hello(i int, h *podiumv1.Hello)
	// Adopt takes the HelloAck's verdict on what the Hello listed, before
	// the stream is served.
	Adopt(i int, ack *podiumv1.HelloAck)
	// Heartbeat is node i's next heartbeat.
	Heartbeat(i int) *podiumv1.Heartbeat
	// Ready is ready when node i has events to send (nil: never).
	Ready(i int) <-chan struct{}
	// Unsent takes the events node i has not sent on this stream yet.
	Unsent(i int) []*podiumv1.TaskEvent
	// Handle is what node i does with one message from the coordinator.
	Handle(i int, m *podiumv1.StreamResponse)
}

// NoTasks is the task side of nodes that never hold a task: they take no
// Assign, send no events and ignore what the coordinator says. Embed it and
// write Hello and Heartbeat.
type NoTasks struct{}

func (NoTasks) Adopt(int, *podiumv1.HelloAck)        {}
func (NoTasks) Ready(int) <-chan struct{}            { return nil }
func (NoTasks) Unsent(int) []*podiumv1.TaskEvent     { return nil }
func (NoTasks) Handle(int, *podiumv1.StreamResponse) {}

// FleetConfig says where a fleet connects and how hard it pushes.
type FleetConfig struct {
	URL   string
	Creds []NodeCred
	// PerConn is how many nodes share one HTTP/2 connection; 0 is 1, one
	// connection per node, as real agents have.
	PerConn int
	// Shared says why the nodes share connections when they could not each
	// have one (Setup.FleetConfig); empty otherwise.
	Shared string
	// TLS is the client configuration for an https:// URL.
	TLS *tls.Config
	// Inflight bounds the Hellos waiting for their HelloAck at once, so a
	// fleet of thousands ramps up instead of arriving in one burst that
	// would measure the listen backlog.
	Inflight int
	// HelloTimeout bounds one Hello's wait for its HelloAck; a stream that
	// gets none is torn down and retried, as the agent does.
	HelloTimeout time.Duration
	// Interval is the heartbeat interval when a HelloAck names none.
	Interval time.Duration
}

// Fleet is N simulated nodes, each one real Connect stream speaking the node
// protocol: Hello, wait for HelloAck, then a heartbeat every interval, while
// a Node says what else each does. Nothing is mocked on the coordinator's
// side: these are the bytes an agent sends, one stream per node as in a real
// fleet.
type Fleet struct {
	cfg        FleetConfig
	node       Node
	clients    []podiumv1connect.NodeServiceClient
	transports []*http.Transport
	inflight   chan struct{}

	began   time.Time // the first Hello; also the origin of the heartbeat phases
	allUp   chan struct{}
	upOnce  sync.Once
	upAt    atomic.Int64 // UnixNano when every node was first connected
	mu      sync.Mutex
	helloRT []time.Duration
	errs    map[string]int

	Connected atomic.Int64 // nodes holding a stream right now
	Retries   atomic.Int64 // failed Hellos
	Dropped   atomic.Int64 // streams that ended without the benchmark asking
	Beats     atomic.Int64 // heartbeats sent
}

// NewFleet spreads the nodes over ceil(N/PerConn) HTTP/2 connections,
// cleartext or, for an https URL, over TLS. Each client has its own
// Transport, so each is its own TCP connection; one per node is what a real
// fleet looks like, and what the coordinator's per-node memory must be
// measured with.
//
// On a loopback URL the connections come from many source addresses across
// 127.0.0.0/8 (sourceSpread per address): one source address has only the
// ephemeral port range (about 28,000 ports) to connect from, fewer than a
// large fleet's connections.
func NewFleet(cfg FleetConfig, node Node) *Fleet {
	if cfg.PerConn <= 0 {
		cfg.PerConn = 1
	}
	nc := (len(cfg.Creds) + cfg.PerConn - 1) / cfg.PerConn
	f := &Fleet{cfg: cfg, node: node, inflight: make(chan struct{}, cfg.Inflight),
		allUp: make(chan struct{}), errs: map[string]int{}}
	loopback := false
	if u, err := url.Parse(cfg.URL); err == nil {
		ip := net.ParseIP(u.Hostname())
		loopback = ip != nil && ip.IsLoopback() && ip.To4() != nil
	}
	for c := range nc {
		var p http.Protocols
		t := &http.Transport{Protocols: &p}
		if cfg.TLS != nil {
			p.SetHTTP2(true)
			t.TLSClientConfig = cfg.TLS.Clone()
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		if loopback {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: sourceAddr(c)}, Timeout: 30 * time.Second}
			t.DialContext = d.DialContext
		}
		f.transports = append(f.transports, t)
		f.clients = append(f.clients, podiumv1connect.NewNodeServiceClient(&http.Client{Transport: t}, cfg.URL))
	}
	return f
}

// sourceSpread is how many connections share one source address: well below
// the ephemeral port range, so a source address never runs out of ports.
const sourceSpread = 1000

// sourceAddr is connection c's source address: 127.1.0.1 for the first
// sourceSpread connections, 127.1.0.2 for the next, and so on. The whole of
// 127.0.0.0/8 reaches the loopback interface, where a coordinator listening
// on 127.0.0.1 accepts from any of them.
func sourceAddr(c int) net.IP {
	n := uint32(127)<<24 | uint32(1)<<16 | uint32(1+c/sourceSpread)
	return net.IPv4(byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// Conns is how many HTTP/2 connections the nodes are spread over.
func (f *Fleet) Conns() int { return len(f.clients) }

// AllUp is closed once every node has had its HelloAck.
func (f *Fleet) AllUp() <-chan struct{} { return f.allUp }

// Start runs every node until ctx ends; the returned channel closes when all
// of them have stopped.
func (f *Fleet) Start(ctx context.Context) <-chan struct{} {
	f.began = time.Now()
	var wg sync.WaitGroup
	for i := range f.cfg.Creds {
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
// ended without the benchmark asking.
func (f *Fleet) runNode(ctx context.Context, i int) {
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
			f.Retries.Add(1)
			f.noteErr("hello", err)
			jitter := time.Duration(rand.Int64N(int64(backoff) / 2))
			if Sleep(ctx, backoff/2+jitter) != nil {
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		f.node.Adopt(i, ack)
		if f.Connected.Add(1) == int64(len(f.cfg.Creds)) {
			f.upOnce.Do(func() { f.upAt.Store(time.Now().UnixNano()); close(f.allUp) })
		}
		err = f.serve(sctx, i, st, ack, cancel)
		f.Connected.Add(-1)
		if ctx.Err() != nil {
			return
		}
		f.Dropped.Add(1)
		f.noteErr("stream", err)
	}
}

// hello opens a stream, says Hello and waits for the HelloAck. The stream has
// its own context so that a missing HelloAck, or the end of the session, tears
// down just this stream.
func (f *Fleet) hello(ctx context.Context, i int) (*nodeStream, *podiumv1.HelloAck, context.Context, context.CancelFunc, error) {
	h := &podiumv1.Hello{NodeId: f.cfg.Creds[i].ID, NodeKey: f.cfg.Creds[i].Key, AgentVersion: "bench", Hostname: f.cfg.Creds[i].ID}
	f.node.Hello(i, h)

	sctx, cancel := context.WithCancel(ctx)
	st := f.clients[i%len(f.clients)].Stream(sctx)
	deadline := time.Now().Add(f.cfg.HelloTimeout)
	timer := time.AfterFunc(f.cfg.HelloTimeout, cancel)
	began := time.Now()
	err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: h}})
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
		err = fmt.Errorf("no HelloAck within %s (%v)", f.cfg.HelloTimeout, err)
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

// serve runs the stream: a sender goroutine (the stream's only writer)
// heartbeats and flushes events, this one reads until either fails or ctx
// ends.
//
// The sender closes the request side when it stops. That close is what ends
// the stream when ctx is cancelled: the HTTP/2 transport notices a cancelled
// context only once the request body is finished, so a Receive on a stream
// whose request side is still open would wait for the server for ever.
func (f *Fleet) serve(ctx context.Context, i int, st *nodeStream, ack *podiumv1.HelloAck, cancel context.CancelFunc) error {
	interval := time.Duration(ack.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = f.cfg.Interval
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		f.send(ctx, i, st, interval)
		_ = st.CloseRequest()
	}()
	var err error
	for err == nil {
		var m *podiumv1.StreamResponse
		if m, err = st.Receive(); err == nil {
			f.node.Handle(i, m)
		}
	}
	cancel()
	<-sent
	_ = st.CloseResponse()
	return err
}

// send sends node i's heartbeats at began + i·interval/N + k·interval, and its
// events whenever it has some. Spreading the heartbeat phases evenly over one
// interval is what a real fleet looks like (agents start at random times) and
// keeps every heartbeat flush the same size; had every node beaten at once,
// one flush would carry all N and the next nine none.
func (f *Fleet) send(ctx context.Context, i int, st *nodeStream, interval time.Duration) {
	phase := time.Duration(int64(interval) * int64(i) / int64(len(f.cfg.Creds)))
	next := f.began.Add(phase)
	for now := time.Now(); !next.After(now); {
		next = next.Add(interval)
	}
	hb := time.NewTimer(time.Until(next))
	defer hb.Stop()
	ready := f.node.Ready(i)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: f.node.Heartbeat(i)}})
			if err != nil {
				return // the receive loop reports why
			}
			f.Beats.Add(1)
			next = next.Add(interval)
			hb.Reset(time.Until(next))
		case <-ready:
			evs := f.node.Unsent(i)
			if len(evs) == 0 {
				continue
			}
			if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{
				Events: &podiumv1.EventBatch{Events: evs}}}); err != nil {
				return
			}
		}
	}
}

func (f *Fleet) noteErr(what string, err error) {
	key := what + ": " + err.Error()
	if len(key) > 160 {
		key = key[:160] + "…"
	}
	f.mu.Lock()
	f.errs[key]++
	f.mu.Unlock()
}

// ErrSamples counts the distinct errors nodes have met, failed Hellos and
// dropped streams alike.
func (f *Fleet) ErrSamples() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.errs))
	for k, v := range f.errs {
		out[k] = v
	}
	return out
}

// ConnectTime is from the first Hello to the moment every node had its
// HelloAck, or up to now if some never did.
func (f *Fleet) ConnectTime() time.Duration {
	if at := f.upAt.Load(); at != 0 {
		return time.Unix(0, at).Sub(f.began)
	}
	return time.Since(f.began)
}

// HelloPercentiles are the p50 and p99 of Hello → HelloAck round trips.
func (f *Fleet) HelloPercentiles() (p50, p99 time.Duration) {
	f.mu.Lock()
	rt := slices.Clone(f.helloRT)
	f.mu.Unlock()
	if len(rt) == 0 {
		return 0, 0
	}
	slices.Sort(rt)
	return rt[len(rt)*50/100], rt[min(len(rt)-1, len(rt)*99/100)]
}

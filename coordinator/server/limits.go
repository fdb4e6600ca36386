package server

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podiumhq/podium/coordinator/artifacts"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// What one request may make the replica read. Connect reads a unary body
// (and inflates it, when it is compressed) before any interceptor runs, so
// without a bound one small gzip body from anyone who can reach the port
// made the process allocate gigabytes before it answered 401.
const (
	// PeopleReadMaxBytes bounds one message of the task and admin APIs, once
	// inflated. The largest is a Submit, whose spec taskspec keeps far below.
	PeopleReadMaxBytes = 1 << 20
	// NodeReadMaxBytes bounds one message of the node API: an artifact
	// chunk at its largest (artifacts.MaxChunkBytes), with room for the
	// fields around it. An event batch is at most 1 MiB of output from the
	// agent (its batchBytes) and 1,000 events (nodes.MaxEventsPerMessage).
	NodeReadMaxBytes = artifacts.MaxChunkBytes + 64<<10
	// envelopeSlack is what a body may hold beyond its one message: the
	// framing of the gRPC and Connect streaming protocols, and what gzip adds
	// to a message it cannot shrink.
	envelopeSlack = 64 << 10
	// otherMaxBytes bounds the body of a request to anything else (health,
	// metrics, an unknown path): none of them reads one.
	otherMaxBytes = 64 << 10
)

// Defaults of the HTTP server's bounds; Config overrides them.
const (
	// DefaultMaxConnections bounds the connections served at once. Each
	// node holds one for its stream, so this is well above any fleet.
	DefaultMaxConnections = 20000
	// DefaultBodyReadTimeout bounds how long a request's body may take to
	// arrive; on the node stream and artifact uploads, which are long by
	// nature, how long their first message (with the node's key) may take.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a connection that has carried no request
	// for this long. A node's connection is never idle: its stream is open.
	DefaultIdleTimeout = 2 * time.Minute
	// readHeaderTimeout bounds the request line and headers.
	readHeaderTimeout = 10 * time.Second
)

// route is what the HTTP layer knows of a path before Connect sees it.
type route struct {
	// maxBytes bounds the whole body; 0 means no bound on the whole, for
	// the client-streaming calls, where Connect's per-message bound
	// (WithReadMaxBytes) is what applies.
	maxBytes int64
}

// routes maps every procedure of the three services to its bound, from the
// services' descriptors, so that a call added to the API gets one too. A call
// whose client sends many messages (the node stream, an artifact upload) is
// long and large as a whole; every other call's body is one message.
func routes() map[string]route {
	m := make(map[string]route)
	for _, svc := range []struct {
		d   protoreflect.ServiceDescriptor
		max int64
	}{
		{podiumv1.File_podium_v1_task_proto.Services().ByName("TaskService"), PeopleReadMaxBytes},
		{podiumv1.File_podium_v1_admin_proto.Services().ByName("AdminService"), PeopleReadMaxBytes},
		{podiumv1.File_podium_v1_node_proto.Services().ByName("NodeService"), NodeReadMaxBytes},
	} {
		methods := svc.d.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			r := route{maxBytes: svc.max + envelopeSlack}
			if md.IsStreamingClient() {
				r.maxBytes = 0
			}
			m["/"+string(svc.d.FullName())+"/"+string(md.Name())] = r
		}
	}
	return m
}

// bodyLimits bounds what a request's body may cost before any handler reads
// it: its size (http.MaxBytesReader, which also makes the server close the
// connection rather than read on to the end of a body that is too large),
// and the time it may take to arrive. A client-streaming call (the node
// stream, an artifact upload) is many messages over hours, each bounded by
// Connect: only its first message, which carries the node's credentials,
// must arrive in time, so that a caller who never says who it is cannot hold
// a stream open.
func bodyLimits(next http.Handler, timeout time.Duration) http.Handler {
	table := routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, ok := table[r.URL.Path]
		if !ok {
			rt = route{maxBytes: otherMaxBytes}
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if rt.maxBytes > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, rt.maxBytes)
		}
		if timeout > 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil && rt.maxBytes == 0 {
				r.Body = &firstMessageBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// firstMessageBody lifts the read deadline of a client-streaming call once its
// first message is in. (Once a body has been read to its end the deadline
// does no harm: net/http lifts an HTTP/1 connection's itself, and an HTTP/2
// stream's only cuts off the body, so a server-streaming call such as Events
// answers for as long as the task runs.)
type firstMessageBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared bool
	// header and read follow the first message's envelope (the gRPC and
	// Connect streaming protocols share it: a flags byte, then the length
	// as 4 bytes big-endian, then the message).
	header [5]byte
	read   int64
}

func (b *firstMessageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.cleared {
		return n, err
	}
	data := p[:n]
	if b.read < int64(len(b.header)) {
		k := copy(b.header[b.read:], data)
		b.read += int64(k)
		data = data[k:]
	}
	if b.read >= int64(len(b.header)) {
		b.read += int64(len(data))
		if b.read >= int64(len(b.header))+int64(binary.BigEndian.Uint32(b.header[1:])) {
			b.clear()
		}
	}
	return n, err
}

func (b *firstMessageBody) clear() {
	if !b.cleared {
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// isPeopleAPI reports whether path is a call of the task, admin, schedule
// or webhook API.
func isPeopleAPI(path string) bool {
	return strings.HasPrefix(path, "/"+podiumv1connect.TaskServiceName+"/") ||
		strings.HasPrefix(path, "/"+podiumv1connect.AdminServiceName+"/") ||
		strings.HasPrefix(path, "/"+podiumv1connect.ScheduleServiceName+"/") ||
		strings.HasPrefix(path, "/"+podiumv1connect.WebhookServiceName+"/")
}

// connLimit bounds the connections a replica serves at once, across all its
// listeners. A listener takes a slot before it accepts, so when all are in
// use new connections wait in the kernel's queue (and time out there) rather
// than each costing the process a goroutine and buffers; the HTTP server's
// ConnState hook gives the slot back when the connection ends.
//
// Not netutil.LimitListener: that wraps each accepted connection in a type
// of its own, and over a TLS listener (the tailnet's is made that way) net/http
// would then no longer see a *tls.Conn, so it would neither make the
// handshake nor serve HTTP/2; and its bound would be per listener. This one
// returns the connection as accepted and is keyed by it, so it must wrap the
// outermost listener, the one the HTTP server is given.
type connLimit struct {
	slots chan struct{}
	held  sync.Map // net.Conn → struct{}: connections holding a slot
}

func newConnLimit(n int) *connLimit {
	return &connLimit{slots: make(chan struct{}, n)}
}

// listener returns ln accepting only while a slot is free.
func (l *connLimit) listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, limit: l, done: make(chan struct{})}
}

// connState is the HTTP server's ConnState hook.
func (l *connLimit) connState(c net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		if _, ok := l.held.LoadAndDelete(c); ok {
			<-l.slots
		}
	}
}

type limitedListener struct {
	net.Listener
	limit *connLimit
	done  chan struct{}
	once  sync.Once
}

func (ll *limitedListener) Accept() (net.Conn, error) {
	select {
	case ll.limit.slots <- struct{}{}:
	case <-ll.done:
		return nil, net.ErrClosed
	}
	c, err := ll.Listener.Accept()
	if err != nil {
		<-ll.limit.slots
		return nil, err
	}
	ll.limit.held.Store(c, struct{}{})
	return c, nil
}

func (ll *limitedListener) Close() error {
	ll.once.Do(func() { close(ll.done) })
	return ll.Listener.Close()
}

// readLimits is a handler's bound on one message: Connect's own, and a gzip
// that stops inflating just past it. What the handler sends is gzipped at
// BestSpeed: at the default level the coordinator spent 37 ms of CPU per MiB
// of log it streamed to `podium logs`, most of it compressing (14 ms at
// BestSpeed, in the ingest benchmark), so a stored log was printed at what
// one core compresses however fast Postgres read it; BestSpeed still shrinks
// a build log several times over.
func readLimits(maxBytes int) connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithReadMaxBytes(maxBytes),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{limit: int64(maxBytes) + 1} },
			func() connect.Compressor {
				w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // a valid level: never an error
				return w
			}),
	)
}

// errInflatedTooLarge ends the inflation of a message past its bound.
var errInflatedTooLarge = errors.New("the message inflates past the bound on its size")

// boundedGzip is gzip that inflates no more than limit bytes of a message.
// Connect stops keeping a compressed message once it passes the read bound,
// but then inflates the rest only to count it, for its error message: a
// quarter-megabyte gzip body of zeros would cost a second of CPU that way.
// The error this returns instead makes Connect refuse the message at once,
// as ResourceExhausted.
type boundedGzip struct {
	gzip.Reader
	limit, read int64
}

func (g *boundedGzip) Reset(r io.Reader) error {
	g.read = 0
	return g.Reader.Reset(r)
}

func (g *boundedGzip) Read(p []byte) (int, error) {
	if g.read >= g.limit {
		return 0, errInflatedTooLarge
	}
	if int64(len(p)) > g.limit-g.read {
		p = p[:g.limit-g.read]
	}
	n, err := g.Reader.Read(p)
	g.read += int64(n)
	return n, err
}

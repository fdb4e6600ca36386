package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/tlstest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// gzipBomb is a gzip stream that inflates to about 640 MiB of zeros: eighty
// concatenated members of 8 MiB each (a gzip reader reads on from one member
// to the next), under 1 MiB on the wire.
func gzipBomb(t *testing.T) []byte {
	t.Helper()
	var member bytes.Buffer
	zw, err := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(member.Bytes(), 80)
}

// zeros is an endless reader of zero bytes that allocates nothing, so that a
// 100 MB body costs the test's side of the measurement nothing.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// allocated is how many bytes the process allocated while f ran: what the
// coordinator in this process spent on the request (the client's side is a
// few small buffers).
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// enveloped frames a compressed message as the Connect streaming protocol
// does: a flags byte (1: compressed) and a 32-bit length.
func enveloped(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{1}, uint32(len(msg))), msg...)
}

// postRaw posts body to procedure with the headers given, and returns the HTTP
// status and the Connect error code of the answer: a unary call's JSON
// body, or a streaming call's end-of-stream message (or the transport error,
// when the coordinator hung up while the client was still sending).
func postRaw(t *testing.T, hc *http.Client, url, procedure, token string, body io.Reader, header map[string]string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url+procedure, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/connect+") {
		var end struct{ Error struct{ Code string } }
		if len(b) > 5 {
			_ = json.Unmarshal(b[5:], &end)
		}
		return res.StatusCode, end.Error.Code, nil
	}
	var e struct{ Code string }
	_ = json.Unmarshal(b, &e)
	return res.StatusCode, e.Code, nil
}

// A gzip bomb (to a unary call, and framed to a streaming one) and a 100 MB
// body, each with the token and without, are refused, and the coordinator allocates less than 16 MiB answering each: it
// checks the token before it reads a body, and reads (and inflates) no more
// than the API's bound.
//
// Not parallel: the measure is the whole process's allocation, which only
// means something while no other test runs.
func TestOversizedBodiesAreRefusedWithoutAllocating(t *testing.T) {
	r, _ := coordtest.New(t)
	bomb := gzipBomb(t)
	framed := enveloped(bomb)
	const bound = 16 << 20
	submit, events := podiumv1connect.TaskServiceSubmitProcedure, podiumv1connect.TaskServiceEventsProcedure
	gzipped := map[string]string{"Content-Encoding": "gzip"}
	streamGzipped := map[string]string{"Content-Type": "application/connect+proto", "Connect-Content-Encoding": "gzip"}
	for _, tc := range []struct {
		name, procedure, token string
		body                   func() io.Reader
		header                 map[string]string
		code                   string
	}{
		{"gzip bomb without a token", submit, "", func() io.Reader { return bytes.NewReader(bomb) }, gzipped, "unauthenticated"},
		{"gzip bomb with the token", submit, coordtest.Token, func() io.Reader { return bytes.NewReader(bomb) }, gzipped, "resource_exhausted"},
		{"streamed gzip bomb without a token", events, "", func() io.Reader { return bytes.NewReader(framed) }, streamGzipped, "unauthenticated"},
		{"streamed gzip bomb with the token", events, coordtest.Token, func() io.Reader { return bytes.NewReader(framed) }, streamGzipped, "resource_exhausted"},
		{"100 MB without a token", submit, "", func() io.Reader { return io.LimitReader(zeros{}, 100e6) }, nil, "unauthenticated"},
		{"100 MB with the token", submit, coordtest.Token, func() io.Reader { return io.LimitReader(zeros{}, 100e6) }, nil, "resource_exhausted"},
	} {
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			hc := coordtest.HTTPClient()
			if proto == "HTTP/1.1" {
				hc = &http.Client{Transport: &http.Transport{}}
			}
			var status int
			var code string
			var err error
			n := allocated(func() { status, code, err = postRaw(t, hc, r.URL(), tc.procedure, tc.token, tc.body(), tc.header) })
			t.Logf("%s over %s: coordinator allocated %.1f MiB; answer %d %q %v", tc.name, proto, float64(n)/(1<<20), status, code, err)
			switch {
			case err != nil && !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "broken pipe"):
				t.Errorf("%s over %s: %v", tc.name, proto, err)
			case err == nil && code != tc.code:
				t.Errorf("%s over %s: answered %d %q, want %q", tc.name, proto, status, code, tc.code)
			}
			if n > bound {
				t.Errorf("%s over %s: the coordinator allocated %d MiB, want under %d MiB", tc.name, proto, n>>20, bound>>20)
			}
		}
	}
}

// A body that arrives too slowly is cut off at the body read timeout, over
// HTTP/1.1 and over HTTP/2, however steadily it trickles, and so is an
// artifact upload whose first message (the node's credentials) never comes;
// meanwhile the replica serves other callers, and a node stream that said
// Hello lives on past the timeout. (Here the timeout is 2 s and the body
// trickles a byte a second; by default it is 30 s.)
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{BodyReadTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	node, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "n"}))
	if err != nil {
		t.Fatal(err)
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: node.Msg.NodeId, NodeKey: node.Msg.NodeKey, Capacity: &podiumv1.Capacity{MaxTasks: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	defer st.CloseRequest()

	stop := make(chan struct{})
	defer close(stop)
	// trickle writes one byte a second to w until it fails or the test ends.
	trickle := func(w io.Writer) {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if _, err := w.Write([]byte{0}); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}

	// HTTP/1.1, by hand: a body of 1000 bytes announced, one sent a second.
	conn, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/proto\r\n"+
		"Content-Length: 1000\r\n\r\n", podiumv1connect.TaskServiceSubmitProcedure, r.Addr(), coordtest.Token)
	go trickle(conn)

	// HTTP/2: a request whose body is a pipe.
	pr, pw := io.Pipe()
	defer pw.Close()
	go trickle(pw)
	h2 := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL()+podiumv1connect.TaskServiceSubmitProcedure, pr)
		req.Header.Set("Authorization", "Bearer "+coordtest.Token)
		req.Header.Set("Content-Type", "application/proto")
		res, err := coordtest.HTTPClient().Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				err = fmt.Errorf("answered %s", res.Status)
			} else {
				err = nil
			}
		} else if ctx.Err() != nil {
			err = fmt.Errorf("not cut off within 30 s: %w", err)
		} else {
			err = nil // the stream was reset: cut off
		}
		h2 <- err
	}()

	// An upload that never sends its meta.
	upr, upw := io.Pipe()
	defer upw.Close()
	upload := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL()+podiumv1connect.NodeServiceUploadArtifactProcedure, upr)
		req.Header.Set("Content-Type", "application/connect+proto")
		res, err := coordtest.HTTPClient().Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("not cut off within 30 s: %w", err)
		} else {
			err = nil
		}
		upload <- err
	}()

	// Meanwhile, someone else is served.
	if _, err := r.Tasks().Submit(context.Background(), connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}})); err != nil {
		t.Fatalf("another caller's Submit while a body trickles: %v", err)
	}

	// The HTTP/1.1 caller gets an error answer, or the connection closed.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("HTTP/1.1: a trickling body was not cut off within 30 s")
	case err == nil && res.StatusCode == http.StatusOK:
		t.Errorf("HTTP/1.1: a trickling body was answered %s", res.Status)
	}
	if err := wait.Recv(t, 40*time.Second, "the HTTP/2 caller's answer", h2); err != nil {
		t.Errorf("HTTP/2: %v", err)
	}
	if err := wait.Recv(t, 40*time.Second, "the silent upload's end", upload); err != nil {
		t.Errorf("upload without its first message: %v", err)
	}

	// The node stream began before the trickles, which outlived the body
	// timeout: it still carries what the replica pushes.
	if _, err := r.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: node.Msg.NodeId, Draining: true})); err != nil {
		t.Fatal(err)
	}
	for { // (the task submitted above may be assigned to it first)
		pushed, err := st.Receive()
		if err != nil {
			t.Fatalf("the node stream after the body timeout: %v; want the drain pushed to it", err)
		}
		if pushed.GetConfig() != nil {
			break
		}
	}
}

// Over TLS the local transport serves the people's API and the node stream
// (HTTP/2, negotiated with ALPN) to a client that trusts its CA, and a
// client that does not trust it gets nowhere.
func TestLocalTransportOverTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.New(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{TLS: ca})
	if !strings.HasPrefix(r.URL(), "https://") || !strings.HasPrefix(r.Advertise(), "https://") {
		t.Fatalf("URL %s, advertised %s: want https://", r.URL(), r.Advertise())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	who, err := r.Admin().WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if who.Msg.Kind != podiumv1.CallerKind_CALLER_KIND_TOKEN {
		t.Errorf("WhoAmI over TLS: %v", who.Msg)
	}
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	enrolled, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "tls-node"}))
	if err != nil {
		t.Fatal(err)
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: enrolled.Msg.NodeId, NodeKey: enrolled.Msg.NodeKey, Capacity: &podiumv1.Capacity{MaxTasks: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Receive(); err != nil || res.GetHelloAck() == nil {
		t.Fatalf("node stream over TLS: %v, %v; want a HelloAck", res, err)
	}
	_ = st.CloseRequest()

	// The same call from a client with only the system's roots.
	untrusting := podiumv1connect.NewAdminServiceClient(&http.Client{}, r.URL())
	_, err = untrusting.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
}

// A compressed call within the bound is served as before: the bounded gzip
// inflates it whole.
func TestCompressedCallWithinTheBound(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	tasks := podiumv1connect.NewTaskServiceClient(r.HTTPClient(), r.URL(),
		connect.WithSendGzip(), connect.WithInterceptors(bearer(coordtest.Token)))
	arg := strings.Repeat("a", 40<<10)
	res, err := tasks.Submit(context.Background(), connect.NewRequest(&podiumv1.SubmitRequest{
		Spec: &podiumv1.TaskSpec{Image: "busybox", Command: []string{"echo", arg}}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.Task.GetSpec().GetCommand(); len(got) != 2 || got[1] != arg {
		t.Errorf("the stored command is not the one sent (%d arguments)", len(got))
	}
}

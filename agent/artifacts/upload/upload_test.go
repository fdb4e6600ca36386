package upload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/artifacts/upload"
	"github.com/podiumhq/podium/agent/transport"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// coordinator is a fake NodeService that keeps what it is sent and answers
// each upload as the test scripts it.
type coordinator struct {
	podiumv1connect.UnimplementedNodeServiceHandler

	mu     sync.Mutex
	stored map[string][]byte
	calls  map[string]int
	metas  []*podiumv1.ArtifactMeta
	// answer, if set, decides an upload's fate from its name and how many
	// calls for that name came before; nil stores it.
	answer   func(name string, call int) error
	maxChunk int
}

func (c *coordinator) UploadArtifact(ctx context.Context, st *connect.ClientStream[podiumv1.UploadArtifactRequest]) (*connect.Response[podiumv1.UploadArtifactResponse], error) {
	if !st.Receive() {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no meta"))
	}
	m := st.Msg().GetMeta()
	c.mu.Lock()
	c.metas = append(c.metas, m)
	call := c.calls[m.GetName()]
	c.calls[m.GetName()]++
	answer := c.answer
	c.mu.Unlock()
	var body bytes.Buffer
	for st.Receive() {
		chunk := st.Msg().GetChunk()
		c.mu.Lock()
		c.maxChunk = max(c.maxChunk, len(chunk))
		c.mu.Unlock()
		body.Write(chunk)
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if answer != nil {
		if err := answer(m.GetName(), call); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.stored[m.GetName()] = body.Bytes()
	c.mu.Unlock()
	sum := sha256.Sum256(body.Bytes())
	return connect.NewResponse(&podiumv1.UploadArtifactResponse{ArtifactId: "art_" + m.GetName(),
		Size: int64(body.Len()), Sha256: hex.EncodeToString(sum[:])}), nil
}

// count is how many uploads of name the coordinator has been sent.
func (c *coordinator) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func (c *coordinator) get(name string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.stored[name]
	return b, ok
}

type fixture struct {
	coord *coordinator
	url   string
	hc    *http.Client
	dials atomic.Int32
}

// start serves the fake coordinator over cleartext HTTP/2, as a coordinator
// on a tailnet does, and makes the agent's client for it.
func start(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{coord: &coordinator{stored: map[string][]byte{}, calls: map[string]int{}}}
	_, h := podiumv1connect.NewNodeServiceHandler(f.coord)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	hc, err := transport.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f.hc = hc
	return f
}

func (f *fixture) uploader(t *testing.T, window time.Duration) *upload.Uploader {
	t.Helper()
	u, err := upload.New(upload.Config{
		NodeID: "node_1", NodeKey: "key_1",
		Coordinator: func() (connect.HTTPClient, string, error) { return f.hc, f.url, nil },
		Logger:      slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Window:      window, RetryMin: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// ctx carries a dialer that counts, as the agent's context carries its
// tailnet device's: uploads must dial through it.
func (f *fixture) ctx() context.Context {
	var d net.Dialer
	return transport.ContextWithDialer(context.Background(), func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.dials.Add(1)
		return d.DialContext(ctx, network, addr)
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type notes struct {
	mu    sync.Mutex
	lines []string
}

func (n *notes) add(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, s)
}

func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lines...)
}

func files(t *testing.T, contents map[string][]byte) []artifacts.File {
	t.Helper()
	dir := t.TempDir()
	for name, b := range contents {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, skipped, err := artifacts.Collect(dir)
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	return out
}

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// waitFor polls cond until it holds, failing after 20 s with what it waited
// for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUploadStreamsEachFileInChunks(t *testing.T) {
	f := start(t)
	big := make([]byte, 3*upload.ChunkSize+12345)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(big)
	want := map[string][]byte{"empty": {}, "small.txt": []byte("hello\n"), "sub/dir/big.bin": big}
	var n notes
	job := f.uploader(t, time.Minute).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 2, Files: files(t, want), Note: n.add})
	wait(t, job.Tried(), "the first pass")
	job.Ended()
	wait(t, job.Done(), "the uploads")

	for name, b := range want {
		got, ok := f.coord.get(name)
		if !ok || !bytes.Equal(got, b) {
			t.Errorf("%s: stored %d bytes (%v), want %d", name, len(got), ok, len(b))
		}
	}
	if f.coord.maxChunk != upload.ChunkSize {
		t.Errorf("the largest chunk was %d bytes, want %d", f.coord.maxChunk, upload.ChunkSize)
	}
	for _, m := range f.coord.metas {
		if m.GetNodeId() != "node_1" || m.GetNodeKey() != "key_1" || m.GetTaskId() != "task_1" || m.GetAttempt() != 2 {
			t.Errorf("meta %v, want the node's credentials and task_1 attempt 2", m)
		}
	}
	if len(n.all()) != 0 {
		t.Errorf("notes %q, want none: the coordinator notes stored artifacts itself", n.all())
	}
	if f.dials.Load() == 0 {
		t.Error("the uploads did not dial through the context's dialer")
	}
}

// Unavailable is retried with backoff until the file is stored, with one
// note; any other refusal is final at once; neither holds up the others.
func TestRetriesWhileUnavailableAndStopsOnAFinalRefusal(t *testing.T) {
	f := start(t)
	f.coord.answer = func(name string, call int) error {
		switch {
		case name == "flaky" && call < 3:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the artifact store is unavailable (try %d)", call+1))
		case name == "refused":
			return connect.NewError(connect.CodePermissionDenied, errors.New("the node does not hold this task attempt"))
		}
		return nil
	}
	var n notes
	job := f.uploader(t, time.Minute).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 1, Files: files(t, map[string][]byte{
		"flaky": []byte("eventually"), "refused": []byte("never"), "fine": []byte("at once"),
	}), Note: n.add})
	wait(t, job.Tried(), "the first pass")
	if _, ok := f.coord.get("fine"); !ok {
		t.Error("the first pass is over but fine is not stored")
	}
	job.Ended()
	wait(t, job.Done(), "the uploads")
	if b, ok := f.coord.get("flaky"); !ok || string(b) != "eventually" {
		t.Fatalf("flaky was not stored after its retries: %q", b)
	}
	if c := f.coord.count("flaky"); c != 4 {
		t.Errorf("flaky was sent %d times, want 4", c)
	}
	if c := f.coord.count("refused"); c != 1 {
		t.Errorf("refused was sent %d times, want once: PermissionDenied is final", c)
	}
	got := n.all()
	if len(got) != 2 ||
		!strings.HasPrefix(got[0], "artifact flaky: upload failed: unavailable: the artifact store is unavailable (try 1)") ||
		!strings.HasSuffix(got[0], "(will retry)") ||
		!strings.HasPrefix(got[1], "artifact refused: not uploaded: permission_denied") {
		t.Fatalf("notes %q, want one will-retry note for flaky and one final note for refused", got)
	}
}

func TestGivesUpWhenTheWindowCloses(t *testing.T) {
	f := start(t)
	f.coord.answer = func(string, int) error {
		return connect.NewError(connect.CodeUnavailable, errors.New("the artifact store is unavailable"))
	}
	var n notes
	job := f.uploader(t, 300*time.Millisecond).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 1, Files: files(t, map[string][]byte{"a": []byte("x")}), Note: n.add})
	wait(t, job.Tried(), "the first pass")
	// Retries go on until the task has ended and its window closed: ten
	// tries, at most 40 ms apart, outlast the 300 ms window, which has not
	// begun.
	waitFor(t, "ten tries before the task ends", func() bool { return f.coord.count("a") >= 10 })
	select {
	case <-job.Done():
		t.Fatal("the uploads gave up before the task's status was sent")
	default:
	}
	job.Ended()
	// Every try fails, so only the window closing can end the uploads.
	wait(t, job.Done(), "the uploads to give up")
	got := n.all()
	if len(got) != 2 || !strings.HasSuffix(got[0], "(will retry)") ||
		!strings.Contains(got[1], "artifact a: not uploaded: the coordinator could not store it within 300ms") {
		t.Fatalf("notes %q", got)
	}
	if f.coord.count("a") < 3 {
		t.Errorf("only %d tries", f.coord.count("a"))
	}
}

func TestAgentStoppingEndsTheUploads(t *testing.T) {
	f := start(t)
	f.coord.answer = func(string, int) error {
		return connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}
	ctx, cancel := context.WithCancel(f.ctx())
	job := f.uploader(t, time.Hour).Upload(ctx, artifacts.Uploads{TaskID: "task_1", Attempt: 1, Files: files(t, map[string][]byte{"a": []byte("x")})})
	wait(t, job.Tried(), "the first pass")
	cancel()
	wait(t, job.Done(), "the uploads to end with the agent")
}

func TestUnreadableFileIsNotRetried(t *testing.T) {
	f := start(t)
	fs := files(t, map[string][]byte{"gone": []byte("x"), "kept": []byte("y")})
	if err := os.Remove(fs[0].Path); err != nil {
		t.Fatal(err)
	}
	var n notes
	job := f.uploader(t, time.Minute).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 1, Files: fs, Note: n.add})
	job.Ended()
	wait(t, job.Done(), "the uploads")
	if _, ok := f.coord.get("kept"); !ok {
		t.Error("kept was not stored")
	}
	if got := n.all(); len(got) != 1 || !strings.HasPrefix(got[0], "artifact gone: not uploaded: the file cannot be read on the node") {
		t.Fatalf("notes %q", got)
	}
}

// pendingLog records what a job tells Uploads.Pending.
type pendingLog struct {
	mu    sync.Mutex
	calls [][]string
	ended []time.Time
}

func (p *pendingLog) add(endedAt time.Time, files []artifacts.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := []string{}
	for _, f := range files {
		names = append(names, f.Name)
	}
	p.calls = append(p.calls, names)
	p.ended = append(p.ended, endedAt)
}

func (p *pendingLog) all() ([][]string, []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.calls...), append([]time.Time(nil), p.ended...)
}

// Before the attempt ended nothing is reported (a restarted agent collects
// the files again); from Ended on, each change of the files left is, with
// the end time, down to none.
func TestPendingFilesAreReportedFromTheEnd(t *testing.T) {
	f := start(t)
	release := make(chan struct{})
	f.coord.answer = func(name string, call int) error {
		if name == "late" {
			select {
			case <-release:
			default:
				return connect.NewError(connect.CodeUnavailable, errors.New("the artifact store is unavailable"))
			}
		}
		return nil
	}
	var p pendingLog
	job := f.uploader(t, time.Minute).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 1,
		Files: files(t, map[string][]byte{"now": []byte("a"), "late": []byte("b")}), Pending: p.add})
	wait(t, job.Tried(), "the first pass")
	if calls, _ := p.all(); len(calls) != 0 {
		t.Fatalf("pending reported %v before the attempt ended", calls)
	}
	before := time.Now()
	job.Ended()
	close(release)
	wait(t, job.Done(), "the uploads")
	calls, ended := p.all()
	if len(calls) != 2 || fmt.Sprint(calls[0]) != "[late]" || len(calls[1]) != 0 {
		t.Fatalf("pending reported %v, want [late] then nothing", calls)
	}
	for _, at := range ended {
		if at.Before(before) || at.After(time.Now()) {
			t.Errorf("reported the end as %v, not when Ended was called", at)
		}
	}
}

// A job an earlier agent process left (EndedAt) counts its window from that
// end, does not repeat the "will retry" note, and says when it gives up.
func TestResumedJobKeepsTheOriginalWindow(t *testing.T) {
	f := start(t)
	f.coord.answer = func(string, int) error {
		return connect.NewError(connect.CodeUnavailable, errors.New("the artifact store is unavailable"))
	}
	var n notes
	var p pendingLog
	endedAt := time.Now().Add(-time.Hour + 300*time.Millisecond)
	start := time.Now()
	job := f.uploader(t, time.Hour).Upload(f.ctx(), artifacts.Uploads{TaskID: "task_1", Attempt: 1,
		Files: files(t, map[string][]byte{"a": []byte("x")}), Note: n.add, Pending: p.add, EndedAt: endedAt})
	wait(t, job.Done(), "the resumed job to give up")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %s, want about 300 ms: the window counts from the recorded end", d)
	}
	got := n.all()
	if len(got) != 1 || !strings.HasPrefix(got[0], "artifact a: not uploaded: the coordinator could not store it within 1h0m0s") {
		t.Fatalf("notes %q, want only the final one", got)
	}
	calls, ended := p.all()
	if len(calls) < 2 || fmt.Sprint(calls[0]) != "[a]" || len(calls[len(calls)-1]) != 0 || !ended[0].Equal(endedAt) {
		t.Fatalf("pending reported %v at %v, want [a] at %v first and nothing last", calls, ended, endedAt)
	}
	if f.coord.count("a") < 2 {
		t.Errorf("only %d tries", f.coord.count("a"))
	}
}

// An agent that stops leaves the last report standing: it is not told the
// files are gone.
func TestAgentStoppingLeavesThePendingFiles(t *testing.T) {
	f := start(t)
	f.coord.answer = func(string, int) error {
		return connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}
	var p pendingLog
	ctx, cancel := context.WithCancel(f.ctx())
	job := f.uploader(t, time.Hour).Upload(ctx, artifacts.Uploads{TaskID: "task_1", Attempt: 1,
		Files: files(t, map[string][]byte{"a": []byte("x")}), Pending: p.add})
	wait(t, job.Tried(), "the first pass")
	job.Ended()
	cancel()
	wait(t, job.Done(), "the uploads to end with the agent")
	if calls, _ := p.all(); len(calls) != 1 || fmt.Sprint(calls[0]) != "[a]" {
		t.Fatalf("pending reported %v, want [a] and nothing after", calls)
	}
}

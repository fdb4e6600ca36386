// Package upload sends a task's artifacts to the coordinator with
// NodeService.UploadArtifact (see UploadArtifactRequest in
// proto/podium/v1/node.proto).
//
// Each file goes as its own call: the meta with the node's id and key, then
// the file in 256 KiB chunks, then close. The call is made with the HTTP
// client the session uses for its stream, to the coordinator the session is
// connected to (any replica takes any node's upload), and with the agent's
// context, so it dials the same way the stream does, through the agent's own
// tailnet device when it has one (transport.ContextWithDialer).
//
// # Failures
//
// An artifact that cannot be uploaded never fails its task. The coordinator
// answers Unavailable when its object store or Postgres is away: the file is
// kept and sent again with exponential backoff (1 s doubling to 60 s) until
// it is stored or the coordinator's window closes (10 minutes after the task
// ended). Every other answer is final. The task's log says what happened: the
// coordinator notes each stored artifact itself; this package adds
// "artifact NAME: upload failed: … (will retry)" the first time a file fails
// with a retryable error, "artifact NAME: not uploaded: …" when it gives up,
// and nothing for the retries in between (the agent's own log has each one).
//
// # Restarts
//
// An agent that stops before the task's final status was sent loses nothing:
// the next one resumes the task and collects its files again. After the
// status, the collection cannot be repeated (the task is over for the
// coordinator), so once a job has been told the attempt ended it reports the
// files still to be sent through Uploads.Pending, after each one stored or
// given up, and the executor keeps that list on disk in the attempt's
// directory. The next agent process hands the list back as a new job with
// Uploads.EndedAt: the same loop, backoff and window, the window counted from
// the original end, so a file is sent again only if it had not been stored.
// Its "upload failed" note is not repeated. A file stored just before a
// crash, before the list was rewritten, is sent once more, which replaces
// the stored copy with the same bytes.
package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/artifacts"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// ChunkSize is how many bytes of a file one upload message carries: what
// node.proto recommends, far below its 4 MiB limit.
const ChunkSize = 256 << 10

// Defaults of Config's durations.
const (
	// DefaultWindow is how long after an attempt ended the coordinator
	// takes its artifacts (artifacts.Config.UploadGrace on its side).
	DefaultWindow   = artifacts.UploadWindow
	DefaultRetryMin = time.Second
	DefaultRetryMax = time.Minute
)

// inFlightSlack is how long an upload that started before the window closed
// may run on after it: the coordinator checks the window when a call starts.
const inFlightSlack = 2 * time.Minute

// Config is what an Uploader needs.
type Config struct {
	// NodeID and NodeKey are the node's credentials (package identity).
	NodeID, NodeKey string
	// Coordinator returns the HTTP client and the coordinator's base URL to
	// upload to. It is asked before every call, so uploads follow the session
	// when it moves to another replica.
	Coordinator func() (connect.HTTPClient, string, error)
	// Logger receives the uploader's own log; nil means slog.Default().
	Logger *slog.Logger
	// Window, RetryMin and RetryMax override DefaultWindow,
	// DefaultRetryMin and DefaultRetryMax.
	Window, RetryMin, RetryMax time.Duration
}

// Uploader uploads task attempts' artifacts. It is safe for concurrent use;
// each attempt's files go one after the other, attempts in parallel.
type Uploader struct {
	cfg Config
	log *slog.Logger
}

// New returns an uploader.
func New(cfg Config) (*Uploader, error) {
	switch {
	case cfg.NodeID == "" || cfg.NodeKey == "":
		return nil, errors.New("upload: no node id or key; enroll the node first")
	case cfg.Coordinator == nil:
		return nil, errors.New("upload: Config.Coordinator is nil")
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, DefaultRetryMax)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Uploader{cfg: cfg, log: log}, nil
}

// Upload starts uploading the files of an attempt in the background and
// returns at once. ctx is the agent's: the uploads end with it.
func (u *Uploader) Upload(ctx context.Context, up artifacts.Uploads) artifacts.Job {
	j := &job{
		u: u, taskID: up.TaskID, attempt: up.Attempt, files: up.Files, note: up.Note,
		pending: up.Pending, left: slices.Clone(up.Files), resumed: !up.EndedAt.IsZero(),
		log:   u.log.With("task_id", up.TaskID, "attempt", up.Attempt),
		tried: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{}),
	}
	if j.note == nil {
		j.note = func(string) {}
	}
	if j.resumed {
		j.end(up.EndedAt)
	}
	go j.run(ctx)
	return j
}

type job struct {
	u       *Uploader
	taskID  string
	attempt int32
	files   []artifacts.File
	note    func(string)
	log     *slog.Logger
	// resumed is a job an earlier agent process started (Uploads.EndedAt).
	resumed bool

	tried chan struct{}
	done  chan struct{}

	endOnce sync.Once
	endedAt time.Time // written before ended is closed
	ended   chan struct{}

	// mu orders the calls of pending and guards left, the files neither
	// stored nor given up yet.
	mu      sync.Mutex
	pending func(time.Time, []artifacts.File)
	left    []artifacts.File
}

func (j *job) Tried() <-chan struct{} { return j.tried }
func (j *job) Done() <-chan struct{}  { return j.done }

func (j *job) Ended() { j.end(time.Now()) }

func (j *job) end(at time.Time) {
	j.endOnce.Do(func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.endedAt = at
		close(j.ended)
		j.reportLocked()
	})
}

// settled takes files off the list of those left: stored, or given up.
func (j *job) settled(files ...artifacts.File) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.left = slices.DeleteFunc(j.left, func(l artifacts.File) bool {
		return slices.ContainsFunc(files, func(f artifacts.File) bool { return f.Name == l.Name })
	})
	select {
	case <-j.ended:
		j.reportLocked()
	default:
	}
}

// reportLocked tells Uploads.Pending what is left. Before the attempt ended
// there is nothing to tell: a restarted agent collects the files again.
func (j *job) reportLocked() {
	if j.pending != nil {
		j.pending(j.endedAt, slices.Clone(j.left))
	}
}

// closesAt is when the coordinator stops taking this attempt's uploads, and
// whether that is known yet (the task's final status has been sent).
func (j *job) closesAt() (time.Time, bool) {
	select {
	case <-j.ended:
		return j.endedAt.Add(j.u.cfg.Window), true
	default:
		return time.Time{}, false
	}
}

func (j *job) run(ctx context.Context) {
	defer close(j.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Once the window is known, an upload still running long after it
	// closed is cut off: the directory it reads from must go eventually.
	go func() {
		select {
		case <-j.ended:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(time.Until(j.endedAt.Add(j.u.cfg.Window + inFlightSlack)))
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	}()

	triedOnce := false
	markTried := func() {
		if !triedOnce {
			triedOnce = true
			close(j.tried)
		}
	}
	defer markTried()

	pending := j.files
	noted := map[string]bool{}
	if j.resumed {
		// The earlier agent process noted the first failure already.
		for _, f := range pending {
			noted[f.Name] = true
		}
	}
	lastErr := map[string]error{}
	delay := j.u.cfg.RetryMin
	for {
		var again []artifacts.File
		for i, f := range pending {
			if ctx.Err() != nil {
				again = append(again, pending[i:]...)
				break
			}
			err := j.uploadOne(ctx, f)
			switch {
			case err == nil:
				j.settled(f)
			case ctx.Err() != nil:
				again = append(again, f)
				lastErr[f.Name] = err
			case retryable(err):
				again = append(again, f)
				lastErr[f.Name] = err
				j.log.Warn("artifact upload failed; it will be retried", "name", f.Name, "err", err)
				if !noted[f.Name] {
					noted[f.Name] = true
					j.note(fmt.Sprintf("artifact %s: upload failed: %v (will retry)", f.Name, err))
				}
			default:
				j.log.Warn("artifact upload refused; not retrying", "name", f.Name, "err", err)
				j.note(fmt.Sprintf("artifact %s: not uploaded: %v", f.Name, err))
				j.settled(f)
			}
		}
		markTried()
		if len(again) == 0 {
			return
		}
		if ctx.Err() != nil {
			names := make([]string, len(again))
			for i, f := range again {
				names[i] = f.Name
			}
			if closes, ok := j.closesAt(); ok && time.Now().After(closes) {
				j.giveUp(again, lastErr)
			} else if j.pending != nil {
				j.log.Warn("the agent is stopping; artifacts not uploaded yet are left for the next agent process", "names", names)
			} else {
				j.log.Warn("the agent is stopping; artifacts not uploaded yet are dropped", "names", names)
			}
			return
		}
		wait := delay
		delay = min(2*delay, j.u.cfg.RetryMax)
		if closes, ok := j.closesAt(); ok && time.Now().Add(wait).After(closes) {
			if wait = time.Until(closes); wait <= 0 {
				j.giveUp(again, lastErr)
				return
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		pending = again
	}
}

func (j *job) giveUp(files []artifacts.File, lastErr map[string]error) {
	for _, f := range files {
		j.log.Warn("giving up on an artifact: the coordinator's window for uploads closed", "name", f.Name, "last_err", lastErr[f.Name])
		j.note(fmt.Sprintf("artifact %s: not uploaded: the coordinator could not store it within %s of the task's end (last error: %v)",
			f.Name, j.u.cfg.Window, lastErr[f.Name]))
	}
	j.settled(files...)
}

// errMismatch is a stored artifact whose size or digest is not what the node
// sent; the upload is repeated, which replaces it.
var errMismatch = errors.New("the coordinator stored something other than the file")

// retryable is the protocol's rule: only Unavailable is worth another try.
// A stored artifact that does not match the file is one too.
func retryable(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnavailable || errors.Is(err, errMismatch)
}

// uploadOne makes one UploadArtifact call for f.
func (j *job) uploadOne(ctx context.Context, f artifacts.File) error {
	hc, base, err := j.u.cfg.Coordinator()
	if err != nil {
		return err
	}
	in, err := f.Open()
	if err != nil {
		return fmt.Errorf("the file cannot be read on the node: %w", err)
	}
	defer in.Close()

	// Cancelling cctx aborts the call, which is how a file that cannot be
	// read to its end is kept from being stored cut short.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	st := podiumv1connect.NewNodeServiceClient(hc, base).UploadArtifact(cctx)
	meta := &podiumv1.ArtifactMeta{NodeId: j.u.cfg.NodeID, NodeKey: j.u.cfg.NodeKey,
		TaskId: j.taskID, Attempt: j.attempt, Name: f.Name}
	h := sha256.New()
	var size int64
	var readErr error
	if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Meta{Meta: meta}}); err == nil {
		buf := make([]byte, ChunkSize)
		for {
			n, rerr := io.ReadFull(in, buf)
			if n > 0 {
				h.Write(buf[:n])
				size += int64(n)
				// A send fails once the coordinator has answered early (a
				// refusal); CloseAndReceive then says why.
				if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Chunk{Chunk: buf[:n]}}); err != nil {
					break
				}
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				readErr = rerr
				break
			}
		}
	}
	if readErr != nil {
		cancel()
		_, _ = st.CloseAndReceive()
		return fmt.Errorf("the file could not be read on the node after %d bytes: %w", size, readErr)
	}
	res, err := st.CloseAndReceive()
	if err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if res.Msg.GetSize() != size || res.Msg.GetSha256() != sum {
		return fmt.Errorf("%w: sent %d bytes with sha256 %s, stored %d bytes with sha256 %s",
			errMismatch, size, sum, res.Msg.GetSize(), res.Msg.GetSha256())
	}
	j.log.Info("artifact uploaded", "name", f.Name, "size", size, "sha256", sum,
		"artifact_id", res.Msg.GetArtifactId(), "replaced", res.Msg.GetReplaced(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

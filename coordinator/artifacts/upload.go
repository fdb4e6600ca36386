package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
)

// MaxChunkBytes bounds one chunk of an upload. Connect has already read a
// message whole before the handler sees it, so this cannot save memory on the
// one message that breaks it; it keeps the protocol definite, so an agent that
// would send whole files as one message fails in its first test, not in
// production with a 1 GiB file.
const MaxChunkBytes = 4 << 20

// Upload is what a node said it is uploading, in its first message. The node
// is already authenticated: NodeID is who it proved to be.
type Upload struct {
	NodeID  string
	TaskID  string
	Attempt int32
	Name    string
}

// Result is a stored upload.
type Result struct {
	Artifact store.Artifact
	// Replaced is true when an artifact of the same name and attempt was
	// stored before and this one took its place.
	Replaced bool
}

// ObjectKey is where an artifact's bytes live in the bucket. It is unique per
// upload and holds no part of the name, so no name, however odd, reaches the
// object store, and a replacing upload never overwrites an object someone may
// be reading.
func ObjectKey(taskID, artifactID string) string {
	return "tasks/" + taskID + "/" + artifactID
}

// Receive stores one upload: it checks the name and that the node holds the
// task attempt, streams the chunks next returns (io.EOF after the last) into
// the object store, and only once the object is complete writes its row and a
// note in the task's log, then rings the task's doorbell.
//
// A second upload of the same task, attempt and name replaces the first: the
// new object is written, the row moves to it, and the old object is removed.
// Replacing rather than refusing is what makes an agent's retry safe whatever
// happened to the first try: if it failed, the retry stores the file; if it
// succeeded but the answer was lost, the retry stores it again. Either way
// exactly one artifact of that name exists afterwards.
func (s *Service) Receive(ctx context.Context, up Upload, next func() ([]byte, error)) (Result, error) {
	if err := CheckName(up.Name); err != nil {
		return Result{}, err
	}
	if s.obj == nil {
		return Result{}, ErrNotConfigured
	}
	// Final refusals come before the object store's health, so a node is never
	// told to retry an upload that could not succeed anyway.
	ended, err := s.store.CheckUploadAllowed(ctx, up.NodeID, up.TaskID, up.Attempt, s.cfg.UploadGrace)
	switch {
	case errors.Is(err, store.ErrNotHeld):
		return Result{}, fmt.Errorf("%w: node %s does not hold task %s attempt %d; only the node an attempt ran on may upload its artifacts",
			ErrNotHeld, up.NodeID, up.TaskID, up.Attempt)
	case errors.Is(err, store.ErrAttemptClosed):
		when := "is over"
		if ended != nil {
			when = "ended at " + ended.UTC().Format("2006-01-02T15:04:05Z")
		}
		return Result{}, fmt.Errorf("%w: task %s attempt %d %s, and artifacts are taken for %s after an attempt ends",
			ErrClosed, up.TaskID, up.Attempt, when, s.cfg.UploadGrace)
	case err != nil:
		return Result{}, fmt.Errorf("%w: look up the task attempt in Postgres: %v", ErrUnavailable, err)
	}

	if err := s.requireStore(ctx); err != nil {
		return Result{}, fmt.Errorf("%w; nothing was stored, retry later", err)
	}

	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	defer func() { <-s.slots }()

	id := ids.New("art")
	key := ObjectKey(up.TaskID, id)
	size, sum, err := s.stream(ctx, up, key, next)
	if err != nil {
		s.log.Warn("artifact upload failed", "task", up.TaskID, "attempt", up.Attempt, "name", up.Name,
			"node", up.NodeID, "err", err)
		return Result{}, err
	}
	note := func(replaced bool) string {
		n := fmt.Sprintf("artifact %s (%d bytes, sha256 %s) stored", up.Name, size, sum)
		if replaced {
			n += ", replacing an earlier upload of the same name"
		}
		return n
	}
	stored, old, err := s.store.PutArtifact(ctx, store.Artifact{
		ID: id, TaskID: up.TaskID, Attempt: up.Attempt, NodeID: up.NodeID, Name: up.Name,
		Size: size, SHA256: sum, ObjectKey: key,
	}, note)
	if err != nil {
		s.remove(ctx, key, "its row could not be written")
		return Result{}, fmt.Errorf("%w: record the artifact in Postgres: %v; nothing was stored, retry later", ErrUnavailable, err)
	}
	if old != "" {
		s.remove(ctx, old, "a new upload of the same name replaced it")
	}
	if err := s.store.Notify(ctx, store.ChannelTaskEvents, up.TaskID); err != nil {
		s.log.Warn("artifacts: ring the task's doorbell (followers see the note on their next poll)", "task", up.TaskID, "err", err)
	}
	s.log.Info("artifact stored", "task", up.TaskID, "attempt", up.Attempt, "name", up.Name, "artifact", id,
		"size", size, "sha256", sum, "node", up.NodeID, "replaced", old != "")
	return Result{Artifact: stored, Replaced: old != ""}, nil
}

// stream copies the chunks into the object store through a pipe, hashing and
// counting them on the way. The pipe is what keeps memory flat: a chunk is
// handed to the uploader only when it is ready to read it into a part buffer,
// so a fast node waits on the object store (HTTP/2 flow control pushes back to
// it) instead of piling bytes up in the coordinator.
func (s *Service) stream(ctx context.Context, up Upload, key string, next func() ([]byte, error)) (size int64, sum string, err error) {
	pr, pw := io.Pipe()
	put := make(chan error, 1)
	go func() {
		_, err := s.obj.PutObject(ctx, s.cfg.Bucket, key, pr, -1, minio.PutObjectOptions{
			ContentType:           "application/octet-stream",
			PartSize:              uint64(s.cfg.PartSize),
			NumThreads:            uint(s.cfg.PartsInFlight),
			ConcurrentStreamParts: s.cfg.PartsInFlight > 1,
		})
		// Whatever happened, the writer must not stay blocked on a pipe that
		// nobody reads any more.
		pr.CloseWithError(err)
		put <- err
	}()
	// abort ends the upload early: the uploader reads err from the pipe, fails,
	// and aborts the multipart upload, which removes the parts already sent.
	abort := func(err error) (int64, string, error) {
		pw.CloseWithError(err)
		if <-put != nil {
			s.abandon(ctx, key)
		}
		return 0, "", err
	}
	h := sha256.New()
	for {
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return abort(ctx.Err())
			}
			if errors.Is(err, ErrProtocol) {
				return abort(err)
			}
			return abort(fmt.Errorf("%w: the upload stream broke after %d bytes: %v", ErrUnavailable, size, err))
		}
		if len(b) > MaxChunkBytes {
			return abort(fmt.Errorf("%w: a chunk of %d bytes is more than the %d one message may carry; send the file in smaller chunks",
				ErrProtocol, len(b), MaxChunkBytes))
		}
		size += int64(len(b))
		if size > s.cfg.MaxSize {
			return abort(fmt.Errorf("%w: %s is more than the %d bytes (%s) this coordinator accepts for one artifact (--s3-max-artifact-size); it was not stored",
				ErrTooLarge, up.Name, s.cfg.MaxSize, humanBytes(s.cfg.MaxSize)))
		}
		h.Write(b)
		if _, err := pw.Write(b); err != nil {
			// The uploader gave up; its error is the one that explains why.
			err = s.putFailed(ctx, <-put)
			s.abandon(ctx, key)
			return 0, "", err
		}
	}
	pw.Close()
	if err := <-put; err != nil {
		err = s.putFailed(ctx, err)
		s.abandon(ctx, key)
		return 0, "", err
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// putFailed words a failed PutObject. A failure to reach the object store also
// marks it down, so /readyz says so at once rather than at the next check.
func (s *Service) putFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if minio.ToErrorResponse(err).Code == "" {
		s.markDown(err)
	}
	return fmt.Errorf("%w: %s; nothing was stored, retry later", ErrUnavailable, describeStoreError(s.cfg, err))
}

// remove deletes an object nothing names any more. It is best effort: an
// object left behind costs storage, never correctness, because readers only
// find objects through their rows.
func (s *Service) remove(ctx context.Context, key, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.obj.RemoveObject(ctx, s.cfg.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		s.log.Warn("artifacts: remove an object nothing names (it only costs storage)", "key", key, "why", why, "err", err)
	}
}

// humanBytes is a size in the largest binary unit that keeps it at least 1.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

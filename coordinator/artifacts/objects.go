package artifacts

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/minio/minio-go/v7"
)

// Internal objects are what the coordinator itself keeps in the artifact
// bucket, next to a task's artifacts: today a task's log archive
// (coordinator/logarchive). They have no artifact row; whoever writes one
// records its key, and queues it in podium.object_deletions when it stops
// naming it.

// ObjectsEnabled reports whether an object store is configured for internal
// objects; without one their writers keep them in Postgres instead.
func (s *Service) ObjectsEnabled() bool { return s != nil && s.obj != nil }

// LogArchiveKey is where a task's log archive holding its log up to seq
// lives: next to its artifacts, and deterministic, so a pass that died between
// writing the object and recording it leaves an object the next pass
// overwrites rather than a second one.
func LogArchiveKey(taskID string, seq int64) string {
	return "tasks/" + taskID + "/log-" + strconv.FormatInt(seq, 10) + ".zst"
}

// PutObject stores size bytes read from r at key, replacing any object there.
// An object store that cannot be reached is ErrUnavailable, and marks it down
// as a failed upload does.
func (s *Service) PutObject(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	if err := s.requireStore(ctx); err != nil {
		return err
	}
	_, err := s.obj.PutObject(ctx, s.cfg.Bucket, key, r, size, minio.PutObjectOptions{
		ContentType: contentType, PartSize: uint64(s.cfg.PartSize),
	})
	if err != nil {
		err = s.putFailed(ctx, err)
		s.abandon(ctx, key)
		return err
	}
	return nil
}

// GetObject opens the object at key and returns it with its size; the caller
// closes it. A missing object is ErrNotFound; an object store that cannot be
// reached is ErrUnavailable.
func (s *Service) GetObject(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if err := s.requireStore(ctx); err != nil {
		return nil, 0, err
	}
	obj, err := s.obj.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	var info minio.ObjectInfo
	if err == nil {
		// GetObject is lazy; Stat makes the request.
		info, err = obj.Stat()
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, 0, fmt.Errorf("%w: object %s is not in bucket %q", ErrNotFound, key, s.cfg.Bucket)
		}
		return nil, 0, s.ReadFailed(err)
	}
	return obj, info.Size, nil
}

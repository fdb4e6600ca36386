package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/podiumhq/podium/coordinator/store"
)

// List returns a task's artifacts, by attempt and then name. It reads only
// Postgres, so it works while the object store is down, and lists nothing
// (rather than failing) on a coordinator without one.
func (s *Service) List(ctx context.Context, taskID string) ([]store.Artifact, error) {
	as, err := s.store.ListArtifacts(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("%w: list the task's artifacts in Postgres: %v", ErrUnavailable, err)
	}
	return as, nil
}

// Find returns one artifact of a task; attempt 0 means the newest attempt that
// has one of that name.
func (s *Service) Find(ctx context.Context, taskID, name string, attempt int32) (store.Artifact, error) {
	a, err := s.store.GetArtifact(ctx, taskID, name, attempt)
	switch {
	case errors.Is(err, store.ErrNotFound):
		which := ""
		if attempt != 0 {
			which = fmt.Sprintf(" in attempt %d", attempt)
		}
		return a, fmt.Errorf("%w: task %s has no artifact %q%s (see `podium artifacts %s`)", ErrNotFound, taskID, name, which, taskID)
	case err != nil:
		return a, fmt.Errorf("%w: look up the artifact in Postgres: %v", ErrUnavailable, err)
	}
	return a, nil
}

// Open finds an artifact and opens its bytes for reading. The reader streams
// from the object store as it is read; the caller closes it.
func (s *Service) Open(ctx context.Context, taskID, name string, attempt int32) (store.Artifact, io.ReadCloser, error) {
	if err := s.requireStore(ctx); err != nil {
		return store.Artifact{}, nil, err
	}
	a, err := s.Find(ctx, taskID, name, attempt)
	if err != nil {
		return a, nil, err
	}
	obj, err := s.obj.GetObject(ctx, s.cfg.Bucket, a.ObjectKey, minio.GetObjectOptions{})
	if err == nil {
		// GetObject is lazy; Stat makes the request, so a missing object or an
		// unreachable store is an error here and not half way through a stream.
		_, err = obj.Stat()
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return a, nil, fmt.Errorf("artifact %q of task %s is recorded, but its object %s is missing from bucket %q: was it removed outside Podium?",
				name, taskID, a.ObjectKey, s.cfg.Bucket)
		}
		return a, nil, s.ReadFailed(err)
	}
	return a, obj, nil
}

// ReadFailed words a failed read from the object store (opening or streaming
// an artifact), marking the store down when it could not be reached.
func (s *Service) ReadFailed(err error) error {
	if minio.ToErrorResponse(err).Code == "" && !errors.Is(err, context.Canceled) {
		s.markDown(err)
	}
	return fmt.Errorf("%w: %s; retry later", ErrUnavailable, describeStoreError(s.cfg, err))
}

// URL presigns a GET of an artifact, valid for the configured expiry. It needs
// no round trip to the object store (the region is configured), so it answers
// even while the store is down; the URL works once the store is back and until
// it expires. The download is offered under the artifact's base name.
func (s *Service) URL(ctx context.Context, taskID, name string, attempt int32) (store.Artifact, *url.URL, time.Time, error) {
	if s.obj == nil {
		return store.Artifact{}, nil, time.Time{}, ErrNotConfigured
	}
	a, err := s.Find(ctx, taskID, name, attempt)
	if err != nil {
		return a, nil, time.Time{}, err
	}
	params := url.Values{}
	params.Set("response-content-disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(a.Name)}))
	expires := time.Now().Add(s.cfg.URLExpiry)
	u, err := s.obj.PresignedGetObject(ctx, s.cfg.Bucket, a.ObjectKey, s.cfg.URLExpiry, params)
	if err != nil {
		return a, nil, time.Time{}, fmt.Errorf("presign a URL for artifact %q: %w", name, err)
	}
	return a, u, expires, nil
}

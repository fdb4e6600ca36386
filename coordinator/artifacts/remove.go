package artifacts

import (
	"context"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
)

// RemoveObjects removes objects the database no longer names (queued in
// podium.object_deletions) from the bucket, in one multi-object delete, and
// returns the keys that are gone. A key whose object is already missing
// counts as gone: removal is retried after a crash or an outage, and the
// object may have been removed the first time. It returns ErrNotConfigured
// without an object store, and an error wrapping ErrUnavailable (with the
// keys removed before it) when the store does not answer; those keys stay
// queued and are tried again later.
func (s *Service) RemoveObjects(ctx context.Context, keys []string) ([]string, error) {
	if s.obj == nil {
		return nil, ErrNotConfigured
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	objects := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		objects <- minio.ObjectInfo{Key: k}
	}
	close(objects)
	failed := map[string]error{}
	var firstErr error
	for r := range s.obj.RemoveObjectsWithResult(ctx, s.cfg.Bucket, objects, minio.RemoveObjectsOptions{}) {
		if r.Err == nil {
			continue
		}
		if code := minio.ToErrorResponse(r.Err).Code; code == "NoSuchKey" {
			continue
		}
		failed[r.ObjectName] = r.Err
		if firstErr == nil {
			firstErr = r.Err
		}
	}
	removed := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, bad := failed[k]; !bad {
			removed = append(removed, k)
		}
	}
	if firstErr != nil {
		// A result with no object name is a failure of the whole request:
		// nothing can be said to be removed.
		if _, whole := failed[""]; whole {
			removed = nil
		}
		return removed, fmt.Errorf("%w: %s", ErrUnavailable, describeStoreError(s.cfg, firstErr))
	}
	return removed, nil
}

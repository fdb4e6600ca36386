package artifacts

import (
	"context"
	"time"
)

// A multipart upload cut off by an object store outage cannot be aborted
// then: minio-go sends the abort at once, to the store that is down, and
// gives up. The parts already sent stay on the store as an open upload,
// costing storage that no listing of objects shows, for ever unless a
// bucket lifecycle rule removes them. So a failed put remembers its key, and
// the upload under it is aborted once the store answers again. Every key is
// unique to one try (an artifact's names its row to be; a log archive's is
// rewritten only by the next pass of the same job), so whatever upload is
// open under it belongs to the try that failed.

// staleUploadAge is how old an open multipart upload under tasks/ must be
// before a replica aborts it though it did not start it: one a replica
// could not remember because it died mid-upload. No upload of one artifact
// (1 GiB at most by default) takes a day.
const staleUploadAge = 24 * time.Hour

// abortTimeout bounds one sweep of open uploads.
const abortTimeout = 30 * time.Second

// abandon records that the put to key failed and, unless the store is
// known to be down (putFailed marked it), tries to abort its open multipart
// upload now; otherwise the key waits for the sweep that follows the
// store's recovery (sweepAbandoned).
func (s *Service) abandon(ctx context.Context, key string) {
	s.mu.Lock()
	if s.abandoned == nil {
		s.abandoned = map[string]struct{}{}
	}
	s.abandoned[key] = struct{}{}
	down := !s.ready
	s.mu.Unlock()
	if !down {
		s.abortAbandoned(ctx, []string{key})
	}
}

// abortAbandoned aborts the open multipart uploads under keys, forgetting
// each key whose abort went through (or that had none).
func (s *Service) abortAbandoned(ctx context.Context, keys []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	for _, key := range keys {
		if err := s.obj.RemoveIncompleteUpload(ctx, s.cfg.Bucket, key); err != nil {
			s.log.Debug("artifacts: abort the multipart upload a failed put left open (retried when the object store answers)", "key", key, "err", err)
			continue
		}
		s.mu.Lock()
		delete(s.abandoned, key)
		s.mu.Unlock()
	}
}

// sweepAbandoned runs when the object store answers again (and at the first
// check): it aborts the uploads failed puts left open, then any upload under
// tasks/ older than staleUploadAge, left by a replica that died mid-put.
func (s *Service) sweepAbandoned(ctx context.Context) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.abandoned))
	for k := range s.abandoned {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	if len(keys) > 0 {
		s.abortAbandoned(ctx, keys)
		s.mu.Lock()
		left := len(s.abandoned)
		s.mu.Unlock()
		s.log.Info("artifacts: aborted the multipart uploads an object store outage left open", "aborted", len(keys)-left, "left", left)
	}

	ctx, cancel := context.WithTimeout(ctx, abortTimeout)
	defer cancel()
	for u := range s.obj.ListIncompleteUploads(ctx, s.cfg.Bucket, "tasks/", true) {
		if u.Err != nil {
			s.log.Debug("artifacts: list open multipart uploads (retried at the next recovery)", "err", u.Err)
			return
		}
		if u.Initiated.IsZero() || time.Since(u.Initiated) < staleUploadAge {
			continue
		}
		if err := s.obj.RemoveIncompleteUpload(ctx, s.cfg.Bucket, u.Key); err != nil {
			s.log.Debug("artifacts: abort a stale multipart upload", "key", u.Key, "err", err)
			continue
		}
		s.log.Info("artifacts: aborted a multipart upload open for more than a day (a replica died during it)", "key", u.Key, "initiated", u.Initiated)
	}
}

// abortsOwed is how many failed puts still wait for their abort.
func (s *Service) abortsOwed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.abandoned)
}

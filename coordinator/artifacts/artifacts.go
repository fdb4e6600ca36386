// Package artifacts keeps the files tasks produce: it streams an upload from a
// node into the object store (S3, MinIO in production), records it in Postgres
// and serves it back, through the coordinator or by a presigned URL.
//
// The node is the only party that can reach the container and the coordinator
// the only one that can reach the object store, so the bytes cross the
// coordinator. They are streamed straight through — minio-go's multipart
// upload of unknown size, fed through a pipe — so a replica's memory per upload
// is a few parts, whatever the artifact's size. The object is always complete
// before its row is written: a row names an object that exists, and an upload
// that failed half way leaves nothing a reader can see.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/podiumhq/podium/coordinator/store"
)

// Sentinel errors callers branch on. Each maps to one Connect code (see
// ConnectError), which is how a node tells a final refusal from a reason to
// retry.
var (
	// ErrNotConfigured means the coordinator was started without an object store.
	ErrNotConfigured = errors.New("artifacts are not configured on this coordinator: " +
		"start it with --s3-endpoint and --s3-bucket (PODIUM_S3_ENDPOINT, PODIUM_S3_BUCKET)")
	// ErrUnavailable means the object store (or Postgres) could not be reached;
	// nothing was stored and the same call may succeed later.
	ErrUnavailable = errors.New("the artifact store is unavailable")
	// ErrBadName means a name was refused by CheckName.
	ErrBadName = errors.New("artifact name refused")
	// ErrTooLarge means an upload went past the per-artifact size cap.
	ErrTooLarge = errors.New("artifact too large")
	// ErrNotHeld means the node does not hold the task attempt it uploads for.
	ErrNotHeld = errors.New("the node does not hold this task attempt")
	// ErrClosed means the attempt ended longer ago than uploads are taken for.
	ErrClosed = errors.New("the task attempt no longer takes artifacts")
	// ErrProtocol means the upload's messages were not meta then chunks.
	ErrProtocol = errors.New("malformed upload")
	// ErrNotFound means there is no such artifact.
	ErrNotFound = errors.New("no such artifact")
)

// Config is where artifacts go and the limits on them. Zero values take the
// defaults named on each field.
type Config struct {
	// Endpoint is the object store's host:port. A URL is accepted too; its
	// scheme then decides TLS. Empty means artifacts are not configured.
	Endpoint string
	// Bucket is created at start if it does not exist.
	Bucket string
	// Region is the bucket's region (us-east-1). It is given rather than asked
	// for, so presigning a URL never needs a round trip.
	Region    string
	AccessKey string
	SecretKey string
	// TLS speaks HTTPS to the object store.
	TLS bool

	// MaxSize is the largest artifact accepted (1 GiB). An upload is cut off
	// the moment it goes past it, not after it has all been stored.
	MaxSize int64
	// PartSize is the multipart part size (8 MiB), and PartsInFlight how many
	// parts of one upload are sent at once (2). Their product is the memory one
	// upload holds: the body is read into part buffers and nowhere else.
	PartSize      int64
	PartsInFlight int
	// MaxUploads is how many uploads one replica streams at once (16); more
	// wait for a slot. With the two above it bounds the replica's memory for
	// artifacts (16 × 2 × 8 MiB = 256 MiB at most).
	MaxUploads int
	// UploadGrace is how long after a task attempt ended its node may still
	// upload for it (10 min): an agent collects a task's files after the
	// container exits, which is after it has reported the final status.
	UploadGrace time.Duration
	// URLExpiry is how long a presigned download URL is valid (15 min).
	URLExpiry time.Duration
	// ProbeInterval is how often the object store is checked while it is
	// healthy (15 s); while it is not, it is checked every 2 s.
	ProbeInterval time.Duration
}

// Enabled reports whether an object store is configured at all.
func (c Config) Enabled() bool { return c.Endpoint != "" }

func (c *Config) defaults() {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.MaxSize == 0 {
		c.MaxSize = 1 << 30
	}
	if c.PartSize == 0 {
		c.PartSize = 8 << 20
	}
	if c.PartsInFlight == 0 {
		c.PartsInFlight = 2
	}
	if c.MaxUploads == 0 {
		c.MaxUploads = 16
	}
	if c.UploadGrace == 0 {
		c.UploadGrace = 10 * time.Minute
	}
	if c.URLExpiry == 0 {
		c.URLExpiry = 15 * time.Minute
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 15 * time.Second
	}
}

// minPartSize is the smallest part S3 accepts (except the last).
const minPartSize = 5 << 20

// maxParts is the most parts S3 allows in one multipart upload.
const maxParts = 10000

// Service stores and serves artifacts. Every replica has one, and any replica
// takes any node's upload: an upload is its own request and needs no session.
type Service struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	// obj is nil when no object store is configured.
	obj *minio.Client
	// slots bounds the uploads streaming at once.
	slots chan struct{}

	mu      sync.Mutex
	ready   bool
	reason  string
	checked bool          // a check has finished
	probing chan struct{} // closed when the probe in flight ends; nil if none
	kick    chan struct{}
	// abandoned are the keys of failed puts whose multipart upload may still
	// be open on the store (abandoned.go).
	abandoned map[string]struct{}
}

// New checks the configuration and returns the service. It does not contact
// the object store: Run does, so a coordinator whose object store is down
// still starts, serves everything else, and says why it is not ready.
func New(cfg Config, st *store.Store, log *slog.Logger) (*Service, error) {
	cfg.defaults()
	s := &Service{cfg: cfg, store: st, log: log, kick: make(chan struct{}, 1)}
	if !cfg.Enabled() {
		return s, nil
	}
	endpoint, secure, err := parseEndpoint(cfg.Endpoint, cfg.TLS)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("--s3-endpoint is set but --s3-bucket is not: name the bucket artifacts go in (PODIUM_S3_BUCKET); it is created if missing")
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, errors.New("give both --s3-access-key and --s3-secret-key (PODIUM_S3_ACCESS_KEY, PODIUM_S3_SECRET_KEY), or neither for anonymous access")
	}
	if cfg.MaxSize < 0 {
		return nil, fmt.Errorf("the maximum artifact size %d is negative", cfg.MaxSize)
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("the part size %d is below the 5 MiB S3 requires", cfg.PartSize)
	}
	if cfg.MaxSize > cfg.PartSize*maxParts {
		return nil, fmt.Errorf("the maximum artifact size %d needs more than S3's %d parts of %d bytes: raise the part size", cfg.MaxSize, maxParts, cfg.PartSize)
	}
	if cfg.PartsInFlight < 1 || cfg.MaxUploads < 1 {
		return nil, errors.New("parts in flight and concurrent uploads must be at least 1")
	}
	s.obj, err = minio.New(endpoint, &minio.Options{
		// Empty keys sign nothing: anonymous access.
		Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Secure: secure, Region: cfg.Region,
		// A few quick retries ride out a blip; an outage must surface as an
		// error within seconds, because a node is waiting on the answer.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("object store endpoint %q: %w", cfg.Endpoint, err)
	}
	s.slots = make(chan struct{}, cfg.MaxUploads)
	s.reason = "the object store has not been checked yet"
	return s, nil
}

// parseEndpoint accepts host:port, or a URL whose scheme then decides TLS.
func parseEndpoint(endpoint string, tls bool) (hostport string, secure bool, err error) {
	if !strings.Contains(endpoint, "://") {
		if strings.ContainsAny(endpoint, "/?#") {
			return "", false, fmt.Errorf("--s3-endpoint %q: want host:port (or http://host:port, https://host)", endpoint)
		}
		return endpoint, tls, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, fmt.Errorf("--s3-endpoint %q: want host:port (or http://host:port, https://host) with no path", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// Config is the effective configuration, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// Run checks the object store until ctx ends: at once, then every probe
// interval while it answers and every 2 s while it does not, and at once when
// an upload failed. The first successful check creates the bucket if needed;
// each one after a failed one (and the first) aborts the multipart uploads
// that failed puts left open (abandoned.go).
// It returns nil when ctx ends, or at once when no object store is configured.
func (s *Service) Run(ctx context.Context) error {
	if s.obj == nil {
		return nil
	}
	wasReady := false
	for {
		s.probe(ctx)
		s.mu.Lock()
		ready := s.ready
		wait := s.cfg.ProbeInterval
		if !s.ready {
			wait = 2 * time.Second
		}
		s.mu.Unlock()
		// Once the store answers again, abort what the outage left open.
		if ready && (!wasReady || s.abortsOwed() > 0) {
			s.sweepAbandoned(ctx)
		}
		wasReady = ready
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-time.After(wait):
		}
	}
}

// Ready reports whether artifacts can be stored now: nil, ErrNotConfigured,
// or an ErrUnavailable that says why. It reads the last check and does not
// wait on the network, so /readyz stays cheap.
func (s *Service) Ready() error {
	if s.obj == nil {
		return ErrNotConfigured
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, s.reason)
}

// requireStore is the gate of every call that needs the object store. When the
// last check failed it checks again, so an upload retried right after the
// store came back goes through without waiting for the next periodic check;
// calls that arrive while a check is in flight share its answer, so an outage
// with many nodes retrying costs the store one request at a time.
func (s *Service) requireStore(ctx context.Context) error {
	if s.obj == nil {
		return ErrNotConfigured
	}
	if s.Ready() != nil {
		s.probe(ctx)
	}
	return s.Ready()
}

// markDown records that a call to the object store failed and asks Run to
// check it now, so /readyz reflects an outage an upload ran into.
func (s *Service) markDown(err error) {
	s.mu.Lock()
	was := s.ready
	s.ready = false
	s.reason = describeStoreError(s.cfg, err)
	reason := s.reason
	s.mu.Unlock()
	if was {
		s.log.Warn("object store unavailable: artifact uploads are refused until it answers", "reason", reason)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// probe checks the bucket (creating it once), one probe at a time: a caller
// that finds one in flight waits for its result instead of sending another.
func (s *Service) probe(ctx context.Context) {
	s.mu.Lock()
	if wait := s.probing; wait != nil {
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	done := make(chan struct{})
	s.probing = done
	s.mu.Unlock()

	// The check runs to its own deadline even if the caller that started it
	// gives up: a cancelled request must not be recorded as an outage.
	err := s.checkBucket(context.WithoutCancel(ctx))

	s.mu.Lock()
	was, first := s.ready, !s.checked
	s.probing = nil
	s.checked = true
	s.ready = err == nil
	if err != nil {
		s.reason = describeStoreError(s.cfg, err)
	}
	reason := s.reason
	s.mu.Unlock()
	close(done)
	switch {
	case err == nil && !was:
		s.log.Info("object store ready", "endpoint", s.cfg.Endpoint, "bucket", s.cfg.Bucket)
	case err != nil && (was || first):
		s.log.Warn("object store unavailable: artifact uploads are refused until it answers", "reason", reason)
	}
}

func (s *Service) checkBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := s.obj.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if err := s.obj.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}); err != nil {
		// Another replica may have made it in between.
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("create bucket %q: %w", s.cfg.Bucket, err)
	}
	s.log.Info("created the artifacts bucket", "bucket", s.cfg.Bucket)
	return nil
}

// describeStoreError words an object store failure for /readyz and for the
// node that was refused.
func describeStoreError(cfg Config, err error) string {
	if r := minio.ToErrorResponse(err); r.Code != "" {
		return fmt.Sprintf("the object store at %s refused access to bucket %q: %s (%s); check the S3 credentials and bucket",
			cfg.Endpoint, cfg.Bucket, r.Message, r.Code)
	}
	return fmt.Sprintf("the object store at %s does not answer: %v", cfg.Endpoint, err)
}

// ConnectError turns an error of this package into the Connect error a caller
// sees. The code is the contract (see UploadArtifactRequest in node.proto):
// Unavailable is worth retrying, everything else is final.
func ConnectError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, ErrUnavailable):
		code = connect.CodeUnavailable
	case errors.Is(err, ErrNotConfigured), errors.Is(err, ErrClosed):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, ErrBadName), errors.Is(err, ErrProtocol):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrTooLarge):
		code = connect.CodeResourceExhausted
	case errors.Is(err, ErrNotHeld):
		code = connect.CodePermissionDenied
	case errors.Is(err, ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}

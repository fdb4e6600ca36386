// Package notify delivers webhook events from the durable outbox
// (podium.webhook_outbox, filled by triggers in the transaction of the
// change that caused each event). Every replica runs a Worker, not only the
// leader: each claims due rows with FOR UPDATE SKIP LOCKED and a lease, so
// replicas share the work, and a row claimed by a replica that died mid-POST
// becomes due again once the lease has passed. Delivery is at least once: a
// receiver may see an event twice (say, it answered 200 just as the
// replica died), and tells by the event id, which is the same on every
// attempt.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podiumhq/podium/coordinator/backoff"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Event types.
const (
	EventTaskFinished = taskspec.EventTaskFinished
	EventTaskLost     = taskspec.EventTaskLost
	EventNodeOffline  = taskspec.EventNodeOffline
)

// Events are the event types there are, in the order documented.
var Events = []string{EventTaskFinished, EventTaskLost, EventNodeOffline}

// TaskEvents are the event types a task's own notify: entry may ask for.
var TaskEvents = taskspec.TaskEvents

// retryMax is the longest wait between two reads of the outbox while they
// fail.
const retryMax = 30 * time.Second

// Production defaults of Config.
const (
	DefaultPollInterval = time.Second
	DefaultTimeout      = 10 * time.Second
	DefaultBackoffBase  = 5 * time.Second
	DefaultBackoffCap   = 10 * time.Minute
	DefaultAbandonAfter = 24 * time.Hour
	DefaultBatch        = 16
)

// maxErrorBody bounds how much of a failing receiver's answer is read and
// kept as the attempt's error; maxDrainBody how much of a successful one is
// read (so the connection can be reused) before it is closed.
const (
	maxErrorBody = 256
	maxDrainBody = 64 << 10
)

// Config tunes the delivery worker; zero fields take the defaults.
type Config struct {
	// PollInterval is how often an idle worker looks for due rows. Polling,
	// not a NOTIFY from the triggers: a notifying commit takes a
	// cluster-wide lock, and the triggers run in the transactions of every
	// task that ends.
	PollInterval time.Duration
	// Timeout bounds one POST, connecting included.
	Timeout time.Duration
	// Lease is how long a claimed row is left to the replica posting it;
	// it must exceed Timeout. Timeout plus 30 s by default.
	Lease time.Duration
	// BackoffBase is the wait after the first failed attempt; each later
	// one waits twice the one before, up to BackoffCap, with jitter (half
	// to all of it).
	BackoffBase, BackoffCap time.Duration
	// AbandonAfter is how long after its event a row is given up, with a
	// warning in the log.
	AbandonAfter time.Duration
	// Batch is how many rows one claim takes, and so how many POSTs run at
	// once on this replica.
	Batch int
	// AllowPrivate lets tasks' own notify: targets be loopback, private,
	// link-local or unspecified addresses (--notify-allow-private).
	// Admins' webhooks may target anything regardless.
	AllowPrivate bool
}

// Check refuses a negative duration, naming its flag.
func (c Config) Check() error {
	for _, f := range []struct {
		flag string
		d    time.Duration
	}{{"--notify-backoff", c.BackoffBase}, {"--notify-max-backoff", c.BackoffCap},
		{"--notify-give-up-after", c.AbandonAfter}, {"--notify-timeout", c.Timeout}} {
		if f.d < 0 {
			return fmt.Errorf("%s %s is negative: give a duration such as 5s, or leave it out for the default", f.flag, f.d)
		}
	}
	if c.BackoffCap > 0 && c.BackoffCap < c.BackoffBase {
		return fmt.Errorf("--notify-max-backoff %s is shorter than --notify-backoff %s: the backoff doubles from the one up to the other", c.BackoffCap, c.BackoffBase)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Lease <= c.Timeout {
		c.Lease = c.Timeout + 30*time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffCap < c.BackoffBase {
		c.BackoffCap = max(DefaultBackoffCap, c.BackoffBase)
	}
	if c.AbandonAfter <= 0 {
		c.AbandonAfter = DefaultAbandonAfter
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	return c
}

// Worker delivers the outbox's due rows.
type Worker struct {
	cfg     Config
	store   *store.Store
	secrets *secrets.Vault
	log     *slog.Logger
	// open posts to admins' webhooks; guarded to tasks' own targets, whose
	// dialer refuses private addresses unless AllowPrivate.
	open, guarded *http.Client
	now           func() time.Time
}

// Deps are what a Worker works with.
type Deps struct {
	// Store holds the outbox.
	Store *store.Store
	// Secrets opens the signing secrets; nil means a vault over Store
	// without a master key.
	Secrets *secrets.Vault
	// Log is where it logs; nil means slog.Default().
	Log *slog.Logger
}

// New returns a worker over deps.Store.
func New(cfg Config, deps Deps) *Worker {
	cfg = cfg.withDefaults()
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	vault := deps.Secrets
	if vault == nil {
		vault = secrets.NewVault(nil, deps.Store)
	}
	w := &Worker{cfg: cfg, store: deps.Store, secrets: vault, log: log, now: time.Now}
	w.open = client(cfg.Timeout, nil)
	w.guarded = w.open
	if !cfg.AllowPrivate {
		w.guarded = client(cfg.Timeout, refusePrivate)
	}
	return w
}

// client is an HTTP client that follows no redirects (a webhook's URL is
// where it is delivered, and following one would take a guarded POST
// wherever the receiver points) and uses no proxy (a proxy would dial in
// the dialer's place).
func client(timeout time.Duration, control func(network, address string, c syscall.RawConn) error) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: control}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: timeout,
			ResponseHeaderTimeout: timeout, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ErrPrivateAddress is why a task's notify: target was not posted to.
var ErrPrivateAddress = errors.New("is a loopback, private, link-local or unspecified address, which a task's notify: URL may not reach " +
	"(an operator allows it with --notify-allow-private; admins' webhooks may target anything)")

// sharedSpace is 100.64.0.0/10, carrier-grade NAT and the tailnet's range:
// private in all but name.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// PrivateAddress reports whether a is an address a task's own notify:
// target may not reach.
func PrivateAddress(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsUnspecified() || a.IsMulticast() || sharedSpace.Contains(a)
}

// refusePrivate is the guarded dialer's Control: it sees the address
// actually dialled, after DNS, so a name that resolves to a private address
// (now, or only at the second lookup) is refused all the same.
func refusePrivate(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("notify: dial %s: %w", address, err)
	}
	if PrivateAddress(ap.Addr()) {
		return fmt.Errorf("%s %w", ap.Addr(), ErrPrivateAddress)
	}
	return nil
}

// Run delivers until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	// While reading the outbox fails (Postgres away, or refusing
	// connections), the reads are spaced out from the poll interval up to
	// retryMax, so that the log gets a warning per retry, not per poll.
	retry := backoff.Backoff{Min: w.cfg.PollInterval, Max: max(retryMax, w.cfg.PollInterval)}
	for {
		n, err := w.Pass(ctx)
		wait := w.cfg.PollInterval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			wait = retry.Next()
			w.log.Warn("webhooks: read the outbox", "err", store.Explain(err), "retry_in", wait.Round(100*time.Millisecond))
		default:
			retry.Reset()
			if n == w.cfg.Batch {
				continue // more may be due
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Pass claims one batch of due rows, posts them at once and records how
// each went. It returns how many it claimed.
func (w *Worker) Pass(ctx context.Context) (int, error) {
	rows, err := w.store.ClaimOutbox(ctx, w.cfg.Batch, w.cfg.Lease)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Go(func() {
			d := w.attempt(ctx, r)
			// The outcome is recorded even while the replica stops: the
			// POST happened.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := w.store.RecordDelivery(rctx, d); err != nil {
				w.log.Warn("webhooks: record a delivery (the row is retried after its lease)", "event", r.EventID, "err", err)
			}
		})
	}
	wg.Wait()
	return len(rows), nil
}

// attempt posts one row and says how it went.
func (w *Worker) attempt(ctx context.Context, r store.OutboxRow) store.HookDelivery {
	err := w.post(ctx, r)
	if err == nil {
		return store.HookDelivery{Row: r, Status: store.DeliveryDelivered}
	}
	if denied := (*secrets.DeniedError)(nil); errors.As(err, &denied) {
		// Not retried: nothing was sent, and sending unsigned is not what
		// the entry asked for.
		w.log.Warn("webhooks: a task's notify entry was not sent: its owner may not use its signing secret", "event", r.EventID, "err", err)
		return store.HookDelivery{Row: r, Status: store.DeliveryAbandoned, Error: err.Error()}
	}
	if age := w.now().Sub(r.CreatedAt); age >= w.cfg.AbandonAfter {
		w.log.Warn("webhooks: event abandoned: it was not delivered in time", "event", r.EventID, "type", r.EventType,
			"url", r.URL, "webhook", deref(r.WebhookID), "attempts", r.Attempts, "age", age.Round(time.Second), "err", err)
		return store.HookDelivery{Row: r, Status: store.DeliveryAbandoned,
			Error: fmt.Sprintf("abandoned after %d attempts in %s: %v", r.Attempts, age.Round(time.Second), err)}
	}
	return store.HookDelivery{Row: r, Status: store.DeliveryFailed, Error: err.Error(), Next: w.now().Add(w.Backoff(r.Attempts))}
}

// Backoff is the wait after the attempts-th failed attempt: BackoffBase
// doubled for each attempt before, at most BackoffCap, of which a random
// half is taken off, so receivers that failed together are not all retried
// in the same instant.
func (w *Worker) Backoff(attempts int) time.Duration {
	d := w.cfg.BackoffBase
	for i := 1; i < attempts && d < w.cfg.BackoffCap; i++ {
		d *= 2
	}
	d = min(d, w.cfg.BackoffCap)
	return d/2 + rand.N(d/2+1)
}

// post sends the event, signed when the row names a secret.
func (w *Worker) post(ctx context.Context, r store.OutboxRow) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return fmt.Errorf("url %s: %w", r.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "podium/"+version.Version)
	req.Header.Set(HeaderEventID, r.EventID)
	req.Header.Set(HeaderEventType, r.EventType)
	switch {
	case r.SecretName != "":
		if err := w.authorizeSigning(ctx, r); err != nil {
			return err
		}
		vals, err := w.secrets.Resolve(ctx, []*podiumv1.SecretRef{{Name: r.SecretName}})
		if err != nil {
			return fmt.Errorf("open the signing secret %s: %w", r.SecretName, err)
		}
		req.Header.Set(HeaderSignature, Sign(vals[0].GetValue(), r.Body, w.now()))
	case r.WebhookID != nil:
		// A webhook added without --secret-name signs with the secret the
		// coordinator generated for it, kept on its own row where no task
		// can name it.
		key, err := w.secrets.WebhookKey(ctx, *r.WebhookID)
		if err != nil {
			return fmt.Errorf("open the signing secret of webhook %s: %w", *r.WebhookID, err)
		}
		req.Header.Set(HeaderSignature, Sign(key, r.Body, w.now()))
	}
	c := w.open
	if r.PerTask {
		c = w.guarded
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxDrainBody))
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	msg := fmt.Sprintf("%s answered %s", r.URL, res.Status)
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		msg += " (redirects are not followed: register the URL it redirects to)"
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		msg += ": " + s
	}
	return errors.New(msg)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// authorizeSigning checks that the owner of the task a notify entry
// belongs to may use the entry's signing secret (secrets.Authorize), as at
// submit: a signature over a body the owner knows is the secret's use, and
// the grant may have been revoked since. The owner is the event's
// task.user, which the coordinator wrote (requested_by). An admin's
// webhook (not per task) is not checked: it signs with the secret the
// coordinator generated for it, or with the stored secret an admin named
// when adding it. Every signing, and every refusal, is audited (a receiver
// that keeps failing is retried, and each retry is a signing).
func (w *Worker) authorizeSigning(ctx context.Context, r store.OutboxRow) error {
	if !r.PerTask {
		return nil
	}
	var ev struct {
		Task struct {
			ID   string `json:"id"`
			User string `json:"user"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.Body, &ev); err != nil || ev.Task.ID == "" {
		return fmt.Errorf("signing secret %s: the event names no task whose owner could use it", r.SecretName)
	}
	// A signing is a use of the secret like a task's: audited either way,
	// by name, before the body leaves (a failed audit write is retried with
	// the delivery).
	what := ev.Task.ID + " notify"
	sd, err := w.secrets.Authorize(ctx, ev.Task.User, []string{r.SecretName})
	if err == nil {
		if aerr := secrets.RecordUse(ctx, w.store, sd, what, []string{r.SecretName}); aerr != nil {
			return fmt.Errorf("signing secret %s: audit its use: %w", r.SecretName, aerr)
		}
		return nil
	}
	if aerr := secrets.RecordRefused(ctx, w.store, what, err); aerr != nil {
		w.log.Warn("webhooks: the refused signing's audit row was not written", "event", r.EventID, "err", aerr)
	}
	return fmt.Errorf("not signed, not sent: %w", err)
}

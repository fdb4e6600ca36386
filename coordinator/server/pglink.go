package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/store"
)

// DefaultPostgresLostAfter is how long a replica's pings of Postgres may fail
// before it gives up its nodes and its callers (Config.PostgresLostAfter).
const DefaultPostgresLostAfter = 5 * time.Second

// pgProbeEvery is how often the link to Postgres is looked at.
const pgProbeEvery = time.Second

// pgLink watches this replica's link to Postgres: its lease connection, which
// is pinged every second and given up after 3 s without an answer, and which
// is reopened at once when Postgres answers (coordinator/lease). Not a pooled
// connection: a pool whose connections are all busy makes a probe wait
// without Postgres being away, and a replica under load would drop its
// nodes for it. A replica cut off from
// Postgres while the others are not can store nothing its nodes send and
// answer nothing its callers ask; kept, they would wait on it until the link
// came back (or a node fenced itself and its tasks were declared lost). Once
// the lease connection has been down for lostAfter, pgLink ends every node stream (the
// nodes reconnect, to a replica that answers, with what they have not had
// acknowledged), cancels the API calls in flight (a follower moves on) and
// refuses new ones as Unavailable, which agents and the CLI read as "try
// another replica", until a probe succeeds again.
type pgLink struct {
	// probe says why the link is down, nil while it is up.
	probe     func() error
	sessions  *nodes.Registry
	lostAfter time.Duration
	log       *slog.Logger
	errs      *connect.ErrorWriter

	mu sync.Mutex
	// lost is cancelled when the link is declared lost; the calls in flight
	// end with it. A fresh one is made when the link comes back.
	lost     context.Context
	markLost context.CancelFunc
	since    time.Time // when the probes started failing; zero while they pass
	down     bool      // lost is cancelled
	tooMany  bool      // the last failure was Postgres refusing for max_connections
}

func newPGLink(probe func() error, sessions *nodes.Registry, lostAfter time.Duration, log *slog.Logger) *pgLink {
	if lostAfter <= 0 {
		lostAfter = DefaultPostgresLostAfter
	}
	p := &pgLink{probe: probe, sessions: sessions, lostAfter: lostAfter, log: log, errs: connect.NewErrorWriter()}
	p.lost, p.markLost = context.WithCancel(context.Background())
	return p
}

// Run watches the lease connection until ctx ends, then returns nil.
func (p *pgLink) Run(ctx context.Context) error {
	t := time.NewTicker(pgProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.observe(time.Now(), p.probe())
	}
}

// observe takes one probe's outcome at now.
func (p *pgLink) observe(now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		if p.down {
			p.log.Info("Postgres answers again; serving nodes and calls", "after", now.Sub(p.since).Round(time.Second))
			p.lost, p.markLost = context.WithCancel(context.Background())
			p.down = false
		}
		p.since = time.Time{}
		return
	}
	if p.since.IsZero() {
		p.since = now
	}
	p.tooMany = store.TooManyConnections(err)
	if p.down || now.Sub(p.since) < p.lostAfter {
		return
	}
	p.down = true
	p.markLost()
	n := p.sessions.Len()
	p.log.Error("Postgres has not answered this replica for "+now.Sub(p.since).Round(time.Second).String()+
		": ending every node stream and refusing calls, so that nodes and clients go to a replica that reaches it",
		"nodes", n, "err", store.Explain(err))
	p.sessions.CloseAll()
}

// state is the context cancelled when the link is lost, and whether it is.
func (p *pgLink) state() (context.Context, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost, p.down
}

// errLost is what a caller of a replica cut off from Postgres is told: which
// of the two it is, in fixed words (the driver's error names hosts and users,
// and the caller may not have shown a token yet).
func (p *pgLink) errLost() *connect.Error {
	p.mu.Lock()
	since, tooMany := p.since, p.tooMany
	p.mu.Unlock()
	why := "it does not answer"
	if tooMany {
		why = "it refuses new connections: every connection its max_connections allows is in use"
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
		"this coordinator replica cannot reach Postgres (for %s: %s); try another replica", time.Since(since).Round(time.Second), why))
}

// guard refuses the API's calls (Connect procedures: node streams, the CLI,
// followers) while the link is lost, and cancels those in flight when it is
// lost. Probes, metrics and the console's pages are left alone: /readyz says
// what is wrong, and the console's calls go through the API.
func (p *pgLink) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/podium.v1.") {
			next.ServeHTTP(w, r)
			return
		}
		lost, down := p.state()
		if down {
			if p.errs.IsSupported(r) {
				_ = p.errs.Write(w, r, p.errLost())
				return
			}
			http.Error(w, p.errLost().Message(), http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stop := context.AfterFunc(lost, func() { cancel(errors.New("this coordinator replica lost Postgres")) })
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

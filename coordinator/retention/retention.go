// Package retention is what keeps the coordinator's database and object
// store from growing without bound: two leader-only jobs (leader.Worker).
//
// The Job removes what has been kept long enough — terminal tasks past their
// retention (with their log, attempts and artifacts, leaving a tombstone so
// reading one says when it expired), logs past --retain-logs, artifacts past
// --retain-artifacts, spent enrollment tokens, node commands done with, old
// audit rows and old tombstones — and queues every object those rows named in
// podium.object_deletions in the same statement. The Sweeper removes the
// queued objects from the object store and then their queue rows.
//
// Both run on the leader only: two replicas expiring the same rows would do
// no harm (rows are claimed FOR UPDATE SKIP LOCKED, removal of a missing
// object counts as done) but would double the load for nothing. Each works
// in batches of one short statement each (Batch rows), oldest first, so no
// lock is held for long on a table ingest and dispatch write to all the time,
// and a backlog (a first run on a year of tasks) drains over several passes
// without stalling anything.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
)

// Defaults of Config.
const (
	DefaultTasks     = 90 * taskspec.Day
	DefaultArtifacts = 30 * taskspec.Day
	DefaultAudit     = taskspec.Year
	DefaultEvery     = time.Minute
	// DefaultBatch is how many rows one statement removes. At 500 tasks with
	// their events a statement takes tens of milliseconds (see
	// bench/retention), short enough that a writer waiting on one
	// of its rows does not notice.
	DefaultBatch = 500
)

// Fixed retentions: how long an enrollment token is kept once used or
// expired (so who used it can still be looked up, and enrolling with it says
// "expired"), and how long a node command is kept once it is delivered, or
// once its task has ended without it being delivered.
const (
	UsedTokens       = 7 * taskspec.Day
	DeliveredCommand = time.Hour
)

// Bounds of the retention flags: under a minute nobody can read what they
// just ran (minutes are for benchmarks and tests of churn; a team keeps
// days); past 100 years is a typo.
const (
	MinKeep  = time.Minute
	MaxKeep  = 100 * taskspec.Year
	MinEvery = 10 * time.Millisecond
	MaxEvery = 24 * time.Hour
)

// Config is how long things are kept. Zero values take the defaults.
type Config struct {
	// Tasks is how long a terminal task is kept after it ended, unless its
	// spec says otherwise (retain) (DefaultTasks).
	Tasks time.Duration
	// Logs is how long a task's log is kept after it ended; 0 means as long
	// as the task (its own retain, else Tasks). A Logs longer than Tasks is
	// capped at Tasks.
	Logs time.Duration
	// Artifacts is how long an artifact is kept after it was stored
	// (DefaultArtifacts), capped at Tasks.
	Artifacts time.Duration
	// Audit is how long audit rows, and the tombstones of expired tasks, are
	// kept (DefaultAudit).
	Audit time.Duration
	// Every is how often the job runs (DefaultEvery); the sweeper runs as
	// often.
	Every time.Duration
	// Batch is how many rows one statement removes (DefaultBatch).
	Batch int
}

// Check refuses a setting out of bounds, naming its flag.
func (c Config) Check() error {
	for _, f := range []struct {
		flag string
		d    time.Duration
	}{{"--retain-tasks", c.Tasks}, {"--retain-logs", c.Logs}, {"--retain-artifacts", c.Artifacts}, {"--retain-audit", c.Audit}} {
		if f.d != 0 && (f.d < MinKeep || f.d > MaxKeep) {
			return fmt.Errorf("%s %s: want %s to %s, e.g. 90d or 1y", f.flag, taskspec.FormatLong(f.d), taskspec.FormatLong(MinKeep), taskspec.FormatLong(MaxKeep))
		}
	}
	if c.Every != 0 && (c.Every < MinEvery || c.Every > MaxEvery) {
		return fmt.Errorf("--retention-every %s: want %s to %s", c.Every, MinEvery, MaxEvery)
	}
	if c.Batch < 0 {
		return fmt.Errorf("retention batch %d is negative", c.Batch)
	}
	return nil
}

// withDefaults fills in the defaults and caps Logs and Artifacts at Tasks,
// logging the cap: a log kept longer than its task would be kept by nothing.
func (c Config) withDefaults(log *slog.Logger) Config {
	if c.Tasks == 0 {
		c.Tasks = DefaultTasks
	}
	if c.Artifacts == 0 {
		c.Artifacts = DefaultArtifacts
	}
	if c.Audit == 0 {
		c.Audit = DefaultAudit
	}
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Logs > c.Tasks {
		log.Warn("retention: --retain-logs is longer than --retain-tasks; logs are kept as long as their tasks",
			"retain_logs", taskspec.FormatLong(c.Logs), "retain_tasks", taskspec.FormatLong(c.Tasks))
		c.Logs = 0
	}
	if c.Artifacts > c.Tasks {
		log.Warn("retention: --retain-artifacts is longer than --retain-tasks; artifacts are kept as long as their tasks",
			"retain_artifacts", taskspec.FormatLong(c.Artifacts), "retain_tasks", taskspec.FormatLong(c.Tasks))
		c.Artifacts = c.Tasks
	}
	return c
}

// Stats are what one pass of the Job removed, and its longest statement.
type Stats struct {
	Tasks, Logs, Artifacts, Tokens, Commands, Audit, Tombstones int
	// SecretPins are pins of ended attempts released; SecretVersions old
	// secret values deleted once no attempt pinned them.
	SecretPins, SecretVersions int
	// Statements is how many statements the pass ran, and Longest the
	// longest of them: each is its own transaction, so Longest is also the
	// longest any row was locked by the job.
	Statements int
	Longest    time.Duration
}

// Removed reports whether the pass removed anything.
func (s Stats) Removed() bool {
	return s.Tasks+s.Logs+s.Artifacts+s.Tokens+s.Commands+s.Audit+s.Tombstones+s.SecretPins+s.SecretVersions > 0
}

// Deps are what the Job and the Sweeper work with.
type Deps struct {
	Store *store.Store
	// Objects is the object store the Sweeper removes queued objects from;
	// nil, or one not configured, leaves them queued (the Job needs none).
	Objects *artifacts.Service
	// Log is where they log; nil means slog.Default().
	Log *slog.Logger
}

// Job expires what is past its retention. It is a leader.Worker.
type Job struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
}

// NewJob returns the job; cfg must have passed Check.
func NewJob(cfg Config, deps Deps) *Job {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	return &Job{cfg: cfg.withDefaults(log), store: deps.Store, log: log}
}

// Config is the effective configuration, defaults filled in and caps applied.
func (j *Job) Config() Config { return j.cfg }

// Run runs a pass at once and then every cfg.Every until ctx ends. A failed
// pass is logged and tried again at the next tick: a database blip must not
// make the leader step down.
func (j *Job) Run(ctx context.Context) error {
	failing := false
	for {
		st, err := j.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				j.log.Warn("retention: a pass failed; trying again", "err", err, "in", j.cfg.Every)
			}
			failing = true
		default:
			if failing {
				j.log.Info("retention: passes succeed again")
			}
			failing = false
			if st.Removed() {
				j.log.Info("retention: expired", "tasks", st.Tasks, "logs", st.Logs, "artifacts", st.Artifacts,
					"tokens", st.Tokens, "commands", st.Commands, "audit_rows", st.Audit, "tombstones", st.Tombstones,
					"secret_pins", st.SecretPins, "secret_versions", st.SecretVersions,
					"statements", st.Statements, "longest", st.Longest)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(j.cfg.Every):
		}
	}
}

// noAge marks a step of Pass that is due by state, not by age.
const noAge = -1

// Pass removes everything that is due now, batch by batch, and says what it
// removed. Tasks go first: a task that expires whole needs no separate pass
// over its log and artifacts.
func (j *Job) Pass(ctx context.Context) (Stats, error) {
	var st Stats
	c := j.cfg
	steps := []struct {
		n    *int
		keep time.Duration
		run  func(context.Context, time.Duration, int) (int, error)
		what string
	}{
		{&st.Tasks, c.Tasks, j.store.ExpireTasks, "tasks"},
		{&st.Logs, c.Logs, j.store.ExpireLogs, "logs"},
		{&st.Artifacts, c.Artifacts, j.store.ExpireArtifacts, "artifacts"},
		{&st.Tokens, UsedTokens, j.store.ExpireTokens, "enrollment tokens"},
		{&st.Commands, DeliveredCommand, j.store.ExpireCommands, "node commands"},
		{&st.Audit, c.Audit, j.store.ExpireAudit, "audit rows"},
		{&st.Tombstones, c.Audit, j.store.ExpireTombstones, "tombstones"},
		// An old secret value is kept only while an attempt pins it (its
		// node may need it again to redact), not for a time: the pins of
		// ended attempts go first, then the values nothing pins.
		{&st.SecretPins, noAge, j.store.ReleaseSecretPins, "secret pins"},
		{&st.SecretVersions, noAge, j.store.TrimSecretVersions, "old secret versions"},
	}
	for _, s := range steps {
		if s.keep == 0 {
			continue // logs kept as long as their tasks
		}
		for {
			start := time.Now()
			n, err := s.run(ctx, s.keep, c.Batch)
			took := time.Since(start)
			st.Statements++
			st.Longest = max(st.Longest, took)
			if err != nil {
				return st, fmt.Errorf("expire %s: %w", s.what, err)
			}
			*s.n += n
			if n < c.Batch {
				break
			}
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
		}
	}
	return st, nil
}

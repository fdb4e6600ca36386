package cron

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// Config tunes the leader's tick job. Zero values take the defaults.
type Config struct {
	// Every is how often the leader looks for due schedules (5 s). Cron's
	// finest grain is a minute, so a tick fires at most this late.
	Every time.Duration
	// Batch bounds the schedules fired per pass (100); a pass that fills
	// it goes again at once.
	Batch int
	// Now is the clock ticks are due by; time.Now when nil. Tests set it so
	// they never wait for a minute to pass.
	Now func() time.Time
	// Bounds are what a member's spec may ask for (tasks.Bounds), checked
	// at Create and, with the owner's role then, at every tick.
	Bounds tasks.Bounds
	// Defaults are what each tick's task, and run-now's, gets where the
	// schedule's spec says nothing (the coordinator's --queue-timeout).
	Defaults tasks.Defaults
}

// Deps are what the schedule service and the tick job work with.
type Deps struct {
	// Store holds the schedules, their ticks and the tasks they create.
	Store *store.Store
	// Log is where they log; slog.Default() when nil.
	Log *slog.Logger
}

// Ticker fires due schedules. It is a leader.Worker.
type Ticker struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
}

// NewTicker returns the tick job.
func NewTicker(cfg Config, deps Deps) *Ticker {
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	return &Ticker{cfg: cfg, store: deps.Store, log: log}
}

// Run fires due schedules at once and then every cfg.Every until ctx ends.
func (t *Ticker) Run(ctx context.Context) error {
	failing := false
	for {
		_, err := t.Tick(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			t.log.Warn("schedules: cannot fire due schedules; retrying", "err", err, "every", t.cfg.Every)
			failing = true
		case err == nil && failing:
			t.log.Info("schedules: firing due schedules again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(t.cfg.Every):
		}
	}
}

// Tick fires every schedule due by the clock now and returns the tasks it
// created. Each schedule fires its stored next_run_at, once, and its next
// tick becomes the first after now: after downtime the earliest missed tick
// is caught up and the others are not.
func (t *Ticker) Tick(ctx context.Context) ([]store.Task, error) {
	var created []store.Task
	for {
		now := t.cfg.Now()
		due, err := t.store.DueSchedules(ctx, now, t.cfg.Batch)
		if err != nil {
			return created, err
		}
		// One schedule that cannot fire must not hold up the others: its
		// error is kept, the rest of the batch fires, and the pass ends
		// there (it stays due, so the next pass tries it again).
		var first error
		for _, sc := range due {
			task, err := t.fire(ctx, sc, now)
			if err != nil {
				first = cmp.Or(first, err)
				continue
			}
			if task != nil {
				created = append(created, *task)
			}
		}
		if first != nil || len(due) < t.cfg.Batch {
			return created, first
		}
	}
}

func (t *Ticker) fire(ctx context.Context, sc store.Schedule, now time.Time) (*store.Task, error) {
	tick := *sc.NextRunAt
	sched, loc, err := Parse(sc.Cron, sc.Timezone)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: stored %w", sc.Name, err)
	}
	next := Next(sched, loc, now)
	if next.IsZero() {
		// Validated at create, so only a zone's rules changing could do
		// this; pause it rather than fire it every pass.
		_, err := t.store.SetSchedulePaused(ctx, sc.Name, true, nil)
		t.log.Warn("schedules: paused a schedule whose expression no longer matches any date", "schedule", sc.Name)
		return nil, err
	}
	if paused, err := t.pauseIfOwnerMayNot(ctx, sc, tick); paused || err != nil {
		return nil, err
	}
	if refused, err := t.refuseSecrets(ctx, sc, tick, next); refused || err != nil {
		return nil, err
	}
	fired, err := t.store.FireTick(ctx, store.Fire{ScheduleID: sc.ID, Tick: tick, Next: next,
		Task: t.cfg.Defaults.Row(sc.Spec, sc.CreatedBy)})
	if err != nil {
		return nil, fmt.Errorf("schedule %s: fire the tick of %s: %w", sc.Name, tick.Format(time.RFC3339), err)
	}
	switch {
	case fired.Skipped != "":
		t.log.Info("schedule tick skipped: the previous task still runs", "schedule", sc.Name, "tick", tick, "running", fired.Skipped)
	case fired.Task != nil:
		t.log.Info("schedule tick created a task", "schedule", sc.Name, "tick", tick, "task", fired.Task.ID, "by", sc.CreatedBy)
	}
	if fired.CancelPrevious != "" {
		// After the new task committed: a leader dying in between leaves the
		// previous task running, which errs on the side of not killing work.
		out, err := t.store.CancelTask(ctx, fired.CancelPrevious, fmt.Sprintf("schedule %s started its next tick (overlap cancel_previous)", sc.Name))
		if err != nil {
			t.log.Warn("schedules: cannot cancel the previous task (overlap cancel_previous)", "schedule", sc.Name, "task", fired.CancelPrevious, "err", err)
		} else {
			if out.NotifyNode != "" {
				_ = t.store.Notify(ctx, store.ChannelNodeCommands, out.NotifyNode)
			}
			_ = t.store.Notify(ctx, store.ChannelTaskEvents, out.Task.ID)
		}
	}
	return fired.Task, nil
}

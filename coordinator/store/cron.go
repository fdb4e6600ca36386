package store

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protojson"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrScheduleExists means a schedule of that name is stored already.
var ErrScheduleExists = errors.New("store: a schedule of that name exists")

// KeptTicks is how many of a schedule's latest ticks are kept; older ones
// are trimmed in the transaction that adds a tick, so the table stays the
// size of the schedules times this.
const KeptTicks = 100

// Schedule is a row of podium.schedules.
type Schedule struct {
	ID, Name, Cron, Timezone string
	Spec                     *podiumv1.TaskSpec
	Overlap                  string
	Paused                   bool
	// PausedReason says why the coordinator paused the schedule on its own
	// (its owner was removed, made a viewer, or no longer may ask for what
	// its spec asks); empty when a person paused it or it runs.
	PausedReason string
	CreatedBy    string
	CreatedAt    time.Time
	NextRunAt    *time.Time
	LastTaskID   *string
}

// ScheduleTick is a row of podium.schedule_ticks.
type ScheduleTick struct {
	Tick   time.Time
	TaskID *string
	Note   string
}

const scheduleColumns = `id, name, cron, timezone, spec, overlap, paused, paused_reason, created_by, created_at, next_run_at, last_task_id`

func scanSchedule(r pgx.Row) (Schedule, error) {
	var (
		sc   Schedule
		spec []byte
	)
	err := r.Scan(&sc.ID, &sc.Name, &sc.Cron, &sc.Timezone, &spec, &sc.Overlap, &sc.Paused, &sc.PausedReason, &sc.CreatedBy,
		&sc.CreatedAt, &sc.NextRunAt, &sc.LastTaskID)
	if errors.Is(err, pgx.ErrNoRows) {
		return sc, ErrNotFound
	}
	if err != nil {
		return sc, err
	}
	sc.Spec = &podiumv1.TaskSpec{}
	if err := protojson.Unmarshal(spec, sc.Spec); err != nil {
		return sc, fmt.Errorf("schedule %s: decode the stored spec: %w", sc.Name, err)
	}
	return sc, nil
}

// CreateSchedule stores sc (already valid) with its first tick in
// sc.NextRunAt. A name taken already is ErrScheduleExists.
func (s *Store) CreateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	js, err := protojson.Marshal(sc.Spec)
	if err != nil {
		return sc, fmt.Errorf("schedule %s: encode the spec: %w", sc.Name, err)
	}
	var out Schedule
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = scanSchedule(tx.QueryRow(ctx, `insert into podium.schedules
			(id, name, cron, timezone, spec, overlap, created_by, next_run_at)
			values ($1, $2, $3, $4, $5, $6, $7, $8) returning `+scheduleColumns,
			sc.ID, sc.Name, sc.Cron, sc.Timezone, js, sc.Overlap, sc.CreatedBy, sc.NextRunAt))
		return err
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" {
		return out, ErrScheduleExists
	}
	return out, err
}

// GetSchedule reads the schedule called name; ErrNotFound if there is none.
func (s *Store) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	return scanSchedule(s.pool.QueryRow(ctx, "select "+scheduleColumns+" from podium.schedules where name = $1", name))
}

// ListSchedules lists the schedules by name: createdBy's, or all when it is "".
func (s *Store) ListSchedules(ctx context.Context, createdBy string) ([]Schedule, error) {
	return s.querySchedules(ctx, "select "+scheduleColumns+
		" from podium.schedules where $1 = '' or created_by = $1 order by name", createdBy)
}

// ScheduleTicks lists a schedule's latest ticks, newest first.
func (s *Store) ScheduleTicks(ctx context.Context, scheduleID string, limit int) ([]ScheduleTick, error) {
	rows, err := s.pool.Query(ctx, `select tick, task_id, note from podium.schedule_ticks
		where schedule_id = $1 order by tick desc limit $2`, scheduleID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ScheduleTick
	for rows.Next() {
		var t ScheduleTick
		if err := rows.Scan(&t.Tick, &t.TaskID, &t.Note); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// SetSchedulePaused pauses a schedule (next nil: no tick fires) or resumes
// it from next. Resuming clears a reason the coordinator gave for pausing
// it (the caller checked that the owner may submit again); pausing keeps it,
// so a person's pause never hides why the schedule may not run. ErrNotFound
// if there is none called name.
func (s *Store) SetSchedulePaused(ctx context.Context, name string, paused bool, next *time.Time) (Schedule, error) {
	var out Schedule
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = scanSchedule(tx.QueryRow(ctx, `update podium.schedules set paused = $2, next_run_at = $3,
			paused_reason = case when $2 then paused_reason else '' end
			where name = $1 returning `+scheduleColumns, name, paused, next))
		return err
	})
	return out, err
}

// MaxPausedReasonBytes bounds the reason the coordinator stores for pausing
// a schedule; the reasons are the coordinator's own sentences, with names in
// them that are bounded already, so this only guards against a bug.
const MaxPausedReasonBytes = 1024

// PauseScheduleFor pauses the schedule with id on the coordinator's own
// account, saying why (a tick found its owner may not submit what it asks),
// unless it has moved on meanwhile: tick is the next_run_at the caller saw,
// and a schedule paused, resumed or fired since is left alone. It reports
// whether it paused it. It is not a person's change, so it writes no audit
// row; the ticker logs it.
func (s *Store) PauseScheduleFor(ctx context.Context, id string, tick time.Time, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `update podium.schedules set paused = true, next_run_at = null, paused_reason = $3
		where id = $1 and not paused and next_run_at = $2`, id, tick, clipReason(reason))
	return err == nil && tag.RowsAffected() == 1, err
}

// pauseOwnedSchedules pauses every schedule createdBy owns, in tx (the
// transaction removing or demoting the owner), saying why. Ones a person
// paused already get the reason too: resuming them needs the owner's role
// back first.
func pauseOwnedSchedules(ctx context.Context, tx pgx.Tx, createdBy, reason string) error {
	_, err := tx.Exec(ctx, `update podium.schedules set paused = true, next_run_at = null, paused_reason = $2
		where created_by = $1`, createdBy, clipReason(reason))
	return err
}

func clipReason(r string) string {
	if len(r) <= MaxPausedReasonBytes {
		return r
	}
	cut := MaxPausedReasonBytes
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut]
}

// RemoveSchedule removes a schedule and its ticks; its tasks stay.
// ErrNotFound if there is none called name.
func (s *Store) RemoveSchedule(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "delete from podium.schedules where name = $1", name)
		if err == nil && tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return err
	})
}

// DueSchedules lists up to limit unpaused schedules whose next tick is at
// or before now, earliest first.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error) {
	return s.querySchedules(ctx, "select "+scheduleColumns+
		" from podium.schedules where next_run_at <= $1 and not paused order by next_run_at limit $2", now, limit)
}

// querySchedules runs a query of scheduleColumns and scans its rows.
func (s *Store) querySchedules(ctx context.Context, sql string, args ...any) ([]Schedule, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, rows.Err()
}

// Fire is one tick of a schedule to store.
type Fire struct {
	ScheduleID string
	// Tick names the tick: the stored next_run_at it fires, or the moment
	// of a run-now.
	Tick time.Time
	// RunNow fires regardless of next_run_at and the overlap mode, and
	// leaves next_run_at alone.
	RunNow bool
	// Next is the tick after this one, stored as next_run_at (not RunNow).
	Next time.Time
	// Task is the task to create; its RequestedBy is the schedule's creator.
	Task NewTask
}

// Fired says what a Fire did.
type Fired struct {
	// Task is the task created; nil when the tick was handled already (by
	// another replica), the schedule is gone, paused or has moved on, or
	// overlap skip skipped it.
	Task *Task
	// Skipped is the still-running task a skip tick left alone.
	Skipped string
	// CancelPrevious is the still-running task cancel_previous should
	// cancel now that its successor is stored.
	CancelPrevious string
}

// FireTick handles one tick in one transaction: it locks the schedule row,
// checks the tick is still the one due, applies the overlap mode against the
// last tick's task, and inserts the tick row and the task together. The
// tick row's primary key makes a tick create its task at most once even if
// two replicas both think they lead: the second insert finds the row and
// the whole transaction is rolled back, task and all.
func (s *Store) FireTick(ctx context.Context, f Fire) (Fired, error) {
	var out Fired
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = Fired{}
		sc, err := scanSchedule(tx.QueryRow(ctx, "select "+scheduleColumns+" from podium.schedules where id = $1 for update", f.ScheduleID))
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !f.RunNow && (sc.Paused || sc.NextRunAt == nil || !sc.NextRunAt.Equal(f.Tick)) {
			return nil // fired by another replica, or paused meanwhile
		}
		var prevState string
		if sc.LastTaskID != nil {
			err := tx.QueryRow(ctx, "select state from podium.tasks where id = $1", *sc.LastTaskID).Scan(&prevState)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		running := prevState != "" && !Terminal(prevState)
		if !f.RunNow && running && sc.Overlap == "skip" {
			note := fmt.Sprintf("skipped: %s still %s (overlap skip)", *sc.LastTaskID, prevState)
			tag, err := tx.Exec(ctx, `insert into podium.schedule_ticks (schedule_id, tick, note) values ($1, $2, $3)
				on conflict do nothing`, sc.ID, f.Tick, note)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			out.Skipped = *sc.LastTaskID
			return advance(ctx, tx, sc.ID, f, nil)
		}
		note := ""
		if !f.RunNow && running && sc.Overlap == "cancel_previous" {
			out.CancelPrevious = *sc.LastTaskID
			note = "cancelled " + *sc.LastTaskID + " (overlap cancel_previous)"
		} else if f.RunNow {
			note = "run now"
		}
		tag, err := tx.Exec(ctx, `insert into podium.schedule_ticks (schedule_id, tick, task_id, note) values ($1, $2, $3, $4)
			on conflict do nothing`, sc.ID, f.Tick, f.Task.ID, note)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			out.CancelPrevious = ""
			return nil
		}
		ts, err := insertTaskRows(ctx, tx, []NewTask{f.Task})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "update podium.tasks set schedule_id = $2 where id = $1", f.Task.ID, sc.ID); err != nil {
			return err
		}
		out.Task = &ts[0]
		return advance(ctx, tx, sc.ID, f, &f.Task.ID)
	})
	if err != nil {
		return Fired{}, err
	}
	return out, nil
}

// advance stores the schedule's next tick and last task and trims its
// ticks to the latest KeptTicks.
func advance(ctx context.Context, tx pgx.Tx, id string, f Fire, task *string) error {
	if !f.RunNow {
		if _, err := tx.Exec(ctx, "update podium.schedules set next_run_at = $2 where id = $1", id, f.Next); err != nil {
			return err
		}
	}
	if task != nil {
		if _, err := tx.Exec(ctx, "update podium.schedules set last_task_id = $2 where id = $1", id, *task); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `delete from podium.schedule_ticks where schedule_id = $1 and tick <
		(select tick from podium.schedule_ticks where schedule_id = $1 order by tick desc offset $2 limit 1)`, id, KeptTicks-1)
	return err
}

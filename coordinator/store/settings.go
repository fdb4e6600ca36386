package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Thresholds are the node-health and deadline thresholds every replica must
// agree on, stored in one row (podium.settings). In an argument, a zero field
// means "not given".
type Thresholds struct {
	UnreachableAfter time.Duration
	OfflineAfter     time.Duration
	AckDeadline      time.Duration
	WriteOffAfter    time.Duration
}

// Or is t with its zero fields taken from d.
func (t Thresholds) Or(d Thresholds) Thresholds {
	pick := func(a, b time.Duration) time.Duration {
		if a != 0 {
			return a
		}
		return b
	}
	return Thresholds{pick(t.UnreachableAfter, d.UnreachableAfter), pick(t.OfflineAfter, d.OfflineAfter),
		pick(t.AckDeadline, d.AckDeadline), pick(t.WriteOffAfter, d.WriteOffAfter)}
}

// StoredThresholds is the settings row: the values and who wrote them last.
type StoredThresholds struct {
	Thresholds
	SetBy     string
	UpdatedAt time.Time
}

const thresholdColumns = `unreachable_after_ms, offline_after_ms, ack_deadline_ms, write_off_after_ms, set_by, updated_at`

func scanThresholds(row pgx.Row) (StoredThresholds, error) {
	var st StoredThresholds
	var u, o, a, w int64
	err := row.Scan(&u, &o, &a, &w, &st.SetBy, &st.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	st.Thresholds = Thresholds{time.Duration(u) * time.Millisecond, time.Duration(o) * time.Millisecond,
		time.Duration(a) * time.Millisecond, time.Duration(w) * time.Millisecond}
	return st, err
}

// Thresholds reads the stored thresholds; ErrNotFound before any replica
// settled them.
func (s *Store) Thresholds(ctx context.Context) (StoredThresholds, error) {
	return scanThresholds(s.pool.QueryRow(ctx, `select `+thresholdColumns+` from podium.settings where id = 1`))
}

// SettleThresholds is what a starting replica does with its thresholds, in
// one transaction: the row is created from defaults if there is none, the
// fields of given that are not zero (the replica's explicit flags) replace
// the stored ones, check is asked about the result (and the row it came from) (an error leaves the row
// as it was and is returned), and the row is written if it changed. It
// returns the row as it was before and as it is now.
func (s *Store) SettleThresholds(ctx context.Context, replica string, given, defaults Thresholds,
	check func(before StoredThresholds, merged Thresholds) error) (before, after StoredThresholds, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		ms := func(t Thresholds) []any {
			return []any{t.UnreachableAfter.Milliseconds(), t.OfflineAfter.Milliseconds(),
				t.AckDeadline.Milliseconds(), t.WriteOffAfter.Milliseconds()}
		}
		if _, err := tx.Exec(ctx, `insert into podium.settings (unreachable_after_ms, offline_after_ms, ack_deadline_ms,
				write_off_after_ms, set_by) values ($1, $2, $3, $4, $5) on conflict (id) do nothing`,
			append(ms(defaults), replica)...); err != nil {
			return err
		}
		var err error
		if before, err = scanThresholds(tx.QueryRow(ctx, `select `+thresholdColumns+` from podium.settings where id = 1 for update`)); err != nil {
			return err
		}
		merged := given.Or(before.Thresholds)
		if err := check(before, merged); err != nil {
			return err
		}
		after = before
		if merged == before.Thresholds {
			return nil
		}
		after, err = scanThresholds(tx.QueryRow(ctx, `update podium.settings set unreachable_after_ms = $1,
				offline_after_ms = $2, ack_deadline_ms = $3, write_off_after_ms = $4, set_by = $5, updated_at = now()
			where id = 1 returning `+thresholdColumns, append(ms(merged), replica)...))
		return err
	})
	return before, after, err
}

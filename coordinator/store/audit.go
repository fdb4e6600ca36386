package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit is the audit row of one call that changes something. The server
// puts it in the call's context (WithAudit); the store writes it, with
// result "ok", in the transaction that makes the change (inTx, or the submit
// statement for a task), once. A call that failed, or changed nothing the
// store knew to record, gets its row from WriteAudit afterwards.
type Audit struct {
	Who, Role, Transport, Action, Target string
	written                              atomic.Bool
}

// Written reports whether the row was written with the change.
func (a *Audit) Written() bool { return a.written.Load() }

type auditKey struct{}

// WithAudit returns ctx carrying a, whose row the next transaction that
// commits a change writes.
func WithAudit(ctx context.Context, a *Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

// AuditFrom is the audit row ctx carries, nil if none.
func AuditFrom(ctx context.Context) *Audit {
	a, _ := ctx.Value(auditKey{}).(*Audit)
	return a
}

const insertAudit = `insert into podium.audit_log (who, role, transport, action, target, result)
	values ($1, $2, $3, $4, $5, $6)`

// auditInTx writes ctx's audit row in tx, unless it was written already.
func auditInTx(ctx context.Context, tx pgx.Tx) error {
	a := AuditFrom(ctx)
	if a == nil || a.written.Load() {
		return nil
	}
	if _, err := tx.Exec(ctx, insertAudit, a.Who, a.Role, a.Transport, a.Action, a.Target, "ok"); err != nil {
		return err
	}
	a.written.Store(true)
	return nil
}

// WriteAudit writes a's row with result on its own: for a call that was
// refused or failed (result is the error's code), or that succeeded without
// its row being written with the change.
func (s *Store) WriteAudit(ctx context.Context, a *Audit, result string) error {
	_, err := s.pool.Exec(ctx, insertAudit, a.Who, a.Role, a.Transport, a.Action, a.Target, result)
	if err == nil && result == "ok" {
		a.written.Store(true)
	}
	return err
}

// AuditRow is a row of podium.audit_log.
type AuditRow struct {
	ID                                           int64
	At                                           time.Time
	Who, Role, Transport, Action, Target, Result string
}

// ListAudit lists audit rows newest first: since (zero: all), only who's
// ("" for everyone's), at most limit.
func (s *Store) ListAudit(ctx context.Context, since time.Time, who string, limit int) ([]AuditRow, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `select id, at, who, role, transport, action, target, result from podium.audit_log
		where at >= $1 and ($2 = '' or who = $2) order by at desc, id desc limit $3`, since, who, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRow, error) {
		var a AuditRow
		return a, r.Scan(&a.ID, &a.At, &a.Who, &a.Role, &a.Transport, &a.Action, &a.Target, &a.Result)
	})
}

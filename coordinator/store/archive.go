package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A terminal task's log is archived by a leader-only job
// (coordinator/logarchive): the events up to LogArchive.Seq leave
// podium.task_events for one compressed archive, in the object store or, with
// none configured, in podium.task_log_archives. The contract is
// schema/migrations/0015_log_archive.sql: the archive and the rows never both
// hold an event, and there is no moment when neither does, because the rows
// are deleted in the transaction that records the archive (RecordArchive).

// archiveColumns are a task's archive columns, in LogArchive's order.
const archiveColumns = `log_archived_seq, log_archive_key, log_archive_size, log_archive_sha256, log_archived_at`

// LogArchive is where a task's archived log is. Seq is 0 when the task's log
// was never archived.
type LogArchive struct {
	// Seq is the last position of the log the archive holds.
	Seq int64
	// Key is the object's key; nil when the archive is a row of
	// podium.task_log_archives (no object store).
	Key    *string
	Size   *int64
	SHA256 *string
	// At is when the archive was written; nil again once something was
	// appended to the log since (the next pass folds it in), and nil before
	// the first archive.
	At *time.Time
}

// Archived reports whether part of the log is in an archive.
func (a LogArchive) Archived() bool { return a.Seq > 0 && a.Size != nil && a.SHA256 != nil }

// InDatabase reports whether the archive is a row rather than an object.
func (a LogArchive) InDatabase() bool { return a.Archived() && a.Key == nil }

// Proto renders the archive for the API; nil when there is none.
func (a LogArchive) Proto() *podiumv1.LogArchive {
	if !a.Archived() {
		return nil
	}
	p := &podiumv1.LogArchive{Size: *a.Size, Sha256: *a.SHA256, ArchivedSeq: uint64(a.Seq), InDatabase: a.Key == nil}
	if a.Key != nil {
		p.Key = *a.Key
	}
	if a.At != nil {
		p.ArchivedAt = timestamppb.New(*a.At)
	}
	return p
}

// ArchiveCandidate is a task whose log is due to be archived, as it was when
// chosen: the pass archives the log up to LastSeq, and RecordArchive records
// it only if the task is still so.
type ArchiveCandidate struct {
	ID      string
	LastSeq int64
	Archive LogArchive
}

// ArchiveCandidates chooses up to limit terminal tasks, ended more than
// olderThan ago, whose log is not (or no longer wholly) archived, oldest
// first. It skips the rows another transaction holds (a late note being
// written, another pass) and holds none itself: the pass that follows reads
// and writes outside any transaction, and RecordArchive checks that nothing
// moved in between.
func (s *Store) ArchiveCandidates(ctx context.Context, olderThan time.Duration, limit int) ([]ArchiveCandidate, error) {
	var out []ArchiveCandidate
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select id, last_seq, `+archiveColumns+` from podium.tasks
			where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_archived_at is null
				and finished_at < now() - $1 * interval '1 microsecond'
			order by finished_at limit $2 for update skip locked`, olderThan.Microseconds(), limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ArchiveCandidate, error) {
			var c ArchiveCandidate
			err := r.Scan(&c.ID, &c.LastSeq, &c.Archive.Seq, &c.Archive.Key, &c.Archive.Size, &c.Archive.SHA256, &c.Archive.At)
			return c, err
		})
		return err
	})
	return out, err
}

// ArchiveBacklog counts the terminal tasks whose log is not wholly archived
// (the archive job's queue, read from its partial index).
func (s *Store) ArchiveBacklog(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `select count(*) from podium.tasks
		where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_archived_at is null`).Scan(&n)
	return n, err
}

// ArchiveRecord is a written archive to record.
type ArchiveRecord struct {
	// Candidate is the task as the pass read it; Candidate.LastSeq is the
	// archive's last position.
	Candidate ArchiveCandidate
	// Key is the object written; empty when Data is the archive itself (no
	// object store).
	Key  string
	Data []byte
	// Size and SHA256 (hex) are the archive's, compressed.
	Size   int64
	SHA256 string
}

// RecordArchive records a written archive, in one transaction: the task's
// archive columns, the deletion of its rows up to the archive's last
// position, the archive's row (no object store), and the queueing of the
// archive it replaces in podium.object_deletions. It does so only if the
// task's log and archive are still as the pass read them, and reports
// whether it did: otherwise (something was appended since, another pass
// recorded first, the task is gone) it records nothing and queues the object
// just written for deletion unless the task names it, and the next pass
// starts again from what is then stored.
func (s *Store) RecordArchive(ctx context.Context, r ArchiveRecord) (bool, error) {
	c := r.Candidate
	recorded := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		recorded = false
		var last, seq int64
		var key *string
		var expired bool
		err := tx.QueryRow(ctx, `select last_seq, log_archived_seq, log_archive_key, log_expired_at is not null
			from podium.tasks where id = $1 for update`, c.ID).Scan(&last, &seq, &key, &expired)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// A log that retention removed meanwhile (--retain-logs) stays
		// removed: the archive just written goes too.
		if errors.Is(err, pgx.ErrNoRows) || expired || last != c.LastSeq || seq != c.Archive.Seq || !sameKey(key, c.Archive.Key) {
			// A second pass that recorded the same log wrote the same key:
			// that object is the task's now, and must not be deleted.
			if r.Key != "" && (key == nil || *key != r.Key) {
				_, err := tx.Exec(ctx, `insert into podium.object_deletions (key) values ($1) on conflict do nothing`, r.Key)
				return err
			}
			return nil
		}
		var newKey *string
		if r.Key != "" {
			newKey = &r.Key
		}
		b := &pgx.Batch{}
		b.Queue(`update podium.tasks set log_archived_seq = $2, log_archive_key = $3, log_archive_size = $4,
				log_archive_sha256 = $5, log_archived_at = now() where id = $1`, c.ID, c.LastSeq, newKey, r.Size, r.SHA256)
		b.Queue(`delete from podium.task_events where task_id = $1 and seq <= $2`, c.ID, c.LastSeq)
		if newKey == nil {
			b.Queue(`insert into podium.task_log_archives (task_id, data) values ($1, $2)
				on conflict (task_id) do update set data = excluded.data`, c.ID, r.Data)
		} else {
			b.Queue(`delete from podium.task_log_archives where task_id = $1`, c.ID)
			// The key may have been queued by a pass that wrote it and could
			// not record it; it names an archive again.
			b.Queue(`delete from podium.object_deletions where key = $1`, r.Key)
		}
		if key != nil && !sameKey(key, newKey) {
			b.Queue(`insert into podium.object_deletions (key) values ($1) on conflict do nothing`, *key)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		recorded = true
		return nil
	})
	return recorded, err
}

// MarkArchived records that a candidate's log has nothing past its archive
// (a task that ended with no events, or whose archive already holds them
// all), if it is still as read, so that it leaves the job's queue.
func (s *Store) MarkArchived(ctx context.Context, c ArchiveCandidate) error {
	_, err := s.pool.Exec(ctx, `update podium.tasks set log_archived_at = now()
		where id = $1 and last_seq = $2 and log_archived_seq = $3 and log_archived_at is null`, c.ID, c.LastSeq, c.Archive.Seq)
	return err
}

func sameKey(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// LogArchiveData returns a task's archive kept in Postgres (no object store),
// compressed. It is ErrNotFound when there is none (the task's archive was
// replaced or the task is gone since it was read: read the task again).
func (s *Store) LogArchiveData(ctx context.Context, taskID string) ([]byte, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `select data from podium.task_log_archives where task_id = $1`, taskID).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return data, err
}

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
// are deleted in the transaction that records the archive (RecordArchives).

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
// chosen: the pass archives the log up to LastSeq, and RecordArchives records
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
// and writes outside any transaction, and RecordArchives checks that nothing
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

// RecordArchive records one written archive (RecordArchives of one) and
// reports whether it did.
func (s *Store) RecordArchive(ctx context.Context, r ArchiveRecord) (bool, error) {
	ok, err := s.RecordArchives(ctx, []ArchiveRecord{r})
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// RecordArchives records written archives, of distinct tasks, in one
// transaction: per task, its archive columns, the deletion of its rows up to
// the archive's last position, the archive's row (no object store), and the
// queueing of the archive it replaces in podium.object_deletions. It records
// a task's archive only if the task's log and archive are still as the pass
// read them, and reports, in rs' order, which it recorded: otherwise
// (something was appended since, another pass recorded first, retention
// removed the log, the task is gone) it records nothing of that task and
// queues the object just written for deletion unless the task names it, and
// the next pass starts again from what is then stored. One transaction for a
// whole pass, its statements each over all the pass's tasks, because one per
// task (a lock, four statements and a commit's flush each) made Postgres the
// archive job's bottleneck.
func (s *Store) RecordArchives(ctx context.Context, rs []ArchiveRecord) ([]bool, error) {
	recorded := make([]bool, len(rs))
	if len(rs) == 0 {
		return recorded, nil
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.Candidate.ID
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		clear(recorded)
		type current struct {
			last, seq int64
			key       *string
			expired   bool
		}
		// Locked in id order, as every statement that locks several tasks
		// does, so that two of them cannot deadlock.
		rows, err := tx.Query(ctx, `select id, last_seq, log_archived_seq, log_archive_key, log_expired_at is not null
			from podium.tasks where id = any($1) order by id for update`, ids)
		if err != nil {
			return err
		}
		now := map[string]current{}
		var id string
		var c current
		if _, err := pgx.ForEachRow(rows, []any{&id, &c.last, &c.seq, &c.key, &c.expired}, func() error {
			now[id] = c
			return nil
		}); err != nil {
			return err
		}
		var (
			updIDs, updSHAs, updKeys []string
			updSeqs, updSizes        []int64
			updKeySet                []bool
			rowIDs                   []string
			rowData                  [][]byte
			objIDs, unqueue, queue   []string
		)
		for i, r := range rs {
			cand := r.Candidate
			cur, ok := now[cand.ID]
			// A log that retention removed meanwhile (--retain-logs) stays
			// removed: the archive just written goes too.
			if !ok || cur.expired || cur.last != cand.LastSeq || cur.seq != cand.Archive.Seq || !sameKey(cur.key, cand.Archive.Key) {
				// A second pass that recorded the same log wrote the same
				// key: that object is the task's now, and must not be
				// deleted.
				if r.Key != "" && (cur.key == nil || *cur.key != r.Key) {
					queue = append(queue, r.Key)
				}
				continue
			}
			recorded[i] = true
			var newKey *string
			if r.Key != "" {
				newKey = &r.Key
			}
			updIDs, updSeqs, updSizes, updSHAs = append(updIDs, cand.ID), append(updSeqs, cand.LastSeq), append(updSizes, r.Size), append(updSHAs, r.SHA256)
			updKeys, updKeySet = append(updKeys, r.Key), append(updKeySet, newKey != nil)
			if newKey == nil {
				rowIDs, rowData = append(rowIDs, cand.ID), append(rowData, r.Data)
			} else {
				objIDs = append(objIDs, cand.ID)
				// The key may have been queued by a pass that wrote it and
				// could not record it; it names an archive again.
				unqueue = append(unqueue, r.Key)
			}
			if cur.key != nil && !sameKey(cur.key, newKey) {
				queue = append(queue, *cur.key)
			}
		}
		b := &pgx.Batch{}
		if len(updIDs) > 0 {
			b.Queue(`update podium.tasks t set log_archived_seq = u.seq, log_archive_key = case when u.has_key then u.key end,
					log_archive_size = u.size, log_archive_sha256 = u.sha, log_archived_at = now()
				from unnest($1::text[], $2::bigint[], $3::text[], $4::bool[], $5::bigint[], $6::text[]) u(id, seq, key, has_key, size, sha)
				where t.id = u.id`, updIDs, updSeqs, updKeys, updKeySet, updSizes, updSHAs)
			b.Queue(deleteArchivedEventsSQL, updIDs, updSeqs)
		}
		if len(rowIDs) > 0 {
			b.Queue(`insert into podium.task_log_archives (task_id, data) select * from unnest($1::text[], $2::bytea[])
				on conflict (task_id) do update set data = excluded.data`, rowIDs, rowData)
		}
		if len(objIDs) > 0 {
			b.Queue(`delete from podium.task_log_archives where task_id = any($1)`, objIDs)
		}
		if len(unqueue) > 0 {
			b.Queue(`delete from podium.object_deletions where key = any($1)`, unqueue)
		}
		if len(queue) > 0 {
			b.Queue(`insert into podium.object_deletions (key) select distinct unnest($1::text[]) on conflict do nothing`, queue)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, err
	}
	return recorded, nil
}

// deleteArchivedEventsSQL deletes the rows of each task $1[i] up to position
// $2[i]: a range of task_events' primary key per task.
const deleteArchivedEventsSQL = `delete from podium.task_events e
	using unnest($1::text[], $2::bigint[]) u(id, last)
	where e.task_id = u.id and e.seq <= u.last`

// ArchiveEvents calls fn for each event of the candidates' logs past their
// archive and up to their LastSeq, by task id then position, from one query
// whose rows are read as fn takes them: a pass reads all its tasks' logs in
// one round trip, and holds one row at a time whatever their size. The
// rows up to LastSeq were all committed when LastSeq was (a task's rows and
// its last_seq are written in one transaction); rows past it (a note since)
// are left for the next pass. The events' TaskId is left empty: an archive
// does not hold it, and fn is given it.
func (s *Store) ArchiveEvents(ctx context.Context, cs []ArchiveCandidate, fn func(taskID string, e StoredEvent) error) error {
	if len(cs) == 0 {
		return nil
	}
	ids := make([]string, len(cs))
	after := make([]int64, len(cs))
	last := make([]int64, len(cs))
	for i, c := range cs {
		ids[i], after[i], last[i] = c.ID, c.Archive.Seq, c.LastSeq
	}
	rows, err := s.pool.Query(ctx, `select `+storedEventColumns+`, e.task_id
		from unnest($1::text[], $2::bigint[], $3::bigint[]) c(id, after, last)
			join podium.task_events e on e.task_id = c.id and e.seq > c.after and e.seq <= c.last
		order by e.task_id, e.seq`, ids, after, last)
	if err != nil {
		return err
	}
	defer rows.Close()
	var taskID string
	for rows.Next() {
		se, err := scanEvent(rows, "", &taskID)
		if err != nil {
			return err
		}
		if err := fn(taskID, se); err != nil {
			return err
		}
	}
	return rows.Err()
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

// LogArchivePage returns at most n bytes of a task's archive kept in
// Postgres, from byte off (0 first): one window of the value, so that a
// reader holds one page of an archive of any size (package logarchive reads
// it page by page). Every page is of the archive whose SHA-256 is sha: once
// the task records another (it was archived again) or none (it is gone, or
// its archive moved to the object store), it is ErrNotFound, so pages of two
// archives never mix. Past the end it is empty.
func (s *Store) LogArchivePage(ctx context.Context, taskID, sha string, off int64, n int) ([]byte, error) {
	var page []byte
	err := s.pool.QueryRow(ctx, `select substring(a.data from $3 for $4) from podium.task_log_archives a
		join podium.tasks t on t.id = a.task_id
		where a.task_id = $1 and t.log_archive_sha256 = $2 and t.log_archive_key is null`,
		taskID, sha, off+1, n).Scan(&page)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return page, err
}

package main

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/bench/benchkit"
)

// sample is one look at the database (and the object store) during a phase.
type sample struct {
	At       time.Duration // since the phase's first Submit
	Finished int64         // tasks the fleet saw acknowledged terminal
	DBBytes  int64         // pg_database_size
	Tasks    int64         // rows in podium.tasks
	Events   int64         // rows in podium.task_events
	// Archived is rows of podium.tasks whose log is archived now (rows
	// retention deleted are no longer counted); Backlog is terminal tasks
	// whose log is not (the archive job's queue, by its own index), and
	// BacklogAge how long the oldest of them has been finished.
	Archived, Backlog int64
	BacklogAge        time.Duration
	// EventsBytes, TasksBytes and ArchiveBytes are the tables' total sizes
	// (indexes and TOAST included); ArchiveBytes is task_log_archives, the
	// archives kept in the database when no object store is configured.
	EventsBytes, TasksBytes, ArchiveBytes int64
	// StoreObjects and StoreBytes are the objects in the bucket (-1: no
	// object store).
	StoreObjects, StoreBytes int64
	CoordRSS                 int64 // bytes
	CoordCPU, PGCPU          float64
	Took                     time.Duration // how long the sample's queries took
}

// sampleQuery reads everything in one statement: one snapshot, one round
// trip. Counting rows is exact (count(*)), which costs a scan of what is
// there: the point of the benchmark is that this stays small.
const sampleQuery = `select pg_database_size(current_database()),
	(select count(*) from podium.tasks),
	(select count(*) from podium.task_events),
	(select count(*) from podium.tasks where log_archived_at is not null or log_archive_key is not null),
	b.n, coalesce(extract(epoch from now() - b.oldest), 0)::float8,
	pg_total_relation_size('podium.task_events'), pg_total_relation_size('podium.tasks'),
	pg_total_relation_size('podium.task_log_archives')
from (select count(*) as n, min(finished_at) as oldest from podium.tasks
	where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_archived_at is null) b`

// sampler samples every interval until stopped; it owns its connection.
type sampler struct {
	conn     *pgx.Conn
	began    time.Time
	storeDir string // the bucket's directory in versitygw's posix root; "" if none
	coordPID int
	pgPID    int
	fleet    *fleet
	every    time.Duration

	// mu makes take one at a time: the run's loop and the phase's end both
	// take samples, and a pgx.Conn serves one caller.
	mu        sync.Mutex
	lastAt    time.Time
	lastCoord time.Duration
	lastPG    benchkit.CPUByPID
}

func (s *sampler) take(ctx context.Context) (sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	x := sample{At: now.Sub(s.began), Finished: s.fleet.finished.Load(), StoreObjects: -1, StoreBytes: -1}
	var ageSecs float64
	err := s.conn.QueryRow(ctx, sampleQuery).Scan(&x.DBBytes, &x.Tasks, &x.Events, &x.Archived, &x.Backlog, &ageSecs,
		&x.EventsBytes, &x.TasksBytes, &x.ArchiveBytes)
	if err != nil {
		return x, err
	}
	x.BacklogAge = time.Duration(ageSecs * float64(time.Second))
	x.Took = time.Since(now)
	if s.storeDir != "" {
		x.StoreObjects, x.StoreBytes = 0, 0
		_ = filepath.WalkDir(s.storeDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					x.StoreObjects++
					x.StoreBytes += fi.Size()
				}
			}
			return nil
		})
	}
	if m, err := benchkit.ProcMem(s.coordPID); err == nil {
		x.CoordRSS = m.RSSKiB << 10
	}
	coord, _ := benchkit.ProcCPU(s.coordPID)
	pg := benchkit.TreeCPU(s.pgPID)
	if !s.lastAt.IsZero() {
		secs := now.Sub(s.lastAt).Seconds()
		x.CoordCPU = 100 * (coord - s.lastCoord).Seconds() / secs
		x.PGCPU = 100 * pg.Since(s.lastPG).Seconds() / secs
	}
	s.lastAt, s.lastCoord, s.lastPG = now, coord, pg
	return x, nil
}

// run samples until ctx ends, handing each sample to got; a failed sample is
// reported and skipped (the database is busy, not gone).
func (s *sampler) run(ctx context.Context, got func(sample), failed func(error)) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		x, err := s.take(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed(err)
		} else {
			got(x)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

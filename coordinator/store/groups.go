package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group is a spec's group as fair share sees it: the weight an admin gave it
// (1 when none did) and how many of its tasks hold a slot and wait.
type Group struct {
	Name string
	// Weight is the group's share of free slots against other sharers of
	// equal priority: 1 by default, at most MaxWeight, as a user's.
	Weight int32
	// SetAt and SetBy say when and by whom the weight was set; zero and ""
	// for a group that weighs the default.
	SetAt time.Time
	SetBy string
	// Running and Queued count the group's tasks holding a slot (scheduled,
	// provisioning, running) and waiting, now.
	Running, Queued int64
}

// MaxGroupWeights bounds how many groups carry a weight of their own. Only
// an admin adds a row, and a weight set back to 1 removes it, so the bound is
// far above any real team's use; it keeps a runaway script from growing the
// table without end (every table has a bound and an owner that trims it).
const MaxGroupWeights = 10000

// ErrTooMany means a bound on the number of rows was reached.
var ErrTooMany = errors.New("too many")

// SetGroupWeight gives a spec's group its fair-share weight, from the
// leader's next pass on. Weight 1, the default, removes the group's row. The
// caller checks the bounds (1..MaxWeight) and the name; the table's checks
// refuse anything else. The audit row the context carries is written in the
// same transaction. It returns the group as it now is, with its counts.
func (s *Store) SetGroupWeight(ctx context.Context, name string, weight int32, by string) (Group, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if weight == 1 {
			_, err := tx.Exec(ctx, `delete from podium.group_weights where name = $1`, name)
			return err
		}
		// The bound is checked under a lock on the table so that two admins
		// adding the last groups at once cannot both pass it; updating a
		// group already there never needs the room.
		if _, err := tx.Exec(ctx, `lock table podium.group_weights in share row exclusive mode`); err != nil {
			return err
		}
		var full bool
		if err := tx.QueryRow(ctx, `select count(*) >= $2 and not exists (select 1 from podium.group_weights where name = $1)
			from podium.group_weights`, name, MaxGroupWeights).Scan(&full); err != nil {
			return err
		}
		if full {
			return ErrTooMany
		}
		_, err := tx.Exec(ctx, `insert into podium.group_weights (name, weight, set_by) values ($1, $2, $3)
			on conflict (name) do update set weight = excluded.weight, set_at = now(), set_by = excluded.set_by`, name, weight, by)
		return err
	})
	if err != nil {
		return Group{}, err
	}
	gs, err := s.groups(ctx, []string{name})
	if err != nil || len(gs) == 0 {
		return Group{Name: name, Weight: weight}, err
	}
	return gs[0], nil
}

// MaxGroupsListed bounds ListGroups' answer: every group with a weight of
// its own fits, with as many again of the groups only tasks name.
const MaxGroupsListed = 2 * MaxGroupWeights

// ListGroups lists the groups that have a weight of their own, by name, then
// the groups only tasks now holding a slot or queued name, weighing 1; each
// with its counts; at most MaxGroupsListed, so every weighed group is in. The counts read the active and queued tasks that name a
// group, through the fair-share indexes (a range of sharer, 'g:...'), not
// the whole table.
func (s *Store) ListGroups(ctx context.Context) ([]Group, error) {
	return s.groups(ctx, nil)
}

// groups reads the groups named, or every one ListGroups lists when names is
// nil.
func (s *Store) groups(ctx context.Context, names []string) ([]Group, error) {
	rows, err := s.pool.Query(ctx, `with running as (
			select substr(sharer, 3) as name, count(*) as n from podium.tasks
			where state in ('scheduled', 'provisioning', 'running') and sharer >= 'g:' and sharer < 'g;'
			group by sharer),
		queued as (
			select substr(sharer, 3) as name, count(*) as n from podium.tasks
			where state = 'queued' and sharer >= 'g:' and sharer < 'g;'
			group by sharer),
		active as (
			select coalesce(r.name, q.name) as name, coalesce(r.n, 0) as running, coalesce(q.n, 0) as queued
			from running r full join queued q on q.name = r.name
			where $1::text[] is null or coalesce(r.name, q.name) = any($1))
		select coalesce(w.name, a.name), coalesce(w.weight, 1), coalesce(w.set_at, 'epoch'::timestamptz), coalesce(w.set_by, ''),
			coalesce(a.running, 0), coalesce(a.queued, 0)
		from (select * from podium.group_weights where $1::text[] is null or name = any($1)) w
		full join active a on a.name = w.name
		order by w.name is null, 1 limit $2`, names, MaxGroupsListed)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Group, error) {
		var g Group
		err := r.Scan(&g.Name, &g.Weight, &g.SetAt, &g.SetBy, &g.Running, &g.Queued)
		if g.SetAt.Equal(time.Unix(0, 0)) {
			g.SetAt = time.Time{}
		}
		return g, err
	})
}

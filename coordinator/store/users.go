package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// User is a row of podium.users: a person, their role and who added them.
// The token's hash is never read back out.
type User struct {
	Name      string
	Role      string
	CreatedAt time.Time
	CreatedBy string
	// Weight is the user's share of free slots against other submitters
	// of equal priority (fair share): 1 by default, at most MaxWeight.
	Weight int32
	// Groups are the fair-share groups (TaskSpec.group) the user may
	// submit to, and through which secrets granted to "group:NAME" reach
	// them; sorted, at most MaxUserGroups.
	Groups []string
}

// MaxUserGroups bounds how many groups one user belongs to (the column's
// check says the same): teams, not tags.
const MaxUserGroups = 64

// userColumns are the columns every read of a user scans, in scanUser's
// order.
const userColumns = "name, role, created_at, created_by, weight, groups"

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.Name, &u.Role, &u.CreatedAt, &u.CreatedBy, &u.Weight, &u.Groups)
	return u, err
}

// MaxWeight bounds a user's fair-share weight: a weight of 1,000 already
// gives a user all but a thousandth of the slots others contend for.
const MaxWeight = 1000

// ErrExists means a row with that key is already there.
var ErrExists = errors.New("already exists")

// AddUser stores a user with the SHA-256 of their personal token, in the
// fair-share groups given (checked by the caller, as for SetUserGroups).
func (s *Store) AddUser(ctx context.Context, name, role string, tokenHash []byte, by string, groups ...string) (User, error) {
	groups = slices.Compact(slices.Sorted(slices.Values(groups)))
	if groups == nil {
		groups = []string{}
	}
	var u User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `insert into podium.users (name, role, token_hash, created_by, groups)
			values ($1, $2, $3, $4, $5) returning `+userColumns, name, role, tokenHash, by, groups))
		return err
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" {
		return u, ErrExists
	}
	return u, err
}

// SetUserToken replaces the SHA-256 of a user's personal token: the old
// token stops working with the next call; ErrNotFound when there is no such
// user.
func (s *Store) SetUserToken(ctx context.Context, name string, tokenHash []byte) (User, error) {
	var u User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `update podium.users set token_hash = $2 where name = $1
			returning `+userColumns, name, tokenHash))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// ListUsers lists every user by name.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	rows, err := s.pool.Query(ctx, `select `+userColumns+` from podium.users order by name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) { return scanUser(r) })
}

// RemoveUser deletes a user; ErrNotFound when there is none. Their
// schedules are paused in the same transaction, saying why: a schedule's
// ticks run as its owner, who may no longer submit.
func (s *Store) RemoveUser(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `delete from podium.users where name = $1`, name)
		if err == nil && tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if slices.Contains(ReservedUserNames, name) {
			// A left-over row of a reserved name was never the owner of
			// what the coordinator's own caller of that name created.
			return nil
		}
		return pauseOwnedSchedules(ctx, tx, name, fmt.Sprintf(
			"its owner %s was removed%s, and its tasks run as its owner: add %s again (podium user add) and resume it, or remove it",
			name, byWhom(ctx), name))
	})
}

// SetUserRole changes a user's role; ErrNotFound when there is none. Made a
// viewer, who may not submit, the user's schedules are paused in the same
// transaction, saying why.
func (s *Store) SetUserRole(ctx context.Context, name, role string) (User, error) {
	var u User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `update podium.users set role = $2 where name = $1
			returning `+userColumns, name, role))
		if err != nil || role != "viewer" {
			return err
		}
		return pauseOwnedSchedules(ctx, tx, name, fmt.Sprintf(
			"its owner %s was made a viewer%s, who may not submit tasks, and its tasks run as its owner: "+
				"give %s the member role again (podium user set-role %s member) and resume it, or remove it",
			name, byWhom(ctx), name, name))
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// SetUserWeight changes a user's fair-share weight, from the leader's next
// pass on; ErrNotFound when there is no such user. The caller checks the
// bounds (1..MaxWeight); the column's check refuses anything else.
func (s *Store) SetUserWeight(ctx context.Context, name string, weight int32) (User, error) {
	var u User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `update podium.users set weight = $2 where name = $1
			returning `+userColumns, name, weight))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// UserByTokenHash finds the user whose personal token hashes to h;
// ErrNotFound when nobody's does.
func (s *Store) UserByTokenHash(ctx context.Context, h []byte) (User, error) {
	return s.userWhere(ctx, "token_hash = $1", h)
}

// UserByName finds a user (a Tailscale login on the tailnet); ErrNotFound
// when there is none.
func (s *Store) UserByName(ctx context.Context, name string) (User, error) {
	return s.userWhere(ctx, "name = $1", name)
}

// ReservedUserNames are the names the coordinator gives its own callers
// (tailnet.Caller.Name: "token" is the bootstrap token, and what its tasks
// record as requested_by). The admin service refuses to add a user by such a
// name (access.Reserved says the same); a row by one left in the database
// from before is ignored by every lookup that signs someone in or gives them
// a role or groups, so its personal token opens nothing and nobody becomes
// the owner of the bootstrap token's tasks through it. It still shows in
// ListUsers, and RemoveUser removes it.
var ReservedUserNames = []string{"token"}

func (s *Store) userWhere(ctx context.Context, where string, arg any) (User, error) {
	u, err := scanUser(s.pool.QueryRow(ctx, `select `+userColumns+` from podium.users where name <> all($2) and `+where,
		arg, ReservedUserNames))
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// DeviceNode returns the id of the node bound to a Tailscale device, or ""
// when none is.
func (s *Store) DeviceNode(ctx context.Context, deviceID string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `select id from podium.nodes where tailscale_device_id = $1 limit 1`, deviceID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// UserRole returns the role of the user called name; ok is false when there
// is no such user.
func (s *Store) UserRole(ctx context.Context, name string) (role string, ok bool, err error) {
	u, err := s.UserByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	return u.Role, err == nil, err
}

// SetUserGroups replaces the groups a user belongs to (sorted, without
// duplicates); ErrNotFound when there is no such user. The caller checks
// each name and the count; the column's check refuses more than
// MaxUserGroups.
func (s *Store) SetUserGroups(ctx context.Context, name string, groups []string) (User, error) {
	groups = slices.Compact(slices.Sorted(slices.Values(groups)))
	if groups == nil {
		groups = []string{} // the column is not null: none is an empty array
	}
	var u User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `update podium.users set groups = $2 where name = $1
			returning `+userColumns, name, groups))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// UserGroups returns the groups of the user called name, with ok false when
// there is no such user (a tailnet person known only by a grant, or the
// bootstrap token).
func (s *Store) UserGroups(ctx context.Context, name string) (groups []string, ok bool, err error) {
	u, err := s.UserByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	return u.Groups, err == nil, err
}

// byWhom names who makes the change in ctx (its audit row's caller), as
// " by NAME", or "" when nobody is named.
func byWhom(ctx context.Context) string {
	if a := AuditFrom(ctx); a != nil && a.Who != "" {
		return " by " + a.Who
	}
	return ""
}

// IsLogin reports whether name is a tailnet login (name@domain). Such a
// person may hold a role from the tailnet policy with no users row; any
// other name is a local user's, whose only standing is their row, so one
// with no row was removed (or never existed). What a removed user left
// running (queued tasks, schedules) is checked against that.
func IsLogin(name string) bool { return strings.Contains(name, "@") }

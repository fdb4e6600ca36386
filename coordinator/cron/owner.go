package cron

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// ownerRole is the role a schedule's owner has now, which its ticks run
// with: the bootstrap token's admin, or the role of the owner's user row.
// known is false for an owner without a row: a tailnet person whose role
// comes from the tailnet policy (a grant, or the default role), which only a
// call of theirs shows; their ticks are not checked again after Create.
// A user removed from Podium has no row either, but RemoveUser paused their
// schedules as it removed them.
func ownerRole(ctx context.Context, st *store.Store, owner string) (role access.Role, known bool, err error) {
	if owner == string(tailnet.KindToken) {
		return access.Admin, true, nil
	}
	r, ok, err := st.UserRole(ctx, owner)
	return access.Role(r), ok, err
}

// ownerMayNot says why a schedule's owner may not submit its spec now
// (removed from the submitting role, or asking for what members may not:
// tasks.Bounds), or "" when they may or it cannot be told. An error is a
// failure to read, to retry.
func ownerMayNot(ctx context.Context, st *store.Store, b tasks.Bounds, sc store.Schedule) (string, error) {
	role, known, err := ownerRole(ctx, st, sc.CreatedBy)
	switch {
	case err != nil:
		return "", err
	case !known && sc.PausedReason != "":
		// Paused for its owner, who had a row then (only such an owner's
		// schedule gets a reason) and has none now: still removed.
		return sc.PausedReason, nil
	case !known && !store.IsLogin(sc.CreatedBy):
		// A local user with no row was removed (before RemoveUser paused
		// schedules too, or by hand in SQL): the schedule may not run.
		return fmt.Sprintf("its owner %s is no longer a Podium user, and its tasks run as its owner: add %s again (podium user add) and resume it, or remove it",
			sc.CreatedBy, sc.CreatedBy), nil
	case !known:
		return "", nil
	}
	if !role.Covers(access.Member) {
		return fmt.Sprintf("its owner %s is %s, who may not submit tasks, and its tasks run as its owner: "+
			"give %s the member role (podium user set-role %s member) and resume it, or remove it",
			sc.CreatedBy, article(role), sc.CreatedBy, sc.CreatedBy), nil
	}
	err = b.Check(ctx, st, sc.CreatedBy, role, sc.Spec)
	if connect.CodeOf(err) == connect.CodePermissionDenied {
		var ce *connect.Error
		errors.As(err, &ce)
		return fmt.Sprintf("its owner %s may no longer submit its spec (%s); remove it and create it again as one who may",
			sc.CreatedBy, ce.Message()), nil
	}
	return "", err
}

func article(r access.Role) string {
	if r == access.Admin {
		return "an admin"
	}
	return "a " + string(r)
}

// pauseIfOwnerMayNot pauses sc at its tick, saying why, when its owner may
// no longer submit its spec (ownerMayNot), and reports whether it did (or
// another replica did, or the schedule moved on): the tick then creates no
// task.
func (t *Ticker) pauseIfOwnerMayNot(ctx context.Context, sc store.Schedule, tick time.Time) (bool, error) {
	why, err := ownerMayNot(ctx, t.store, t.cfg.Bounds, sc)
	if err != nil {
		return false, fmt.Errorf("schedule %s: check its owner %s: %w", sc.Name, sc.CreatedBy, err)
	}
	if why == "" {
		return false, nil
	}
	paused, err := t.store.PauseScheduleFor(ctx, sc.ID, tick, why)
	if err != nil {
		return false, fmt.Errorf("schedule %s: pause it (%s): %w", sc.Name, why, err)
	}
	if paused {
		t.log.Warn("schedules: paused a schedule whose owner may no longer submit it", "schedule", sc.Name, "owner", sc.CreatedBy, "reason", why)
	}
	return true, nil
}

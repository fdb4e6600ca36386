package cron

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
)

// refuseSecrets checks, as the schedule's owner, that the tick's task may
// use every secret its spec names (secrets.Authorize: a grant may have been
// revoked, or the owner demoted, since the schedule was made). When not, it
// handles the tick without a task, its note naming the secrets and how to
// get them, audits the refusal, and reports true; the schedule keeps its
// next tick, which checks again. It reports false, with nothing done, when
// the task may be created.
func (t *Ticker) refuseSecrets(ctx context.Context, sc store.Schedule, tick, next time.Time) (bool, error) {
	names := taskspec.SecretNames(sc.Spec)
	if len(names) == 0 {
		return false, nil
	}
	_, err := secrets.Authorize(ctx, t.store, sc.CreatedBy, names)
	var denied *secrets.DeniedError
	var missing *secrets.MissingError
	switch {
	case err == nil:
		return false, nil
	case !errors.As(err, &denied) && !errors.As(err, &missing):
		return false, fmt.Errorf("schedule %s: check its secrets: %w", sc.Name, err)
	}
	done, ferr := t.store.RefuseTick(ctx, store.Fire{ScheduleID: sc.ID, Tick: tick, Next: next}, "refused, no task: "+err.Error())
	if ferr != nil {
		return true, fmt.Errorf("schedule %s: record the refused tick of %s: %w", sc.Name, tick.Format(time.RFC3339), ferr)
	}
	if done {
		t.log.Warn("schedule tick refused: its owner may not use a secret its spec names", "schedule", sc.Name, "tick", tick, "owner", sc.CreatedBy, "err", err)
		if aerr := secrets.RecordRefused(ctx, t.store, "schedule "+sc.Name, err); aerr != nil {
			t.log.Warn("schedules: the refused tick's audit row was not written", "schedule", sc.Name, "err", aerr)
		}
	}
	return true, nil
}

package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// AttemptUsage reads what one attempt of a task used (podium.attempts, see
// schema/migrations/0020_usage.sql); nil when the task has no such attempt
// (it never ran). A figure that is unknown is unset. Output and artifact
// bytes count from the attempt's start, so a running attempt has them and
// nothing else.
func (s *Store) AttemptUsage(ctx context.Context, taskID string, attempt int32) (*podiumv1.Usage, error) {
	u := &podiumv1.Usage{}
	err := s.pool.QueryRow(ctx, `select cpu_seconds, peak_memory_bytes, wall_seconds, output_bytes, artifact_bytes
		from podium.attempts where task_id = $1 and attempt = $2`, taskID, attempt).
		Scan(&u.CpuSeconds, &u.PeakMemoryBytes, &u.WallSeconds, &u.OutputBytes, &u.ArtifactBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrAttemptClosed means a node tried to upload for a task attempt that ended
// longer ago than uploads are accepted for.
var ErrAttemptClosed = errors.New("store: the task attempt ended too long ago to take artifacts")

// Artifact is a row of podium.artifacts.
type Artifact struct {
	ID        string
	TaskID    string
	Attempt   int32
	NodeID    string
	Name      string
	Size      int64
	SHA256    string
	ObjectKey string
	CreatedAt time.Time
}

// Proto renders the row for the API. The object key stays inside the
// coordinator: it is an implementation detail of the bucket's layout.
func (a Artifact) Proto() *podiumv1.Artifact {
	return &podiumv1.Artifact{
		Id: a.ID, TaskId: a.TaskID, Attempt: a.Attempt, Name: a.Name, Size: a.Size,
		Sha256: a.SHA256, CreatedAt: timestamppb.New(a.CreatedAt), NodeId: a.NodeID,
	}
}

const artifactColumns = `id, task_id, attempt, node_id, name, size, sha256, object_key, created_at`

func scanArtifact(row pgx.Row) (Artifact, error) {
	var a Artifact
	err := row.Scan(&a.ID, &a.TaskID, &a.Attempt, &a.NodeID, &a.Name, &a.Size, &a.SHA256, &a.ObjectKey, &a.CreatedAt)
	return a, err
}

// CheckUploadAllowed decides whether a node may upload artifacts for a task
// attempt: it must hold the attempt (the attempts row names it), and the
// attempt must be live or have ended less than grace ago. The grace is what
// lets an agent collect a task's files after the container exits — by then it
// has already reported the terminal status — without letting a node that was
// given up on write into a task long after the fact.
//
// It returns ErrNotHeld when the node never held the attempt, and
// ErrAttemptClosed, with when it ended (nil if it is unknown), when the grace
// has run out.
func (s *Store) CheckUploadAllowed(ctx context.Context, nodeID, taskID string, attempt int32, grace time.Duration) (endedAt *time.Time, err error) {
	var open bool
	err = s.pool.QueryRow(ctx, `select
			case when t.attempt = a.attempt and t.state = any($4) and a.finished_at is null then null
			     else coalesce(a.finished_at, t.finished_at) end,
			coalesce((t.attempt = a.attempt and t.state = any($4) and a.finished_at is null)
			  or coalesce(a.finished_at, t.finished_at) > now() - make_interval(secs => $5), false)
		from podium.attempts a join podium.tasks t on t.id = a.task_id
		where a.task_id = $1 and a.attempt = $2 and a.node_id = $3`,
		taskID, attempt, nodeID, Active, grace.Seconds()).Scan(&endedAt, &open)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotHeld
	}
	if err != nil {
		return nil, err
	}
	if !open {
		return endedAt, ErrAttemptClosed
	}
	return endedAt, nil
}

// PutArtifact records an artifact whose object is already complete, and notes
// it in the task's log (note words it, told whether it replaced one), in one
// transaction. An artifact of the same task,
// attempt and name is replaced; its object key is returned so the caller can
// remove the object once nothing names it. The row is locked while it is
// replaced, so two uploads of one name racing each other still end with one
// row, and each superseded object is handed back to exactly one of them.
func (s *Store) PutArtifact(ctx context.Context, a Artifact, note func(replaced bool) string) (stored Artifact, replacedKey string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		replacedKey = ""
		for range 3 {
			var old string
			var oldSize int64
			err := tx.QueryRow(ctx, `select object_key, size from podium.artifacts
				where task_id = $1 and attempt = $2 and name = $3 for update`, a.TaskID, a.Attempt, a.Name).Scan(&old, &oldSize)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				stored, err = scanArtifact(tx.QueryRow(ctx, `insert into podium.artifacts
						(id, task_id, attempt, node_id, name, size, sha256, object_key)
					values ($1, $2, $3, $4, $5, $6, $7, $8)
					on conflict (task_id, attempt, name) do nothing
					returning `+artifactColumns,
					a.ID, a.TaskID, a.Attempt, a.NodeID, a.Name, a.Size, a.SHA256, a.ObjectKey))
				if errors.Is(err, pgx.ErrNoRows) {
					// Another upload of the name committed in between: lock
					// its row and replace it instead.
					continue
				}
			case err == nil:
				replacedKey = old
				stored, err = scanArtifact(tx.QueryRow(ctx, `update podium.artifacts set
						id = $1, node_id = $4, size = $6, sha256 = $7, object_key = $8, created_at = now()
					where task_id = $2 and attempt = $3 and name = $5
					returning `+artifactColumns,
					a.ID, a.TaskID, a.Attempt, a.NodeID, a.Name, a.Size, a.SHA256, a.ObjectKey))
			}
			if err != nil {
				return err
			}
			// The attempt's usage counts its artifacts' bytes as stored
			// (a replaced one by its new size), by increment under the
			// attempt row's lock, so uploads of several names at once
			// all count; retention removing artifacts later leaves the
			// count as it was.
			if _, err := tx.Exec(ctx, `update podium.attempts set artifact_bytes = greatest(artifact_bytes + $3, 0)
				where task_id = $1 and attempt = $2`, a.TaskID, a.Attempt, stored.Size-oldSize); err != nil {
				return err
			}
			return appendNote(ctx, tx, a.TaskID, a.Attempt, note(replacedKey != ""))
		}
		return errors.New("store: the artifact's row kept changing under concurrent uploads of the same name; retry")
	})
	return stored, replacedKey, err
}

// ListArtifacts returns a task's artifacts, by attempt and then name.
func (s *Store) ListArtifacts(ctx context.Context, taskID string) ([]Artifact, error) {
	rows, err := s.pool.Query(ctx, "select "+artifactColumns+` from podium.artifacts
		where task_id = $1 order by attempt, name`, taskID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Artifact, error) { return scanArtifact(r) })
}

// GetArtifact finds one artifact of a task by name; attempt 0 means the newest
// attempt that has one of that name. It returns ErrNotFound when there is none.
func (s *Store) GetArtifact(ctx context.Context, taskID, name string, attempt int32) (Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx, "select "+artifactColumns+` from podium.artifacts
		where task_id = $1 and name = $2 and ($3 = 0 or attempt = $3)
		order by attempt desc limit 1`, taskID, name, attempt))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	return a, err
}

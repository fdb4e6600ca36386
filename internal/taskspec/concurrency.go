package taskspec

import (
	"fmt"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Bounds of spec.concurrency. The key is stored in an indexed column and
// printed in reasons, so it is short and plain; a limit over 1000 is not a
// limit anyone means to keep.
const (
	MaxConcurrencyKeyBytes = 128
	MaxConcurrencyLimit    = 1000
)

// What spec.concurrency.on_conflict may say. Queue is the default.
const (
	OnConflictQueue       = "queue"
	OnConflictCancelOlder = "cancel_older"
	OnConflictCancelNewer = "cancel_newer"
)

// checkConcurrency refuses a concurrency block with no key, a key of other
// characters than letters, digits and . _ - / : or longer than
// MaxConcurrencyKeyBytes, a limit outside 0..MaxConcurrencyLimit (0 means
// 1), or an on_conflict it does not know.
func checkConcurrency(field string, c *podiumv1.Concurrency) error {
	if c == nil {
		return nil
	}
	key := c.GetKey()
	if key == "" {
		return fieldErr(field+".key", "required: name the group of tasks, e.g. deploy-prod")
	}
	if len(key) > MaxConcurrencyKeyBytes {
		return fieldErr(field+".key", "is %d bytes, longer than %d", len(key), MaxConcurrencyKeyBytes)
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '/' || r == ':') {
			return fieldErr(field+".key", "%q has the character %q: use letters, digits and . _ - / : only", clip(key), r)
		}
	}
	if l := c.GetLimit(); l < 0 || l > MaxConcurrencyLimit {
		return fieldErr(field+".limit", "%d is out of range: give 1 to %d (0 means 1)", l, MaxConcurrencyLimit)
	}
	switch c.GetOnConflict() {
	case "", OnConflictQueue, OnConflictCancelOlder, OnConflictCancelNewer:
	default:
		return fieldErr(field+".on_conflict", "%q is not known: give %s, %s or %s", clip(c.GetOnConflict()),
			OnConflictQueue, OnConflictCancelOlder, OnConflictCancelNewer)
	}
	return nil
}

// normalizeConcurrency writes a checked block's defaults into the spec, so
// the stored spec says what the coordinator enforces.
func normalizeConcurrency(spec *podiumv1.TaskSpec) {
	c := spec.GetConcurrency()
	if c == nil {
		return
	}
	if c.Limit == 0 {
		c.Limit = 1
	}
	if c.OnConflict == "" {
		c.OnConflict = OnConflictQueue
	}
}

// ConcurrencyReason is why a task of a key at its limit waits:
// "concurrency key deploy-prod is at its limit (1 running: task_…)". active
// are the key's active tasks, oldest first; at most three are named.
func ConcurrencyReason(key string, active []string) string {
	return fmt.Sprintf("concurrency key %s is at its limit (%d running: %s)", key, len(active), NameTasks(active))
}

// NameTasks lists task ids for a reason: the first three, and how many more.
func NameTasks(ids []string) string {
	n := min(len(ids), 3)
	list := strings.Join(ids[:n], ", ")
	if len(ids) > n {
		list += fmt.Sprintf(" and %d more", len(ids)-n)
	}
	return list
}

package podiumv1

import (
	"log/slog"
	"sort"
)

// LogValue makes every slog call that is handed a TaskSpec log it without the
// values of its environment, which is where users put secrets. It is the one
// redacting helper: because slog asks the value itself, there is no other path
// by which a spec reaches a log line intact.
func (s *TaskSpec) LogValue() slog.Value {
	if s == nil {
		return slog.StringValue("<nil>")
	}
	keys := make([]string, 0, len(s.GetEnv()))
	for k := range s.GetEnv() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slog.GroupValue(
		slog.String("image", s.GetImage()),
		slog.Any("command", s.GetCommand()),
		slog.Any("env_keys", keys),
		slog.Any("labels", s.GetLabels()),
	)
}

// LogValue logs an assignment with its spec redacted (see TaskSpec.LogValue).
func (a *Assign) LogValue() slog.Value {
	if a == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("task_id", a.GetTaskId()),
		slog.Int("attempt", int(a.GetAttempt())),
		slog.Any("spec", a.GetSpec()),
	)
}

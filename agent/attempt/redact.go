package attempt

import (
	"log/slog"
	"sort"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// RedactAssign is the only way the agent logs an assignment. An assignment
// carries the task's environment and command line, which routinely hold
// secrets, so only what identifies the task and the names (never the values)
// of its environment make it into a log. It lives here, beside the key, so
// that the executor and the session log an assignment the same way.
func RedactAssign(a *podiumv1.Assign) slog.Value {
	spec := a.GetSpec()
	envKeys := make([]string, 0, len(spec.GetEnv()))
	for k := range spec.GetEnv() {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	sidecars := make([]string, 0, len(spec.GetSidecars()))
	for _, sc := range spec.GetSidecars() {
		sidecars = append(sidecars, sc.GetName())
	}
	return slog.GroupValue(
		slog.String("task_id", a.GetTaskId()),
		slog.Int("attempt", int(a.GetAttempt())),
		slog.String("image", spec.GetImage()),
		slog.Int("argc", len(spec.GetCommand())),
		slog.Any("env_keys", envKeys),
		slog.Any("sidecars", sidecars),
		slog.Any("secrets", secretNames(a.GetSecrets())),
		slog.Int64("timeout_seconds", spec.GetTimeoutSeconds()),
	)
}

// secretNames are the names of an assignment's secrets: what a log may say
// of them.
func secretNames(vs []*podiumv1.SecretValue) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.GetName())
	}
	return names
}

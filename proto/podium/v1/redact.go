package podiumv1

import (
	"encoding/json"
	"fmt"
	"io"
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
		slog.Any("registry_auths", registryHosts(a.GetRegistryAuths())),
	)
}

// LogValue logs a registry login by its host and user name, never its
// password. slog asks a value alone or in an Assign; a slice of them reaches
// a handler unresolved, which is what Format (text) and MarshalJSON (JSON)
// are for.
func (r *RegistryAuth) LogValue() slog.Value {
	if r == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("host", r.GetHost()),
		slog.String("username", r.GetUsername()),
	)
}

// Format prints a registry login without its password for every verb, so
// that fmt (and slog's text handler, which formats a slice with %+v) never
// shows it.
func (r *RegistryAuth) Format(f fmt.State, _ rune) {
	if r == nil {
		_, _ = io.WriteString(f, "<nil>")
		return
	}
	_, _ = fmt.Fprintf(f, "{host:%s username:%s}", r.GetHost(), r.GetUsername())
}

// MarshalJSON encodes a registry login without its password, for
// encoding/json (and slog's JSON handler, which encodes a slice with it).
func (r *RegistryAuth) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Host     string `json:"host"`
		Username string `json:"username"`
	}{r.GetHost(), r.GetUsername()})
}

func registryHosts(as []*RegistryAuth) []string {
	hosts := make([]string, 0, len(as))
	for _, a := range as {
		hosts = append(hosts, a.GetHost())
	}
	return hosts
}

// LogValue logs a resolved secret by its name and where it goes, never its
// value, however it reaches a log line (alone, in a slice, in a message).
func (v *SecretValue) LogValue() slog.Value {
	if v == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("name", v.GetName()),
		slog.String("env", v.GetEnv()),
		slog.String("file", v.GetFile()),
		slog.Int("value_bytes", len(v.GetValue())),
	)
}

// LogValue logs an adoption without its secrets' values.
func (a *Adopt) LogValue() slog.Value {
	if a == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("task_id", a.GetTaskId()),
		slog.Int("attempt", int(a.GetAttempt())),
		slog.Bool("keep", a.GetKeep()),
		slog.Uint64("acked_seq", a.GetAckedSeq()),
		slog.Any("secrets", secretNames(a.GetSecrets())),
	)
}

// LogValue logs a HelloAck with its adoptions redacted (see Adopt.LogValue).
func (h *HelloAck) LogValue() slog.Value {
	if h == nil {
		return slog.StringValue("<nil>")
	}
	adopt := make([]string, 0, len(h.GetAdopt()))
	for _, a := range h.GetAdopt() {
		adopt = append(adopt, fmt.Sprintf("%s/%d keep=%t", a.GetTaskId(), a.GetAttempt(), a.GetKeep()))
	}
	return slog.GroupValue(
		slog.String("node_id", h.GetNodeId()),
		slog.String("replica", h.GetReplica()),
		slog.Any("replicas", h.GetReplicas()),
		slog.Any("adopt", adopt),
		slog.Any("labels", h.GetLabels()),
		slog.Bool("draining", h.GetDraining()),
	)
}

func secretNames(vs []*SecretValue) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.GetName())
	}
	return names
}

// LogValue logs a SetSecret request by its name and size, never its value.
func (r *SetSecretRequest) LogValue() slog.Value {
	if r == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(slog.String("name", r.GetName()), slog.Int("value_bytes", len(r.GetValue())))
}

// LogValue logs a RegistryLogin request by its host and user name, never its
// password.
func (r *RegistryLoginRequest) LogValue() slog.Value {
	if r == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(slog.String("host", r.GetHost()), slog.String("username", r.GetUsername()),
		slog.Int("password_bytes", len(r.GetPassword())))
}

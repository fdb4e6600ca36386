package taskspec

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/podiumhq/podium/internal/glob"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// FieldError says which field of a spec is wrong and what to do about it.
// Field is the field's path as the API names it ("spec.env[\"A B\"]"), so a
// caller can point at it; Problem is a sentence for a person.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate checks a spec before it is queued, returning a *FieldError for the
// first problem it finds (the size of the whole, then text that is not UTF-8
// and fields the program does not know, then fields in declaration order, env
// keys sorted, so the same spec always gets the same answer). The limits it
// holds a spec to are in limits.go. It checks only what can be known
// without a node: whether the image exists or a label matches any node is for
// the scheduler to say.
//
// Validate also normalises the spec in place, and only when it returns nil:
// each capability is rewritten to its canonical name (upper case, without
// "CAP_": "cap_net_raw" becomes "NET_RAW") and repeats are dropped, so that
// what the coordinator stores, and what the agent reads, is exactly one of
// AllowedCapabilities, once. A spec that is already canonical is not written
// to at all. A secret reference naming neither env nor file gets its
// default variable (DefaultSecretEnv). A retry policy gets its attempts
// written into both retry.attempts and max_attempts (they are one budget)
// and its backoffs with their defaults filled in (normalizeRetry). Nothing
// else is changed.
func Validate(spec *podiumv1.TaskSpec) error {
	if spec == nil {
		return fieldErr("spec", "required: send a task spec with at least an image")
	}
	if err := checkSize(spec); err != nil {
		return err
	}
	if err := checkStrings("spec", spec.ProtoReflect()); err != nil {
		return err
	}
	if n := spec.GetName(); n != "" && !ValidName(n) {
		return fieldErr("spec.name", "%s is not a task name: use letters, digits and . _ - : / +, starting with a letter or digit, at most %d bytes (e.g. deploy-web)", clip(n), MaxNameBytes)
	}
	if spec.GetImage() == "" {
		return fieldErr("spec.image", "required: name the container image to run, e.g. alpine:3")
	}
	if err := checkImage("spec.image", spec.GetImage()); err != nil {
		return err
	}
	if err := checkCommand("spec.command", spec.GetCommand()); err != nil {
		return err
	}
	if err := checkEnv("spec.env", spec.GetEnv()); err != nil {
		return err
	}
	if wd := spec.GetWorkingDir(); wd != "" {
		if !strings.HasPrefix(wd, "/") {
			return fieldErr("spec.working_dir", "%s is relative: give an absolute path inside the container, e.g. /workspace", clip(wd))
		}
		if strings.IndexByte(wd, 0) >= 0 {
			return fieldErr("spec.working_dir", "contains a NUL byte")
		}
		if len(wd) > MaxWorkingDirBytes {
			return fieldErr("spec.working_dir", "is %d bytes, longer than any path can be (%d)", len(wd), MaxWorkingDirBytes)
		}
	}
	if g := spec.GetGroup(); g != "" && !ValidGroup(g) {
		return fieldErr("spec.group", "%q is not a group name: use letters, digits and . _ / -, at most %d bytes (or leave it out to share as the submitter)", clip(g), MaxGroupBytes)
	}
	if n := len(spec.GetLabels()); n > MaxLabels {
		return fieldErr("spec.labels", "has %d labels, more than %d", n, MaxLabels)
	}
	for i, l := range spec.GetLabels() {
		if problem := labelProblem(l); problem != "" {
			return fieldErr(fmt.Sprintf("spec.labels[%d]", i), "%s", problem)
		}
	}
	if err := checkResources("spec.resources", spec.GetResources()); err != nil {
		return err
	}
	if err := checkGPUs("spec.resources", spec.GetResources()); err != nil {
		return err
	}
	if err := checkDuration("spec.timeout_seconds", spec.GetTimeoutSeconds(), "no timeout"); err != nil {
		return err
	}
	attempts, err := checkAttempts(spec)
	if err != nil {
		return err
	}
	if err := checkDuration("spec.cancel_grace_seconds", spec.GetCancelGraceSeconds(), "the default of 30 s"); err != nil {
		return err
	}
	if err := checkRetain("spec.retain_seconds", spec.GetRetainSeconds()); err != nil {
		return err
	}
	if err := checkDuration("spec.queue_timeout_seconds", spec.GetQueueTimeoutSeconds(), "the coordinator's --queue-timeout"); err != nil {
		return err
	}
	if n := len(spec.GetSidecars()); n > MaxSidecars {
		return fieldErr("spec.sidecars", "has %d sidecars, more than %d", n, MaxSidecars)
	}
	if spec.GetOutputLimitBytes() < 0 {
		return fieldErr("spec.output_limit_bytes", "%d is negative: give 0 (the node's default) or a number of bytes", spec.GetOutputLimitBytes())
	}
	names := map[string]int{}
	for i, sc := range spec.GetSidecars() {
		if err := checkSidecar(fmt.Sprintf("spec.sidecars[%d]", i), sc, i, names); err != nil {
			return err
		}
	}
	caps, err := normalizeCapabilities(spec.GetCapabilities())
	if err != nil {
		return err
	}
	if _, err := ArtifactGlobs("spec.artifacts", spec.GetArtifacts()); err != nil {
		return err
	}
	if _, err := AllowEgress("spec.allow_egress", spec.GetAllowEgress()); err != nil {
		return err
	}
	if u := spec.GetUser(); u != "" {
		if problem := UserProblem(u); problem != "" {
			return fieldErr("spec.user", "%s", problem)
		}
	}
	if err := checkPull("spec.pull", spec.GetPull()); err != nil {
		return err
	}
	secrets, err := checkSecrets(spec)
	if err != nil {
		return err
	}
	if err := CheckContainerOptions(spec); err != nil {
		return err
	}
	if err := checkConcurrency("spec.concurrency", spec.GetConcurrency()); err != nil {
		return err
	}
	if err := checkNotify(spec); err != nil {
		return err
	}
	normalizeRetry(spec, attempts)
	normalizeConcurrency(spec)
	if !slices.Equal(caps, spec.GetCapabilities()) {
		spec.Capabilities = caps
	}
	if !slices.Equal(secrets, spec.GetSecrets()) {
		spec.Secrets = secrets
	}
	return nil
}

// DefaultArtifactGlob is what a spec without artifacts means: every file the
// task leaves in /workspace/.podium/artifacts.
const DefaultArtifactGlob = ".podium/artifacts/**"

// MaxArtifactGlobs bounds the artifacts field. A task that needs more
// patterns than this wants a directory of its own (reports/**) instead, and
// the agent reads the workspace once for each pattern's directory.
const MaxArtifactGlobs = 64

// ArtifactGlobs parses a spec's artifacts field, whose name (as the API
// names it, "spec.artifacts") the errors carry: a *FieldError for the first
// pattern that is empty, absolute, reaches out with "..", or is not a valid
// glob (package internal/glob has the syntax), or for too many of them. An
// empty field gives the default, DefaultArtifactGlob. The agent calls it too,
// so that it matches files with exactly the patterns the coordinator checked.
func ArtifactGlobs(field string, globs []string) ([]*glob.Pattern, error) {
	if len(globs) == 0 {
		p, err := glob.Parse(DefaultArtifactGlob)
		return []*glob.Pattern{p}, err
	}
	if len(globs) > MaxArtifactGlobs {
		return nil, fieldErr(field, "has %d patterns, more than %d: match whole directories instead (reports/**), "+
			"or have the task put its artifacts in /workspace/.podium/artifacts", len(globs), MaxArtifactGlobs)
	}
	out := make([]*glob.Pattern, 0, len(globs))
	for i, g := range globs {
		p, err := glob.Parse(g)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func checkEnv(field string, env map[string]string) error {
	if len(env) > MaxEnv {
		return fieldErr(field, "has %d variables, more than %d: pass settings in a file instead", len(env), MaxEnv)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := fmt.Sprintf("%s[%s]", field, clip(k))
		if problem := envKeyProblem(k); problem != "" {
			return fieldErr(f, "%s", problem)
		}
		if strings.IndexByte(env[k], 0) >= 0 {
			return fieldErr(f, "value contains a NUL byte, which no environment variable can hold")
		}
		if n := len(env[k]); n > MaxEnvValueBytes {
			return fieldErr(f, "value is %d bytes, more than %d: pass large values in a file instead", n, MaxEnvValueBytes)
		}
	}
	return nil
}

func checkResources(field string, r *podiumv1.Resources) error {
	if r == nil {
		return nil
	}
	if math.IsNaN(r.GetCpu()) || math.IsInf(r.GetCpu(), 0) || r.GetCpu() < 0 {
		return fieldErr(field+".cpu", "%v is not a number of cores: give 0 (no limit) or more, e.g. 0.5", r.GetCpu())
	}
	if r.GetCpu() > MaxCPU {
		return fieldErr(field+".cpu", "%v is more than %d cores: give what the task needs, e.g. 2", r.GetCpu(), MaxCPU)
	}
	if r.GetMemoryMb() < 0 {
		return fieldErr(field+".memory_mb", "%d is negative: give 0 (no limit) or a number of MiB", r.GetMemoryMb())
	}
	if r.GetMemoryMb() > MaxMemoryMB {
		return fieldErr(field+".memory_mb", "%d is more than %d MiB (a PiB): give what the task needs, e.g. 2048", r.GetMemoryMb(), MaxMemoryMB)
	}
	if r.GetPids() < 0 {
		return fieldErr(field+".pids", "%d is negative: give 0 (no limit) or a process count", r.GetPids())
	}
	if r.GetPids() > MaxPids {
		return fieldErr(field+".pids", "%d is more than the kernel's limit of %d processes: give what the task needs, e.g. 512", r.GetPids(), MaxPids)
	}
	return nil
}

// TaskHostName is the name the task's own container has on the task's
// network. No sidecar may take it.
const TaskHostName = "task"

// checkSidecar checks the sidecar at index i; names maps the names of the
// sidecars before it to their index.
func checkSidecar(field string, sc *podiumv1.Sidecar, i int, names map[string]int) error {
	if sc == nil {
		return fieldErr(field, "empty: a sidecar needs at least a name and an image")
	}
	name := sc.GetName()
	switch {
	case name == "":
		return fieldErr(field+".name", "required: name the sidecar; the task reaches it by this host name, e.g. db")
	case !IsDNSLabel(name):
		return fieldErr(field+".name", "%q is not a DNS label: use 1 to 63 lower-case letters, digits and '-', not starting or ending with '-', e.g. db or redis-cache", name)
	case name == TaskHostName:
		return fieldErr(field+".name", "%q is the task's own host name: call the sidecar something else", name)
	}
	if j, dup := names[name]; dup {
		return fieldErr(field+".name", "%q is already the name of spec.sidecars[%d]: give each sidecar its own name", name, j)
	}
	names[name] = i
	if sc.GetImage() == "" {
		return fieldErr(field+".image", "required: name the sidecar's container image, e.g. postgres:16")
	}
	if err := checkImage(field+".image", sc.GetImage()); err != nil {
		return err
	}
	if err := checkCommand(field+".command", sc.GetCommand()); err != nil {
		return err
	}
	if err := checkEnv(field+".env", sc.GetEnv()); err != nil {
		return err
	}
	if err := checkResources(field+".resources", sc.GetResources()); err != nil {
		return err
	}
	if err := checkNoGPUs(field+".resources", sc.GetResources()); err != nil {
		return err
	}
	if err := checkPull(field+".pull", sc.GetPull()); err != nil {
		return err
	}
	return checkReadiness(field+".readiness", sc.GetReadiness())
}

// checkReadiness allows no check at all (the sidecar is ready once its
// container has started) or exactly one of a TCP port, an HTTP path on a port,
// or a command.
func checkReadiness(field string, r *podiumv1.Readiness) error {
	if r == nil {
		return nil
	}
	var checks []string
	if r.GetTcpPort() != 0 {
		checks = append(checks, "tcp_port")
	}
	if r.GetHttpPath() != "" {
		checks = append(checks, "http_path")
	}
	if len(r.GetCommand()) > 0 {
		checks = append(checks, "command")
	}
	if len(checks) > 1 {
		return fieldErr(field, "gives %s: give only one way to check readiness (tcp_port, http_path with http_port, or command)", strings.Join(checks, " and "))
	}
	if r.GetTcpPort() != 0 && !isPort(r.GetTcpPort()) {
		return fieldErr(field+".tcp_port", "%d is not a port: give 1 to 65535", r.GetTcpPort())
	}
	if p := r.GetHttpPath(); p != "" {
		if !strings.HasPrefix(p, "/") {
			return fieldErr(field+".http_path", "%q does not start with '/': give the path of the URL, e.g. /healthz", p)
		}
		if strings.IndexFunc(p, isSpaceOrControl) >= 0 {
			return fieldErr(field+".http_path", "%q contains a space or control character: escape it, e.g. %%20", p)
		}
		if r.GetHttpPort() == 0 {
			return fieldErr(field+".http_port", "required with http_path: give the port the sidecar serves HTTP on, e.g. 8080")
		}
	}
	if r.GetHttpPort() != 0 {
		if !isPort(r.GetHttpPort()) {
			return fieldErr(field+".http_port", "%d is not a port: give 1 to 65535", r.GetHttpPort())
		}
		if r.GetHttpPath() == "" {
			return fieldErr(field+".http_path", "required with http_port: give the path to request, e.g. /healthz (or use tcp_port to wait for the port alone)")
		}
	}
	if err := checkCommand(field+".command", r.GetCommand()); err != nil {
		return err
	}
	if err := checkDuration(field+".timeout_seconds", r.GetTimeoutSeconds(), "the default of 60 s"); err != nil {
		return err
	}
	if r.GetTimeoutSeconds() > 0 && len(checks) == 0 {
		return fieldErr(field+".timeout_seconds", "given without a check: add tcp_port, http_path with http_port, or command, or leave readiness out")
	}
	return nil
}

func isPort(p int32) bool { return p >= 1 && p <= 65535 }

// maxUserName is the longest user name Linux tools (useradd) accept.
const maxUserName = 32

// UserProblem says what is wrong with a user a task's command is to run as,
// or "" when nothing is: "UID", "UID:GID" (decimal numbers below 2^32-1,
// which is "no id" to the kernel), or a name the image knows, made of
// lower-case letters, digits, '_' and '-' and not starting with a digit or
// '-'. Names of groups ("name:group") are not accepted: a UID:GID pair says
// the same without depending on the image's /etc/group. The agent checks its
// --default-user and every assignment with it too.
func UserProblem(u string) string {
	uid, gid, pair := strings.Cut(u, ":")
	if isID(uid) && (!pair || isID(gid)) {
		return ""
	}
	if !pair && isUserName(u) {
		return ""
	}
	return fmt.Sprintf("%q is not a user: give a UID (1000), a UID:GID pair (1000:1000) or a user name the image knows "+
		"(lower-case letters, digits, '_' and '-', e.g. nobody)", u)
}

func isID(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n < math.MaxUint32
}

func isUserName(s string) bool {
	if s == "" || len(s) > maxUserName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || c == '_':
		case ('0' <= c && c <= '9' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// IsDNSLabel reports whether s is an RFC 1123 label: what Docker accepts as
// a network alias and any resolver as a host name. A sidecar's name must be
// one, since the task reaches the sidecar by it. The agent checks an
// assignment's sidecar names with it again, whatever the coordinator let
// through, so that a task is refused before anything is started for it
// rather than started with a sidecar it cannot reach.
func IsDNSLabel(s string) bool {
	if len(s) < 1 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// AllowedCapabilities are the Linux capabilities a spec may add back to the
// task's container, which otherwise runs with every capability dropped. They
// are canonical names: upper case, without the "CAP_" prefix. The list is
// Docker's default set except SETFCAP: what an ordinary "docker run" grants,
// so no task can get more than that. Anything that reaches the host or the
// network stack beyond it (SYS_ADMIN, NET_ADMIN, SYS_PTRACE, ALL, ...) is
// refused. The agent uses this same list to check what it is asked to grant;
// treat it as read-only.
var AllowedCapabilities = []string{
	"CHOWN",
	"DAC_OVERRIDE",
	"FOWNER",
	"FSETID",
	"KILL",
	"NET_BIND_SERVICE",
	"SETGID",
	"SETUID",
	"SETPCAP",
	"NET_RAW",
	"SYS_CHROOT",
	"AUDIT_WRITE",
	"MKNOD",
}

// NormalizeCapability returns the canonical name of a capability that may be
// added ("cap_chown", "Chown" and "CAP_CHOWN" all give "CHOWN"), or an error
// naming it and the allowed list.
func NormalizeCapability(name string) (string, error) {
	upper := strings.ToUpper(name)
	c := strings.TrimPrefix(upper, "CAP_")
	if slices.Contains(AllowedCapabilities, c) {
		return c, nil
	}
	switch {
	case name == "":
		return "", fmt.Errorf("empty capability name: give one of %s", strings.Join(AllowedCapabilities, ", "))
	case c == "ALL":
		return "", fmt.Errorf("%q would grant every capability: add only the ones the task needs, from %s", name, strings.Join(AllowedCapabilities, ", "))
	}
	return "", fmt.Errorf("%q may not be added: a task may add back only %s", name, strings.Join(AllowedCapabilities, ", "))
}

// normalizeCapabilities returns caps in canonical form without repeats, or a
// *FieldError for the first one that may not be added.
func normalizeCapabilities(caps []string) ([]string, error) {
	if len(caps) == 0 {
		return caps, nil
	}
	out := make([]string, 0, len(caps))
	for i, c := range caps {
		n, err := NormalizeCapability(c)
		if err != nil {
			return nil, &FieldError{Field: fmt.Sprintf("spec.capabilities[%d]", i), Problem: err.Error()}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f || r == '\u0085' || r == '\u00a0' || r == '\u2028' || r == '\u2029'
}

// envKeyProblem follows Kubernetes' relaxed rule (printable ASCII but "=")
// rather than the shell's [A-Za-z_][A-Za-z0-9_]*: programs read names like
// "spring.profiles.active" from their environment, and refusing them here
// would push users to wrap their command in a shell just to set one.
func envKeyProblem(k string) string {
	if k == "" {
		return "empty variable name: write KEY=VALUE"
	}
	if len(k) > MaxEnvKeyBytes {
		return fmt.Sprintf("variable name of %d bytes is longer than %d", len(k), MaxEnvKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '=' {
			return fmt.Sprintf("variable name %q contains '=': the name ends at the first '='", k)
		}
		if c < 0x21 || c > 0x7e {
			return fmt.Sprintf("variable name %q contains a space, control or non-ASCII character: use printable ASCII, e.g. MY_VAR", k)
		}
	}
	return ""
}

// MaxGroupBytes bounds a spec's group: a name people type and read in a
// why-queued reason, not a payload.
const MaxGroupBytes = 64

// ValidGroup reports whether g is a group's name as a spec's group may be:
// letters, digits and . _ / -, at most MaxGroupBytes. A user's groups and a
// secret's group:NAME grants name the same groups, so they are held to it.
func ValidGroup(g string) bool { return g != "" && len(g) <= MaxGroupBytes && isLabelWord(g) }

// ValidName reports whether n is a task's name as spec.name may be: letters,
// digits and . _ - : / +, starting with a letter or digit, at most
// MaxNameBytes. Names are shown in tables and typed as filters, so no
// spaces, quotes or control characters; a name is not an id and need not be
// unique.
func ValidName(n string) bool {
	if n == "" || len(n) > MaxNameBytes || !isAlnum(n[0]) {
		return false
	}
	for i := 0; i < len(n); i++ {
		switch c := n[i]; {
		case isAlnum(c), c == '.', c == '_', c == '-', c == ':', c == '/', c == '+':
		default:
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// labelProblem keeps labels to a charset that survives being a Docker label,
// a SQL array element and a shell word without quoting.
func labelProblem(l string) string {
	if len(l) > MaxLabelBytes {
		return fmt.Sprintf("label %s is longer than %d bytes", clip(l), MaxLabelBytes)
	}
	key, value, hasValue := strings.Cut(l, "=")
	if key == "" {
		return fmt.Sprintf("label %q has no key: write key or key=value", l)
	}
	if !isLabelWord(key) {
		return fmt.Sprintf("label %q: the key may use only letters, digits and . _ / -", l)
	}
	if hasValue {
		if value == "" {
			return fmt.Sprintf("label %q has an empty value: write %s or %s=VALUE", l, key, key)
		}
		if !isLabelWord(value) {
			return fmt.Sprintf("label %q: the value may use only letters, digits and . _ / -", l)
		}
	}
	return ""
}

func isLabelWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '/', c == '-':
		default:
			return false
		}
	}
	return s != ""
}

// ParseEnv splits one "KEY=VALUE" entry as given to the CLI's --env. The value
// may be empty and may contain "="; only the first "=" separates. An entry
// without "=" is refused rather than read from the caller's own environment
// (as docker does): the task runs on another machine, and silently copying a
// local variable there is a leak nobody asked for.
func ParseEnv(entry string) (key, value string, err error) {
	key, value, ok := strings.Cut(entry, "=")
	if !ok {
		return "", "", fmt.Errorf("--env %s: want KEY=VALUE", clip(entry))
	}
	if problem := envKeyProblem(key); problem != "" {
		return "", "", fmt.Errorf("--env %s: %s", clip(entry), problem)
	}
	if strings.IndexByte(value, 0) >= 0 {
		return "", "", fmt.Errorf("--env %q: the value contains a NUL byte", entry)
	}
	if len(value) > MaxEnvValueBytes {
		return "", "", fmt.Errorf("--env %s: the value is %d bytes, more than %d: pass large values in a file instead", clip(key+"="), len(value), MaxEnvValueBytes)
	}
	return key, value, nil
}

// LabelProblem returns why a label is malformed, or "" if it is well formed.
// It is exported so that other places that take labels (enrollment tokens,
// node labels) apply the same rule as task specs.
func LabelProblem(l string) string { return labelProblem(l) }

package taskspec

import (
	"fmt"
	"math"
	"slices"
	"strings"

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
// first problem it finds (fields in declaration order, env keys sorted, so the
// same spec always gets the same answer). It checks only what can be known
// without a node: whether the image exists or a label matches any node is for
// the scheduler to say.
func Validate(spec *podiumv1.TaskSpec) error {
	if spec == nil {
		return fieldErr("spec", "required: send a task spec with at least an image")
	}
	if spec.GetImage() == "" {
		return fieldErr("spec.image", "required: name the container image to run, e.g. alpine:3")
	}
	if i := strings.IndexFunc(spec.GetImage(), isSpaceOrControl); i >= 0 {
		return fieldErr("spec.image", "%q contains a space or control character: an image reference is one word, e.g. alpine:3", spec.GetImage())
	}
	for i, arg := range spec.GetCommand() {
		if strings.IndexByte(arg, 0) >= 0 {
			return fieldErr(fmt.Sprintf("spec.command[%d]", i), "contains a NUL byte, which no process argument can hold")
		}
	}
	keys := make([]string, 0, len(spec.GetEnv()))
	for k := range spec.GetEnv() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field := fmt.Sprintf("spec.env[%q]", k)
		if problem := envKeyProblem(k); problem != "" {
			return fieldErr(field, "%s", problem)
		}
		if strings.IndexByte(spec.GetEnv()[k], 0) >= 0 {
			return fieldErr(field, "value contains a NUL byte, which no environment variable can hold")
		}
	}
	if wd := spec.GetWorkingDir(); wd != "" {
		if !strings.HasPrefix(wd, "/") {
			return fieldErr("spec.working_dir", "%q is relative: give an absolute path inside the container, e.g. /workspace", wd)
		}
		if strings.IndexByte(wd, 0) >= 0 {
			return fieldErr("spec.working_dir", "contains a NUL byte")
		}
	}
	for i, l := range spec.GetLabels() {
		if problem := labelProblem(l); problem != "" {
			return fieldErr(fmt.Sprintf("spec.labels[%d]", i), "%s", problem)
		}
	}
	if r := spec.GetResources(); r != nil {
		if math.IsNaN(r.GetCpu()) || math.IsInf(r.GetCpu(), 0) || r.GetCpu() < 0 {
			return fieldErr("spec.resources.cpu", "%v is not a number of cores: give 0 (no limit) or more, e.g. 0.5", r.GetCpu())
		}
		if r.GetMemoryMb() < 0 {
			return fieldErr("spec.resources.memory_mb", "%d is negative: give 0 (no limit) or a number of MiB", r.GetMemoryMb())
		}
		if r.GetPids() < 0 {
			return fieldErr("spec.resources.pids", "%d is negative: give 0 (no limit) or a process count", r.GetPids())
		}
	}
	if spec.GetTimeoutSeconds() < 0 {
		return fieldErr("spec.timeout_seconds", "%d is negative: give 0 (no timeout) or a number of seconds", spec.GetTimeoutSeconds())
	}
	if spec.GetMaxAttempts() < 0 {
		return fieldErr("spec.max_attempts", "%d is negative: give 0 or 1 (one attempt) or more", spec.GetMaxAttempts())
	}
	if spec.GetCancelGraceSeconds() < 0 {
		return fieldErr("spec.cancel_grace_seconds", "%d is negative: give 0 (the default of 30 s) or a number of seconds", spec.GetCancelGraceSeconds())
	}
	return nil
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

// labelProblem keeps labels to a charset that survives being a Docker label,
// a SQL array element and a shell word without quoting.
func labelProblem(l string) string {
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
		return "", "", fmt.Errorf("--env %q: want KEY=VALUE", entry)
	}
	if problem := envKeyProblem(key); problem != "" {
		return "", "", fmt.Errorf("--env %q: %s", entry, problem)
	}
	if strings.IndexByte(value, 0) >= 0 {
		return "", "", fmt.Errorf("--env %q: the value contains a NUL byte", entry)
	}
	return key, value, nil
}

// LabelProblem returns why a label is malformed, or "" if it is well formed.
// It is exported so that other places that take labels (enrollment tokens,
// node labels) apply the same rule as task specs.
func LabelProblem(l string) string { return labelProblem(l) }

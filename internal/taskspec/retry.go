package taskspec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The bounds of attempts and of a retry policy (spec.retry).
const (
	// MaxAttempts bounds max_attempts and retry.attempts: the most runs one
	// task gets in all. Each is a container started on a node and a section
	// of the task's log; a task that fails a hundred times has something
	// wrong that another try will not fix.
	MaxAttempts = 100
	// MaxRetryExitCodes bounds retry.on_exit_codes: there are only 255
	// failing codes, and a list of more than a few is "any" written out
	// (leave it out, and every non-zero code is retried).
	MaxRetryExitCodes = 64
	// DefaultRetryBackoff and DefaultRetryMaxBackoff are what a retry
	// policy without backoff or max_backoff waits.
	DefaultRetryBackoff    = 10 * time.Second
	DefaultRetryMaxBackoff = 5 * time.Minute
	// MinRetryBackoff is the shortest backoff: a task that fails at once and
	// is retried at once turns a broken job into a busy loop on its node.
	MinRetryBackoff = time.Second
	// MaxRetryBackoff bounds backoff and max_backoff: a queued task waiting
	// longer than this for its next try is better resubmitted when whatever
	// it waits for is back (podium task rerun).
	MaxRetryBackoff = time.Hour
)

// RetryReasonTimeout is the reason a node reports for a task it stopped at
// its timeout: such a failure is never retried, whatever its exit code (a
// task that ran out of time would only run out of it again).
const RetryReasonTimeout = "timeout"

// RetryReasonOOM starts the reason a node reports for a task the kernel
// killed for memory ("oom: the task used more than its memory limit ...";
// the agent's executor.ReasonOOM). retry.on_oom matches it.
const RetryReasonOOM = "oom"

// checkAttempts checks max_attempts and retry together, and returns the
// number of attempts the spec allows in all when it has a retry policy (0
// when it has none). They are one budget: every attempt counts against it,
// whatever started it (the first placement, a node lost under
// retry_on_node_loss, an assignment a node never took, a failure under
// retry), so a user never has to add two numbers up.
func checkAttempts(spec *podiumv1.TaskSpec) (int32, error) {
	ma := spec.GetMaxAttempts()
	if ma < 0 {
		return 0, fieldErr("spec.max_attempts", "%d is negative: give 0 or 1 (one attempt) or more", ma)
	}
	if ma > MaxAttempts {
		return 0, fieldErr("spec.max_attempts", "%d is more than %d: give the most attempts the task should get in all, e.g. 3", ma, MaxAttempts)
	}
	r := spec.GetRetry()
	if r == nil {
		return 0, nil
	}
	const f = "spec.retry"
	n := r.GetAttempts()
	switch {
	case n < 0:
		return 0, fieldErr(f+".attempts", "%d is negative: give the most attempts in all, the first included, e.g. 3", n)
	case n > MaxAttempts:
		return 0, fieldErr(f+".attempts", "%d is more than %d: give the most attempts in all, the first included, e.g. 3", n, MaxAttempts)
	case n != 0 && ma != 0 && n != ma:
		return 0, fieldErr(f+".attempts", "%d differs from spec.max_attempts %d: both are the most attempts the task gets in all, "+
			"the first included, whatever starts the next one; give one of them (or the same number in both)", n, ma)
	case n == 0 && ma == 0:
		return 0, fieldErr(f+".attempts", "required: give the most attempts in all, the first included, e.g. 3 (two retries)")
	}
	if n == 0 {
		n = ma
	}
	if n == 1 {
		return 0, fieldErr(f+".attempts", "1 is the first attempt alone, so nothing would be retried: give 2 or more, or leave retry out")
	}
	codes := r.GetOnExitCodes()
	if len(codes) > MaxRetryExitCodes {
		return 0, fieldErr(f+".on_exit_codes", "has %d codes, more than %d: leave on_exit_codes out to retry after any non-zero exit code", len(codes), MaxRetryExitCodes)
	}
	for i, c := range codes {
		field := fmt.Sprintf("%s.on_exit_codes[%d]", f, i)
		switch {
		case c == 0:
			return 0, fieldErr(field, "0 is success, which is never retried: list the exit codes of failures, 1 to 255")
		case c < 0 || c > 255:
			return 0, fieldErr(field, "%d is not an exit code: give 1 to 255 (137 is a SIGKILL, e.g. an out-of-memory kill)", c)
		}
		if j := slices.Index(codes[:i], c); j >= 0 {
			return 0, fieldErr(field, "%d is already listed at on_exit_codes[%d]: give each code once", c, j)
		}
	}
	b, mb := r.GetBackoffSeconds(), r.GetMaxBackoffSeconds()
	maxS := int64(MaxRetryBackoff / time.Second)
	switch {
	case b < 0:
		return 0, fieldErr(f+".backoff_seconds", "%d is negative: give 0 (the default of %s) or a wait of 1 s to %s", b, DefaultRetryBackoff, MaxRetryBackoff)
	case b > maxS:
		return 0, fieldErr(f+".backoff_seconds", "%d s is more than %s: give a wait of 1 s to %s (and resubmit later with podium task rerun if it needs longer)", b, MaxRetryBackoff, MaxRetryBackoff)
	case mb < 0:
		return 0, fieldErr(f+".max_backoff_seconds", "%d is negative: give 0 (the default of %s) or a wait of 1 s to %s", mb, DefaultRetryMaxBackoff, MaxRetryBackoff)
	case mb > maxS:
		return 0, fieldErr(f+".max_backoff_seconds", "%d s is more than %s: give a wait of at most %s", mb, MaxRetryBackoff, MaxRetryBackoff)
	}
	if eb := cmp.Or(b, int64(DefaultRetryBackoff/time.Second)); mb != 0 && mb < eb {
		return 0, fieldErr(f+".max_backoff_seconds", "%d s is shorter than the backoff of %d s: give at least the backoff, or leave max_backoff out", mb, eb)
	}
	return n, nil
}

// normalizeRetry writes what a retry policy means into the spec: the
// attempts (into retry.attempts and max_attempts alike, so that the
// coordinator and the agent's fencing, which read max_attempts, agree) and
// the backoffs with their defaults, so the stored spec says what will happen.
// It writes only what differs.
func normalizeRetry(spec *podiumv1.TaskSpec, attempts int32) {
	r := spec.GetRetry()
	if r == nil {
		return
	}
	if spec.GetMaxAttempts() != attempts {
		spec.MaxAttempts = attempts
	}
	if r.GetAttempts() != attempts {
		r.Attempts = attempts
	}
	b, mb := RetryBackoffs(r)
	if r.GetBackoffSeconds() != int64(b/time.Second) {
		r.BackoffSeconds = int64(b / time.Second)
	}
	if r.GetMaxBackoffSeconds() != int64(mb/time.Second) {
		r.MaxBackoffSeconds = int64(mb / time.Second)
	}
}

// RetryBackoffs are a policy's first backoff and its ceiling, defaults
// applied: backoff 0 means DefaultRetryBackoff, max_backoff 0 means
// DefaultRetryMaxBackoff or the backoff if that is longer. Both are clamped
// to [MinRetryBackoff, MaxRetryBackoff], so a policy stored before the bounds
// (or by a client that skipped them) cannot make the scheduler wait forever.
func RetryBackoffs(r *podiumv1.RetryPolicy) (backoff, maxBackoff time.Duration) {
	clamp := func(d time.Duration) time.Duration { return min(max(d, MinRetryBackoff), MaxRetryBackoff) }
	backoff = DefaultRetryBackoff
	if s := r.GetBackoffSeconds(); s > 0 {
		backoff = clamp(time.Duration(min(s, int64(MaxRetryBackoff/time.Second))) * time.Second)
	}
	maxBackoff = max(DefaultRetryMaxBackoff, backoff)
	if s := r.GetMaxBackoffSeconds(); s > 0 {
		maxBackoff = clamp(time.Duration(min(s, int64(MaxRetryBackoff/time.Second))) * time.Second)
	}
	return backoff, max(maxBackoff, backoff)
}

// RetryBackoff is how long a task waits before attempt next (2 for the first
// retry): the backoff, doubled for each attempt after the second, up to
// max_backoff. The coordinator adds jitter on top (up to a tenth more), never
// less, so the backoff a spec gives is a floor a user can count on.
func RetryBackoff(r *podiumv1.RetryPolicy, next int32) time.Duration {
	d, ceiling := RetryBackoffs(r)
	for i := int32(2); i < next && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// RetryCause says whether an attempt that ended failed, with exitCode (nil
// when it has none) and the node's reason, is run again under policy r, and
// if so, what for, as the user reads it ("exit code 1", "an out-of-memory
// kill"). It says no without a policy, for a failure without an exit code
// (the image could not be pulled, the node's engine went away: Podium's
// failures, not the task's), and for a timeout. With neither on_exit_codes
// nor on_oom every non-zero exit code is retried; otherwise on_exit_codes
// matches the exit code whatever caused it (137 matches an out-of-memory
// kill too), and on_oom any out-of-memory kill.
func RetryCause(r *podiumv1.RetryPolicy, exitCode *int32, reason string) (string, bool) {
	if r == nil || exitCode == nil || reason == RetryReasonTimeout {
		return "", false
	}
	code := *exitCode
	oom := reason == RetryReasonOOM || strings.HasPrefix(reason, RetryReasonOOM+":")
	switch {
	case oom && r.GetOnOom():
		return "an out-of-memory kill", true
	case code == 0:
		return "", false
	case len(r.GetOnExitCodes()) == 0 && !r.GetOnOom(), slices.Contains(r.GetOnExitCodes(), code):
		return fmt.Sprintf("exit code %d", code), true
	}
	return "", false
}

package taskspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The example parses to the policy it says, and Validate writes the
// attempts into max_attempts as well: one budget, stored twice.
func TestRetryParsesAndIsOneBudgetWithMaxAttempts(t *testing.T) {
	spec, err := Parse(strings.NewReader("image: a\nretry: {attempts: 3, on_exit_codes: [1, 137], on_oom: true, backoff: 10s, max_backoff: 5m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1, 137}, OnOom: true, BackoffSeconds: 10, MaxBackoffSeconds: 300}
	if !proto.Equal(spec.GetRetry(), want) {
		t.Fatalf("retry = %v, want %v", spec.GetRetry(), want)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	if spec.GetMaxAttempts() != 3 {
		t.Errorf("max_attempts = %d after Validate, want 3 (retry.attempts is the same budget)", spec.GetMaxAttempts())
	}

	// max_attempts alone gives a policy its attempts, and the defaults are
	// written in, so the stored spec says what will happen.
	spec, err = Parse(strings.NewReader("image: a\nmax_attempts: 4\nretry:\n  on_exit_codes: [2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	want = &podiumv1.RetryPolicy{Attempts: 4, OnExitCodes: []int32{2}, BackoffSeconds: 10, MaxBackoffSeconds: 300}
	if !proto.Equal(spec.GetRetry(), want) || spec.GetMaxAttempts() != 4 {
		t.Fatalf("retry = %v, max_attempts %d; want %v and 4", spec.GetRetry(), spec.GetMaxAttempts(), want)
	}
	// Both, equal, are accepted; a backoff over 5 min raises the default
	// ceiling to itself.
	s := &podiumv1.TaskSpec{Image: "a", MaxAttempts: 2, Retry: &podiumv1.RetryPolicy{Attempts: 2, BackoffSeconds: 600}}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	if s.Retry.MaxBackoffSeconds != 600 {
		t.Errorf("max_backoff_seconds = %d, want 600 (the backoff, longer than the default 300)", s.Retry.MaxBackoffSeconds)
	}
	// Validating a stored (normalised) spec again changes nothing: a rerun
	// checks the old task's spec that way.
	again := proto.CloneOf(s)
	if err := Validate(again); err != nil || !proto.Equal(again, s) {
		t.Errorf("Validate of a normalised spec: %v, %v; want nil and no change", err, again)
	}
}

// Every bad retry field is refused naming the field and what to do.
func TestValidateRejectsBadRetry(t *testing.T) {
	retry := func(r *podiumv1.RetryPolicy) func(*podiumv1.TaskSpec) {
		return func(s *podiumv1.TaskSpec) { s.Retry = r }
	}
	for _, tc := range []struct {
		name           string
		mutate         func(*podiumv1.TaskSpec)
		field, problem string
	}{
		{"max_attempts over the cap", func(s *podiumv1.TaskSpec) { s.MaxAttempts = MaxAttempts + 1 }, "spec.max_attempts", "more than 100"},
		{"no attempts anywhere", retry(&podiumv1.RetryPolicy{OnOom: true}), "spec.retry.attempts", "required: give the most attempts"},
		{"one attempt", retry(&podiumv1.RetryPolicy{Attempts: 1}), "spec.retry.attempts", "nothing would be retried"},
		{"one attempt from max_attempts", func(s *podiumv1.TaskSpec) {
			s.MaxAttempts, s.Retry = 1, &podiumv1.RetryPolicy{OnOom: true}
		}, "spec.retry.attempts", "nothing would be retried"},
		{"negative attempts", retry(&podiumv1.RetryPolicy{Attempts: -2}), "spec.retry.attempts", "negative"},
		{"too many attempts", retry(&podiumv1.RetryPolicy{Attempts: 1000}), "spec.retry.attempts", "more than 100"},
		{"attempts differ from max_attempts", func(s *podiumv1.TaskSpec) {
			s.MaxAttempts, s.Retry = 5, &podiumv1.RetryPolicy{Attempts: 3}
		}, "spec.retry.attempts", "differs from spec.max_attempts 5: both are the most attempts"},
		{"exit code 0", retry(&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1, 0}}), "spec.retry.on_exit_codes[1]", "0 is success"},
		{"exit code 256", retry(&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{256}}), "spec.retry.on_exit_codes[0]", "not an exit code: give 1 to 255"},
		{"negative exit code", retry(&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{-1}}), "spec.retry.on_exit_codes[0]", "not an exit code"},
		{"exit code twice", retry(&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1, 2, 1}}), "spec.retry.on_exit_codes[2]", "already listed at on_exit_codes[0]"},
		{"too many exit codes", retry(&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: make([]int32, MaxRetryExitCodes+1)}), "spec.retry.on_exit_codes", "leave on_exit_codes out"},
		{"negative backoff", retry(&podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: -1}), "spec.retry.backoff_seconds", "negative"},
		{"backoff over an hour", retry(&podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 3601}), "spec.retry.backoff_seconds", "more than 1h0m0s"},
		{"negative max_backoff", retry(&podiumv1.RetryPolicy{Attempts: 3, MaxBackoffSeconds: -1}), "spec.retry.max_backoff_seconds", "negative"},
		{"max_backoff over an hour", retry(&podiumv1.RetryPolicy{Attempts: 3, MaxBackoffSeconds: 7200}), "spec.retry.max_backoff_seconds", "at most 1h0m0s"},
		{"max_backoff under backoff", retry(&podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 60, MaxBackoffSeconds: 30}), "spec.retry.max_backoff_seconds", "shorter than the backoff of 60 s"},
		{"max_backoff under the default backoff", retry(&podiumv1.RetryPolicy{Attempts: 3, MaxBackoffSeconds: 5}), "spec.retry.max_backoff_seconds", "shorter than the backoff of 10 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mutate(s)
			before := proto.CloneOf(s)
			err := Validate(s)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate(%v) = %v, want a *FieldError", s, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = {Field: %q, Problem: %q}, want field %q and a problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
			if !proto.Equal(s, before) {
				t.Errorf("a refused spec was changed: %v, was %v", s, before)
			}
		})
	}
}

// A spec file's retry mistakes are named by line and key, durations
// included.
func TestParseRejectsBadRetry(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"backoff without a unit", "image: a\nretry:\n  attempts: 3\n  backoff: 10\n", []string{"line 4", "retry.backoff", "has no unit"}},
		{"backoff under a second", "image: a\nretry: {attempts: 3, backoff: 500ms}\n", []string{"line 2", "whole number of seconds"}},
		{"exit codes as a number", "image: a\nretry:\n  on_exit_codes: 1\n", []string{"line 3", "retry.on_exit_codes: want a list of whole numbers"}},
		{"exit code a fraction", "image: a\nretry:\n  on_exit_codes: [1.5]\n", []string{"line 3", "want a whole number, got 1.5"}},
		{"misspelt key", "image: a\nretry:\n  attempt: 3\n", []string{"line 3", `unknown key "retry.attempt"`, `did you mean "attempts"`}},
		{"retry as a number", "image: a\nretry: 3\n", []string{"line 2", "retry: want a mapping with attempts, on_exit_codes, on_oom, backoff, max_backoff"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

// The wait doubles from the backoff for each attempt after the second, up
// to max_backoff; a policy stored outside the bounds is clamped.
func TestRetryBackoff(t *testing.T) {
	p := &podiumv1.RetryPolicy{BackoffSeconds: 10, MaxBackoffSeconds: 300}
	for next, want := range map[int32]time.Duration{
		2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second, 6: 160 * time.Second, 7: 300 * time.Second, 100: 300 * time.Second,
	} {
		if got := RetryBackoff(p, next); got != want {
			t.Errorf("RetryBackoff(attempt %d) = %s, want %s", next, got, want)
		}
	}
	if got := RetryBackoff(&podiumv1.RetryPolicy{}, 2); got != DefaultRetryBackoff {
		t.Errorf("default backoff %s, want %s", got, DefaultRetryBackoff)
	}
	if got := RetryBackoff(&podiumv1.RetryPolicy{BackoffSeconds: 1 << 40, MaxBackoffSeconds: 1 << 40}, 50); got != MaxRetryBackoff {
		t.Errorf("an unbounded stored policy waits %s, want the bound %s", got, MaxRetryBackoff)
	}
}

// Which failures a policy retries, and how the log names why.
func TestRetryCause(t *testing.T) {
	code := func(c int32) *int32 { return &c }
	codes := &podiumv1.RetryPolicy{OnExitCodes: []int32{1, 137}}
	oom := &podiumv1.RetryPolicy{OnOom: true}
	anyCode := &podiumv1.RetryPolicy{}
	for _, tc := range []struct {
		name   string
		policy *podiumv1.RetryPolicy
		exit   *int32
		reason string
		want   string // "" for not retried
	}{
		{"listed code", codes, code(1), "exit code 1", "exit code 1"},
		{"code not listed", codes, code(2), "exit code 2", ""},
		{"137 listed matches an OOM kill", codes, code(137), "oom: the task used more than its memory limit", "exit code 137"},
		{"on_oom", oom, code(137), "oom: the task used more than its memory limit of 64 MB", "an out-of-memory kill"},
		{"on_oom does not take other codes", oom, code(1), "exit code 1", ""},
		{"no codes, no on_oom: any non-zero", anyCode, code(3), "exit code 3", "exit code 3"},
		{"never a success", anyCode, code(0), "", ""},
		{"never a timeout", anyCode, code(137), RetryReasonTimeout, ""},
		{"never without an exit code", anyCode, nil, "image not found", ""},
		{"no policy", nil, code(1), "exit code 1", ""},
	} {
		got, ok := RetryCause(tc.policy, tc.exit, tc.reason)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: RetryCause = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

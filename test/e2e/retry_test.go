package e2e

import (
	"fmt"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// On the real engine, a task that fails until its third attempt (it reads
// $PODIUM_ATTEMPT) ends succeeded: podium run prints every attempt's output
// and, before each retry, the line saying which attempt comes, why and when,
// and exits 0, the last attempt's code.
func TestRunRetriesUntilTheTaskSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.specFile(fmt.Sprintf(`image: %s
command: [sh, -c, 'echo "attempt $PODIUM_ATTEMPT"; [ "$PODIUM_ATTEMPT" -ge 3 ] || exit 1']
retry: {attempts: 3, on_exit_codes: [1], backoff: 1s}
`, e.image))
	r := e.podium("run", "--spec", spec)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 (the third attempt's); stderr:\n%s", r.code, r.stderr)
	}
	if got, want := string(r.stdout), "attempt 1\nattempt 2\nattempt 3\n"; got != want {
		t.Errorf("stdout %q, want every attempt's output, %q", got, want)
	}
	for _, want := range []string{"→ queued: attempt 2 of 3 after exit code 1, in 1 s\n", "→ queued: attempt 3 of 3 after exit code 1, in 2 s\n",
		", attempt 3 of 3\n", "→ succeeded"} {
		if !strings.Contains(string(r.stderr), want) {
			t.Errorf("stderr does not have %q:\n%s", want, r.stderr)
		}
	}
	if tk := e.task(r.taskID(t)); tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.Attempt != 3 {
		t.Errorf("task %v on attempt %d, want succeeded on attempt 3", tk.State, tk.Attempt)
	}
}

// podium run exits with the last attempt's exit code, not the first's, and a
// code the policy does not list ends the task with no further attempt.
func TestRunExitsWithTheLastAttemptsCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.specFile(fmt.Sprintf(`image: %s
command: [sh, -c, 'exit $((PODIUM_ATTEMPT + 2))']
retry: {attempts: 5, on_exit_codes: [3], backoff: 1s}
`, e.image))
	r := e.podium("run", "--spec", spec)
	if r.code != 4 {
		t.Fatalf("exit %d, want 4 (attempt 2's code, which is not retried); stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(string(r.stderr), "→ queued: attempt 2 of 5 after exit code 3, in 1 s\n") || strings.Contains(string(r.stderr), "attempt 3") {
		t.Errorf("stderr should announce attempt 2 and no other:\n%s", r.stderr)
	}
	if tk := e.task(r.taskID(t)); tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.Attempt != 2 || tk.GetExitCode() != 4 {
		t.Errorf("task %v on attempt %d with exit code %v, want failed on attempt 2 with 4", tk.State, tk.Attempt, tk.ExitCode)
	}
}

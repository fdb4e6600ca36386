package taskspec

import (
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestConcurrencyParsesAndTakesItsDefaults(t *testing.T) {
	t.Parallel()
	spec, err := Parse(strings.NewReader("image: alpine:3\nconcurrency: {key: deploy-prod}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	c := spec.GetConcurrency()
	if c.GetKey() != "deploy-prod" || c.GetLimit() != 1 || c.GetOnConflict() != OnConflictQueue {
		t.Fatalf("concurrency = %v, want deploy-prod, limit 1, queue", c)
	}
	spec, err = Parse(strings.NewReader("image: alpine:3\nconcurrency: {key: ci/main, limit: 3, on_conflict: cancel_older}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	if c := spec.GetConcurrency(); c.GetLimit() != 3 || c.GetOnConflict() != OnConflictCancelOlder {
		t.Fatalf("concurrency = %v, want limit 3, cancel_older", c)
	}
}

func TestConcurrencyBadInputIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c          *podiumv1.Concurrency
		field, say string
	}{
		{&podiumv1.Concurrency{Limit: 1}, "spec.concurrency.key", "required"},
		{&podiumv1.Concurrency{Key: "deploy prod"}, "spec.concurrency.key", "letters, digits"},
		{&podiumv1.Concurrency{Key: strings.Repeat("k", MaxConcurrencyKeyBytes+1)}, "spec.concurrency.key", "longer than 128"},
		{&podiumv1.Concurrency{Key: "k", Limit: 1001}, "spec.concurrency.limit", "give 1 to 1000"},
		{&podiumv1.Concurrency{Key: "k", Limit: -1}, "spec.concurrency.limit", "give 1 to 1000"},
		{&podiumv1.Concurrency{Key: "k", OnConflict: "cancel"}, "spec.concurrency.on_conflict", "queue, cancel_older or cancel_newer"},
	} {
		err := Validate(&podiumv1.TaskSpec{Image: "alpine:3", Concurrency: tc.c})
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("Validate(%v) = %v, want an error on %s saying %q", tc.c, err, tc.field, tc.say)
		}
	}
}

func TestConcurrencyReasonNamesTheRunningTasks(t *testing.T) {
	t.Parallel()
	if got, want := ConcurrencyReason("deploy-prod", []string{"task_a"}), "concurrency key deploy-prod is at its limit (1 running: task_a)"; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
	if got, want := ConcurrencyReason("k", []string{"a", "b", "c", "d", "e"}), "concurrency key k is at its limit (5 running: a, b, c and 2 more)"; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

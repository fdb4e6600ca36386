package taskspec_test

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// spec.notify is bounded and checked field by field: at most 4 entries,
// http(s) URLs of at most 2048 bytes without user:password@, task events
// only, secret names that are secret names.
func TestNotifyValidate(t *testing.T) {
	ok := &podiumv1.Notify{Url: "https://ci.example.com/hook?x=1", Events: []string{"task.lost"}, Secret: "ci-key"}
	spec := &podiumv1.TaskSpec{Image: "alpine", Notify: []*podiumv1.Notify{ok, {Url: "http://10.0.0.1:8080/"}}}
	if err := taskspec.Validate(spec); err != nil {
		t.Fatalf("valid notify: %v", err)
	}
	for _, c := range []struct {
		n    []*podiumv1.Notify
		says string
	}{
		{[]*podiumv1.Notify{ok, ok, ok, ok, ok}, "spec.notify: has 5 entries, more than 4"},
		{[]*podiumv1.Notify{{}}, "spec.notify[0].url: empty"},
		{[]*podiumv1.Notify{{Url: "file:///etc/passwd"}}, `spec.notify[0].url: "file:///etc/passwd": the scheme must be http or https`},
		{[]*podiumv1.Notify{{Url: "https://u:p@ci.example.com/"}}, "user name or password"},
		{[]*podiumv1.Notify{{Url: "https:///path"}}, "has no host"},
		{[]*podiumv1.Notify{{Url: "https://ci.example.com/" + strings.Repeat("x", 2048)}}, "longer than 2048"},
		{[]*podiumv1.Notify{{Url: "https://ci.example.com/", Events: []string{"node.offline"}}}, `spec.notify[0].events[0]: "node.offline" is not an event a task sends`},
		{[]*podiumv1.Notify{{Url: "https://ci.example.com/", Events: []string{"task.lost", "task.lost"}}}, "named twice"},
		{[]*podiumv1.Notify{{Url: "https://ci.example.com/", Secret: "Bad_Name"}}, "spec.notify[0].secret"},
	} {
		err := taskspec.Validate(&podiumv1.TaskSpec{Image: "alpine", Notify: c.n})
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("notify %v: %v, want it to say %q", c.n, err, c.says)
		}
	}
	if got := taskspec.SecretNames(&podiumv1.TaskSpec{Secrets: []*podiumv1.SecretRef{{Name: "ci-key"}},
		Notify: []*podiumv1.Notify{ok, {Url: "https://x.example.com/", Secret: "other"}}}); strings.Join(got, ",") != "ci-key,other" {
		t.Fatalf("SecretNames: %v", got)
	}
}

// notify: in a YAML spec.
func TestNotifyParse(t *testing.T) {
	spec, err := taskspec.Parse(strings.NewReader(`image: alpine
notify:
  - url: https://ci.example.com/hook
    events: [task.finished]
    secret: ci-key
`))
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.GetNotify(); len(n) != 1 || n[0].GetUrl() != "https://ci.example.com/hook" || n[0].GetEvents()[0] != "task.finished" || n[0].GetSecret() != "ci-key" {
		t.Fatalf("parsed notify: %v", n)
	}
	if _, err := taskspec.Parse(strings.NewReader("image: alpine\nnotify:\n  - url: https://x.example.com/\n    sekret: x\n")); err == nil || !strings.Contains(err.Error(), "sekret") {
		t.Fatalf("unknown key in a notify entry: %v", err)
	}
}

package taskspec

import (
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestParseRejectsSidecarsAndCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // every string must appear in the error
	}{
		{"unknown sidecar key", "image: a\nsidecars:\n  - name: db\n    imgae: x\n",
			[]string{"line 4", `unknown key "sidecars[0].imgae"`, `did you mean "image"`, "sidecars[0] takes name, image, command, env, resources, readiness"}},
		{"unknown key on the item's first line", "image: a\nsidecars:\n  - nmae: db\n",
			[]string{"line 3", `unknown key "sidecars[0].nmae"`, `did you mean "name"`}},
		{"unknown readiness key names the sidecar", "image: a\nsidecars:\n  - name: db\n    image: p\n  - name: b\n    image: q\n    readiness:\n      tcp_prot: 1\n",
			[]string{"line 8", `unknown key "sidecars[1].readiness.tcp_prot"`, `did you mean "tcp_port"`, "sidecars[1].readiness takes tcp_port, http_path, http_port, command, timeout"}},
		{"unknown readiness key, flow style", "image: a\nsidecars: [{name: a, readiness: {tcp: 1}}]\n",
			[]string{"line 2", `unknown key "sidecars[0].readiness.tcp"`, "takes tcp_port"}},
		{"unknown sidecar resources key", "image: a\nsidecars:\n  - name: db\n    resources:\n      gpus: 1\n",
			[]string{"line 5", `unknown key "sidecars[0].resources.gpus"`, "sidecars[0].resources takes cpu, memory_mb, pids"}},
		{"readiness timeout_seconds is the API's name", "image: a\nsidecars:\n  - name: db\n    readiness:\n      timeout_seconds: 5\n",
			[]string{"line 5", `unknown key "sidecars[0].readiness.timeout_seconds"`, "timeout"}},
		{"misspelt capabilities", "image: a\ncapabilites: [NET_RAW]\n",
			[]string{"line 2", `unknown key "capabilites"`, `did you mean "capabilities"`, "sidecars, capabilities"}},
		{"sidecars as a string", "image: a\nsidecars: db\n",
			[]string{"line 2", "sidecars: want a list of mappings, each with name, image", `got "db"`}},
		{"sidecars as a mapping", "image: a\nsidecars:\n  name: db\n",
			[]string{"line 3", "sidecars: want a list of mappings", "got a mapping"}},
		{"sidecar as a string", "image: a\nsidecars: [db]\n",
			[]string{"line 2", "sidecars[0]: want a mapping with name, image", `got "db"`}},
		{"sidecar name as a list", "image: a\nsidecars:\n  - name: [db]\n",
			[]string{"line 3", "sidecars[0].name: want a string, got a list"}},
		{"second sidecar's image as a list", "image: a\nsidecars:\n  - name: db\n    image: x\n  - {name: e, image: [y]}\n",
			[]string{"line 5", "sidecars[1].image: want a string, got a list"}},
		{"sidecar command as a string", "image: a\nsidecars:\n  - name: db\n    command: postgres -D /x\n",
			[]string{"line 4", "sidecars[0].command: want a list of strings", "[sh, -c,"}},
		{"sidecar env as a list", "image: a\nsidecars:\n  - name: db\n    env: [A=1]\n",
			[]string{"line 4", "sidecars[0].env: want a mapping of names to values, got a list"}},
		{"sidecar cpu not a number", "image: a\nsidecars:\n  - name: db\n    resources:\n      cpu: lots\n",
			[]string{"line 5", "sidecars[0].resources.cpu: want a number", `"lots"`}},
		{"sidecar memory a fraction", "image: a\nsidecars:\n  - name: db\n    resources: {memory_mb: 1.5}\n",
			[]string{"line 4", "want a whole number, got 1.5"}},
		{"readiness as a number", "image: a\nsidecars:\n  - name: db\n    readiness: 5432\n",
			[]string{"line 4", "sidecars[0].readiness: want a mapping with tcp_port", "got 5432"}},
		{"tcp_port quoted", "image: a\nsidecars:\n  - name: db\n    readiness:\n      tcp_port: '5432'\n",
			[]string{"line 5", "sidecars[0].readiness.tcp_port: want a whole number", `"5432"`}},
		{"tcp_port a fraction", "image: a\nsidecars:\n  - name: db\n    readiness:\n      tcp_port: 54.32\n",
			[]string{"line 5", "sidecars[0].readiness.tcp_port: want a whole number, got 54.32"}},
		{"http_port overflows", "image: a\nsidecars:\n  - name: db\n    readiness:\n      http_port: 99999999999\n",
			[]string{"line 5", "sidecars[0].readiness.http_port: want a whole number that fits in 32 bits"}},
		{"readiness command as a string", "image: a\nsidecars:\n  - name: db\n    readiness:\n      command: pg_isready\n",
			[]string{"line 5", "sidecars[0].readiness.command: want a list of strings", "[sh, -c,"}},
		{"readiness timeout without unit", "image: a\nsidecars:\n  - name: db\n    readiness:\n      timeout: 30\n",
			[]string{"line 5", "sidecars[0].readiness.timeout:", "has no unit", `"30s"`}},
		{"readiness timeout without unit, flow on the item's line", "image: a\nsidecars:\n  - readiness: {timeout: 30}\n",
			[]string{"line 3", "sidecars[0].readiness.timeout:", "has no unit"}},
		{"readiness timeout negative", "image: a\nsidecars:\n  - name: db\n    readiness:\n      timeout: -1s\n",
			[]string{"line 5", "sidecars[0].readiness.timeout:", "negative"}},
		{"readiness timeout sub-second", "image: a\nsidecars:\n  - name: db\n    readiness:\n      timeout: 500ms\n",
			[]string{"line 5", "sidecars[0].readiness.timeout:", "whole number of seconds"}},
		{"readiness timeout as a list", "image: a\nsidecars:\n  - name: db\n    readiness:\n      timeout: [1m]\n",
			[]string{"line 5", "sidecars[0].readiness.timeout: want a duration", "got a list"}},
		{"duplicate sidecar key", "image: a\nsidecars:\n  - name: db\n    name: x\n",
			[]string{"line 4", `key "name" appears again (first at line 3)`}},
		{"capabilities as a string", "image: a\ncapabilities: NET_RAW\n",
			[]string{"line 2", "capabilities: want a list of strings", `"NET_RAW"`, "[NET_BIND_SERVICE]"}},
		{"capability as a list", "image: a\ncapabilities: [[NET_RAW]]\n",
			[]string{"line 2", "capabilities[0]: want a string, got a list"}},
		{"capability as a mapping", "image: a\ncapabilities:\n  - {add: NET_RAW}\n",
			[]string{"line 3", "capabilities[0]: want a string, got a mapping"}},
		// yaml.v3 on its own drops a null list item without a word.
		{"empty sidecar item", "image: a\nsidecars:\n  - name: db\n    image: x\n  -\n",
			[]string{"line 5", "sidecars[1]: empty list item: remove it"}},
		{"null sidecar", "image: a\nsidecars: [~]\n", []string{"line 2", "sidecars[0]: empty list item"}},
		{"null capability", "image: a\ncapabilities: [CHOWN, null]\n", []string{"line 2", "capabilities[1]: empty list item"}},
		{"null in a command", "image: a\ncommand: [sh, ~, x]\n", []string{"line 2", "command[1]: empty list item", `quote it ("null", "~")`}},
		{"null in a readiness command", "image: a\nsidecars:\n  - name: db\n    readiness:\n      command: [pg_isready, ~]\n",
			[]string{"line 5", "sidecars[0].readiness.command[1]: empty list item"}},
		{"two null labels", "image: a\nlabels:\n  - ~\n  - linux\n  -\n", []string{"2 problems", "line 3: labels[0]", "line 5: labels[2]"}},
		{"two problems in two sidecars", "image: a\nsidecars:\n  - name: a\n    imgae: x\n  - name: b\n    readiness: {tcp_port: x}\n",
			[]string{"2 problems", `line 4: unknown key "sidecars[0].imgae"`, `line 6: sidecars[1].readiness.tcp_port: want a whole number, got "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

func TestParseSidecarNullsAndEmpties(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       *podiumv1.TaskSpec
	}{
		{"no sidecars", "image: a\nsidecars: []\ncapabilities: []\n", &podiumv1.TaskSpec{Image: "a"}},
		{"null sidecars", "image: a\nsidecars:\ncapabilities: ~\n", &podiumv1.TaskSpec{Image: "a"}},
		{"empty readiness", "image: a\nsidecars: [{name: s, image: b, readiness: {}}]\n",
			&podiumv1.TaskSpec{Image: "a", Sidecars: []*podiumv1.Sidecar{{Name: "s", Image: "b", Readiness: &podiumv1.Readiness{}}}}},
		{"null readiness timeout", "image: a\nsidecars: [{name: s, image: b, readiness: {tcp_port: 1, timeout: ~}}]\n",
			&podiumv1.TaskSpec{Image: "a", Sidecars: []*podiumv1.Sidecar{{Name: "s", Image: "b", Readiness: &podiumv1.Readiness{TcpPort: 1}}}}},
		{"empty sidecar mapping", "image: a\nsidecars: [{}]\n", &podiumv1.TaskSpec{Image: "a", Sidecars: []*podiumv1.Sidecar{{}}}},
		{"quoted null in a command", "image: a\ncommand: [echo, 'null', \"~\"]\n", &podiumv1.TaskSpec{Image: "a", Command: []string{"echo", "null", "~"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.file))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.file, err)
			}
			if !proto.Equal(got, tc.want) {
				t.Errorf("Parse(%q) = %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}

// withSidecars is a good spec with three good sidecars, one of each kind of
// readiness, for the tests below to break one thing in.
func withSidecars() *podiumv1.TaskSpec {
	s := good()
	s.Sidecars = []*podiumv1.Sidecar{
		{
			Name:      "db",
			Image:     "postgres:16",
			Env:       map[string]string{"POSTGRES_PASSWORD": "test"},
			Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 256, Pids: 100},
			Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 30},
		},
		{
			Name:      "api",
			Image:     "example/api:1",
			Command:   []string{"serve", "--port", "8080"},
			Readiness: &podiumv1.Readiness{HttpPath: "/healthz", HttpPort: 8080},
		},
		{
			Name:      "cache",
			Image:     "redis:7",
			Readiness: &podiumv1.Readiness{Command: []string{"redis-cli", "ping"}},
		},
	}
	s.Capabilities = []string{"NET_BIND_SERVICE"}
	return s
}

func TestValidateAcceptsSidecars(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*podiumv1.TaskSpec)
	}{
		{"three sidecars", func(*podiumv1.TaskSpec) {}},
		{"no readiness", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness = nil }},
		{"empty readiness", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness = &podiumv1.Readiness{} }},
		{"name of one character", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "d" }},
		{"name of 63 characters", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = strings.Repeat("a", 63) }},
		{"name with digits and dashes", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "0db-primary-2" }},
		{"name containing task", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "task-db" }},
		{"ports at the bounds", func(s *podiumv1.TaskSpec) {
			s.Sidecars[0].Readiness.TcpPort = 1
			s.Sidecars[1].Readiness.HttpPort = 65535
		}},
		{"http path with a query", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "/health?deep=1" }},
		{"http path /", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "/" }},
		{"zero sidecar resources", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Resources = &podiumv1.Resources{} }},
		{"sidecar env key with dots", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Env["a.b"] = "" }},
		{"every allowed capability", func(s *podiumv1.TaskSpec) { s.Capabilities = slices.Clone(AllowedCapabilities) }},
		{"no capabilities", func(s *podiumv1.TaskSpec) { s.Capabilities = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withSidecars()
			tc.mutate(s)
			if err := Validate(s); err != nil {
				t.Errorf("Validate(%v) = %v, want nil", s, err)
			}
		})
	}
}

func TestValidateRejectsSidecarsAndCapabilities(t *testing.T) {
	allowed := strings.Join(AllowedCapabilities, ", ")
	for _, tc := range []struct {
		name    string
		mutate  func(*podiumv1.TaskSpec)
		field   string
		problem string
	}{
		{"nil sidecar", func(s *podiumv1.TaskSpec) { s.Sidecars[1] = nil }, "spec.sidecars[1]", "needs at least a name and an image"},
		{"missing name", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "" }, "spec.sidecars[0].name", "required"},
		{"upper-case name", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "DB" }, "spec.sidecars[0].name", `"DB" is not a DNS label`},
		{"name with underscore", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "my_db" }, "spec.sidecars[0].name", "not a DNS label"},
		{"name with a dot", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "db.local" }, "spec.sidecars[0].name", "not a DNS label"},
		{"name with a space", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "my db" }, "spec.sidecars[0].name", "not a DNS label"},
		{"name starting with -", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "-db" }, "spec.sidecars[0].name", "not starting or ending with '-'"},
		{"name ending with -", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "db-" }, "spec.sidecars[0].name", "not a DNS label"},
		{"name of 64 characters", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = strings.Repeat("a", 64) }, "spec.sidecars[0].name", "1 to 63"},
		{"non-ASCII name", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Name = "dé" }, "spec.sidecars[0].name", "not a DNS label"},
		{"name task", func(s *podiumv1.TaskSpec) { s.Sidecars[2].Name = "task" }, "spec.sidecars[2].name", `"task" is the task's own host name`},
		{"duplicate name", func(s *podiumv1.TaskSpec) { s.Sidecars[2].Name = "db" }, "spec.sidecars[2].name", `"db" is already the name of spec.sidecars[0]`},
		{"missing image", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Image = "" }, "spec.sidecars[1].image", "required"},
		{"image with a space", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Image = "postgres 16" }, "spec.sidecars[1].image", "space or control"},
		{"NUL in command", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Command = []string{"a", "b\x00"} }, "spec.sidecars[1].command[1]", "NUL"},
		{"bad env key", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Env["A B"] = "" }, `spec.sidecars[0].env["A B"]`, "space"},
		{"env value with NUL", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Env["A"] = "\x00" }, `spec.sidecars[0].env["A"]`, "NUL"},
		{"negative cpu", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Resources.Cpu = -0.5 }, "spec.sidecars[0].resources.cpu", "0 (no limit) or more"},
		{"NaN cpu", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Resources.Cpu = math.NaN() }, "spec.sidecars[0].resources.cpu", "not a number of cores"},
		{"negative memory", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Resources.MemoryMb = -1 }, "spec.sidecars[0].resources.memory_mb", "negative"},
		{"negative pids", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Resources.Pids = -1 }, "spec.sidecars[0].resources.pids", "negative"},
		{"tcp_port and http_path", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.TcpPort = 8080 }, "spec.sidecars[1].readiness", "gives tcp_port and http_path: give only one"},
		{"tcp_port and command", func(s *podiumv1.TaskSpec) { s.Sidecars[2].Readiness.TcpPort = 6379 }, "spec.sidecars[2].readiness", "gives tcp_port and command"},
		{"http_path and command", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.Command = []string{"true"} }, "spec.sidecars[1].readiness", "gives http_path and command"},
		{"all three", func(s *podiumv1.TaskSpec) {
			s.Sidecars[1].Readiness.TcpPort, s.Sidecars[1].Readiness.Command = 1, []string{"true"}
		}, "spec.sidecars[1].readiness", "gives tcp_port and http_path and command"},
		{"tcp_port negative", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness.TcpPort = -1 }, "spec.sidecars[0].readiness.tcp_port", "-1 is not a port: give 1 to 65535"},
		{"tcp_port too big", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness.TcpPort = 65536 }, "spec.sidecars[0].readiness.tcp_port", "not a port"},
		{"http_port too big", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPort = 70000 }, "spec.sidecars[1].readiness.http_port", "not a port"},
		{"http_port negative", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPort = -80 }, "spec.sidecars[1].readiness.http_port", "not a port"},
		{"http_path without http_port", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPort = 0 }, "spec.sidecars[1].readiness.http_port", "required with http_path"},
		{"http_port without http_path", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "" }, "spec.sidecars[1].readiness.http_path", "required with http_port"},
		{"tcp_port with http_port", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness.HttpPort = 80 }, "spec.sidecars[0].readiness.http_path", "required with http_port"},
		{"relative http_path", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "healthz" }, "spec.sidecars[1].readiness.http_path", "does not start with '/'"},
		{"http_path URL", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "http://api/healthz" }, "spec.sidecars[1].readiness.http_path", "does not start with '/'"},
		{"http_path with a space", func(s *podiumv1.TaskSpec) { s.Sidecars[1].Readiness.HttpPath = "/a b" }, "spec.sidecars[1].readiness.http_path", "space"},
		{"NUL in readiness command", func(s *podiumv1.TaskSpec) { s.Sidecars[2].Readiness.Command = []string{"x\x00"} }, "spec.sidecars[2].readiness.command[0]", "NUL"},
		{"negative readiness timeout", func(s *podiumv1.TaskSpec) { s.Sidecars[0].Readiness.TimeoutSeconds = -1 }, "spec.sidecars[0].readiness.timeout_seconds", "negative"},
		{"readiness timeout without a check", func(s *podiumv1.TaskSpec) {
			s.Sidecars[0].Readiness = &podiumv1.Readiness{TimeoutSeconds: 30}
		}, "spec.sidecars[0].readiness.timeout_seconds", "without a check"},
		{"capability SYS_ADMIN", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"CHOWN", "SYS_ADMIN"} }, "spec.capabilities[1]", `"SYS_ADMIN" may not be added: a task may add back only ` + allowed},
		{"capability CAP_SYS_ADMIN", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"CAP_SYS_ADMIN"} }, "spec.capabilities[0]", `"CAP_SYS_ADMIN" may not be added`},
		{"capability NET_ADMIN", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"net_admin"} }, "spec.capabilities[0]", `"net_admin" may not be added`},
		{"capability SETFCAP", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"SETFCAP"} }, "spec.capabilities[0]", "may not be added"},
		{"capability ALL", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"ALL"} }, "spec.capabilities[0]", `"ALL" would grant every capability: add only the ones the task needs, from ` + allowed},
		{"capability cap_all", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"cap_all"} }, "spec.capabilities[0]", "would grant every capability"},
		{"empty capability", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{""} }, "spec.capabilities[0]", "empty capability name: give one of " + allowed},
		{"capability with a space", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{" CHOWN"} }, "spec.capabilities[0]", `" CHOWN" may not be added`},
		{"capability prefix only", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"CAP_"} }, "spec.capabilities[0]", "may not be added"},
		{"capability twice prefixed", func(s *podiumv1.TaskSpec) { s.Capabilities = []string{"CAP_CAP_CHOWN"} }, "spec.capabilities[0]", "may not be added"},
		// Sidecars come before capabilities (declaration order).
		{"first problem wins", func(s *podiumv1.TaskSpec) {
			s.Sidecars[0].Name, s.Capabilities = "", []string{"ALL"}
		}, "spec.sidecars[0].name", "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withSidecars()
			tc.mutate(s)
			err := Validate(s)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate(%v) = %v, want a *FieldError", s, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = {Field: %q, Problem: %q}, want field %q and a problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
			if want := fe.Field + ": " + fe.Problem; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestValidateHTTPPortMessage(t *testing.T) {
	// The message the brief for sidecars promised, word for word at the start.
	s := withSidecars()
	s.Sidecars[1].Readiness.HttpPort = 0
	const want = "spec.sidecars[1].readiness.http_port: required with http_path"
	if err := Validate(s); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Validate = %v, want it to start with %q", err, want)
	}
}

func TestValidateNormalisesCapabilities(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"CHOWN"}, []string{"CHOWN"}},
		{[]string{"chown"}, []string{"CHOWN"}},
		{[]string{"CAP_CHOWN"}, []string{"CHOWN"}},
		{[]string{"cap_chown"}, []string{"CHOWN"}},
		{[]string{"Cap_Net_Bind_Service"}, []string{"NET_BIND_SERVICE"}},
		{[]string{"net_raw", "kill", "audit_write"}, []string{"NET_RAW", "KILL", "AUDIT_WRITE"}},
		// Repeats, however written, are kept once, in first-seen order.
		{[]string{"KILL", "cap_kill", "CHOWN", "kill"}, []string{"KILL", "CHOWN"}},
	} {
		s := &podiumv1.TaskSpec{Image: "a", Capabilities: slices.Clone(tc.in)}
		if err := Validate(s); err != nil {
			t.Errorf("Validate(capabilities %q) = %v", tc.in, err)
			continue
		}
		if !slices.Equal(s.Capabilities, tc.want) {
			t.Errorf("Validate(capabilities %q) left %q, want %q", tc.in, s.Capabilities, tc.want)
		}
		// Validate is idempotent.
		if err := Validate(s); err != nil || !slices.Equal(s.Capabilities, tc.want) {
			t.Errorf("second Validate(capabilities %q) = %v, left %q", tc.in, err, s.Capabilities)
		}
	}
}

func TestValidateLeavesCanonicalAndBadSpecsAlone(t *testing.T) {
	// A spec that is already canonical is not written to: its slice is the
	// very same one.
	caps := []string{"CHOWN", "KILL"}
	s := &podiumv1.TaskSpec{Image: "a", Capabilities: caps}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	if &s.Capabilities[0] != &caps[0] {
		t.Error("Validate replaced an already canonical capabilities slice")
	}
	// A spec Validate refuses is not changed at all, whatever it refuses.
	for _, bad := range []*podiumv1.TaskSpec{
		{Image: "a", Capabilities: []string{"cap_chown", "SYS_ADMIN"}},
		{Image: "a", Capabilities: []string{"cap_chown"}, Sidecars: []*podiumv1.Sidecar{{Name: "db"}}},
		{Image: "a", Capabilities: []string{"cap_chown"}, CancelGraceSeconds: -1},
	} {
		before := proto.Clone(bad)
		if err := Validate(bad); err == nil {
			t.Fatalf("Validate(%v) = nil, want an error", bad)
		}
		if !proto.Equal(bad, before) {
			t.Errorf("Validate changed a spec it refused:\n got %v\nwas %v", bad, before)
		}
	}
}

func TestNormalizeCapability(t *testing.T) {
	for _, c := range AllowedCapabilities {
		for _, in := range []string{c, strings.ToLower(c), "CAP_" + c, "cap_" + strings.ToLower(c)} {
			if got, err := NormalizeCapability(in); err != nil || got != c {
				t.Errorf("NormalizeCapability(%q) = %q, %v; want %q", in, got, err, c)
			}
		}
	}
	for _, in := range []string{"", "ALL", "SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYS_MODULE", "SETFCAP", "DAC_READ_SEARCH", "BPF", "CHOWN ", "CAP CHOWN"} {
		if got, err := NormalizeCapability(in); err == nil {
			t.Errorf("NormalizeCapability(%q) = %q, want an error", in, got)
		} else if in != "" && !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("NormalizeCapability(%q) error %q does not name it", in, err)
		}
	}
}

func TestAllowedCapabilities(t *testing.T) {
	// The list is part of the contract with users and the agent: changing it
	// is a decision, not an accident.
	want := []string{
		"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "NET_RAW", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
	}
	got := slices.Sorted(slices.Values(AllowedCapabilities))
	if !slices.Equal(got, want) {
		t.Errorf("AllowedCapabilities = %q, want %q", got, want)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range AllowedCapabilities {
		if !strings.Contains(string(doc), c) {
			t.Errorf("doc.go does not list the allowed capability %s", c)
		}
	}
}

// TestDocNamesEveryKey keeps the package doc's description of the file
// format complete: every key Parse accepts must appear in it as "key:".
func TestDocNamesEveryKey(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sections {
		for _, k := range yamlKeys(s.t) {
			if !strings.Contains(string(doc), "//\t"+k+":") && !strings.Contains(string(doc), " "+k+":") {
				t.Errorf("doc.go does not document the key %q (%s)", k, s.describe)
			}
		}
	}
}

// TestDocExampleIsValid parses and validates the spec file shown in the
// package doc, so the documentation cannot show a file Parse would refuse.
func TestDocExampleIsValid(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "//\t"); ok {
			b.WriteString(rest + "\n")
		} else if b.Len() > 0 {
			break // the first indented block is the example
		}
	}
	spec, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("Parse of the example in doc.go:\n%s\n%v", b.String(), err)
	}
	if err := Validate(spec); err != nil {
		t.Fatalf("Validate of the example in doc.go: %v", err)
	}
	if len(spec.GetSidecars()) == 0 || spec.GetSidecars()[0].GetReadiness().GetTcpPort() == 0 || len(spec.GetCapabilities()) == 0 {
		t.Errorf("the example in doc.go lost its sidecar or capabilities: %v", spec)
	}
}

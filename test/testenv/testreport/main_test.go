package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stream is go test -json's output for the events given as
// {action, package, test, output} rows.
func stream(t *testing.T, rows ...[4]string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		line, err := json.Marshal(map[string]string{"Action": r[0], "Package": r[1], "Test": r[2], "Output": r[3]})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

const pkg = "github.com/podiumhq/podium/agent/x"

// A run with a passing test, a failing one, a skip and a stand-in.
func sample(t *testing.T) string {
	return stream(t,
		[4]string{"output", pkg, "TestPass", "=== RUN   TestPass\n"},
		[4]string{"output", pkg, "TestPass", "    x_test.go:3: passing chatter\n"},
		[4]string{"pass", pkg, "TestPass", ""},
		[4]string{"output", pkg, "TestFail", "=== RUN   TestFail\n"},
		[4]string{"output", pkg, "TestFail", "    x_test.go:9: the last line before it failed\n"},
		[4]string{"output", pkg, "TestFail", "--- FAIL: TestFail (0.00s)\n"},
		[4]string{"fail", pkg, "TestFail", ""},
		[4]string{"output", pkg, "TestDevice/walk", "    x_test.go:12: cannot make a device node here\n"},
		[4]string{"output", pkg, "TestDevice/walk", "--- SKIP: TestDevice/walk (0.00s)\n"},
		[4]string{"skip", pkg, "TestDevice/walk", ""},
		[4]string{"output", pkg, "TestPrivileged", "    x_test.go:20: STAND-IN: the engine cannot start privileged containers\n"},
		[4]string{"pass", pkg, "TestPrivileged", ""},
		[4]string{"output", pkg + "/ok", "", "PASS\n"},
		[4]string{"output", pkg + "/ok", "", "ok  \t" + pkg + "/ok\t0.1s\n"},
		[4]string{"pass", pkg + "/ok", "", ""},
		[4]string{"output", pkg, "", "FAIL\n"},
		[4]string{"output", pkg, "", "FAIL\t" + pkg + "\t0.1s\n"},
		[4]string{"fail", pkg, "", ""},
	)
}

func TestReportPrintsFailuresAndListsSkipsAndStandIns(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	rep := newReporter(&out)
	rep.read(strings.NewReader(sample(t) + "not json, passed on\n"))
	unexpected := rep.summary([]expectation{{kind: skip, pkg: "agent/x", test: "TestDevice"}}, "README.md")
	got := out.String()
	for _, want := range []string{
		"    x_test.go:9: the last line before it failed\n--- FAIL: TestFail (0.00s)\n",
		"FAIL\nFAIL\t" + pkg + "\t0.1s\n",
		"not json, passed on\n",
		"ok  \t" + pkg + "/ok\t0.1s\n",
		"  skip " + pkg + " TestDevice/walk (expected): cannot make a device node here\n",
		"  stand-in " + pkg + " TestPrivileged (NOT EXPECTED): the engine cannot start privileged containers\n",
		"1 skip(s) or stand-in(s) above are not in the expected list of README.md",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q; it is:\n%s", want, got)
		}
	}
	for _, gone := range []string{"passing chatter", "=== RUN", "PASS\n"} {
		if strings.Contains(got, gone) {
			t.Errorf("the report shows %q, which go test without -json would not:\n%s", gone, got)
		}
	}
	if unexpected != 1 {
		t.Errorf("%d unexpected, want 1 (the stand-in)", unexpected)
	}
}

// A test still running when its package fails (a timeout's panic is its
// output) has its lines printed above the package's verdict.
func TestReportPrintsATestThatNeverEnded(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	rep := newReporter(&out)
	rep.read(strings.NewReader(stream(t,
		[4]string{"output", pkg, "TestHang", "    x_test.go:5: waiting for the node\n"},
		[4]string{"output", pkg, "TestHang", "panic: test timed out after 3s\n"},
		[4]string{"output", pkg, "", "FAIL\t" + pkg + "\t3.0s\n"},
		[4]string{"fail", pkg, "", ""},
	)))
	if want := "waiting for the node\npanic: test timed out after 3s\nFAIL\t" + pkg; !strings.Contains(out.String(), want) {
		t.Errorf("the report lacks %q; it is:\n%s", want, out.String())
	}
}

// The command's exit status wins; with 0, an unexpected skip or stand-in
// makes it 1.
func TestRunKeepsGoTestsExitStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	if err := os.WriteFile(events, []byte(sample(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	readme := func(entries string) string {
		p := filepath.Join(t.TempDir(), "README.md")
		if err := os.WriteFile(p, []byte("# x\n"+sectionStart+"\n"+entries+sectionEnd+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	both := readme("- skip `agent/x` `TestDevice`: no mknod\n- stand-in `agent/x` `TestPrivileged`: short bounding set\n")
	for _, tc := range []struct {
		name, expected string
		exit           string
		want           int
	}{
		{"go test failed", both, "3", 3},
		{"all expected", both, "0", 0},
		{"a stand-in not expected", readme("- skip `agent/x` `TestDevice`: no mknod\n"), "0", 1},
		{"the right test as the wrong kind", readme("- skip `agent/x` `TestDevice`: x\n- skip `agent/x` `TestPrivileged`: x\n"), "0", 1},
	} {
		var out, errb bytes.Buffer
		if got := run(tc.expected, []string{"sh", "-c", "cat " + events + "; exit " + tc.exit}, &out, &errb); got != tc.want {
			t.Errorf("%s: exit %d, want %d; output:\n%s%s", tc.name, got, tc.want, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if got := run(filepath.Join(dir, "missing.md"), []string{"true"}, &out, &errb); got != 2 || !strings.Contains(errb.String(), "missing.md") {
		t.Errorf("a missing expected list: exit %d (%s), want 2 naming the file", got, errb.String())
	}
}

// Every entry of README.md's list names a test that exists, in a package
// that exists.
func TestREADMEListsExistingTests(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := parseExpected(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		top, _, _ := strings.Cut(e.test, "/")
		files, _ := filepath.Glob(filepath.Join(root, e.pkg, "*_test.go"))
		found := false
		def := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(top) + `\(t \*testing\.T\)`)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || def.Match(b)
		}
		if !found {
			t.Errorf("README.md expects a %s of %s in %s, which has no such test", e.kind, e.test, e.pkg)
		}
	}
}

// The report ends with where the time went: the slowest packages and
// top-level tests, slowest first; a subtest's time is its parent's.
func TestReportListsTheSlowestTests(t *testing.T) {
	t.Parallel()
	var in strings.Builder
	for _, e := range []map[string]any{
		{"Action": "pass", "Package": pkg, "Test": "TestQuick", "Elapsed": 0.5},
		{"Action": "pass", "Package": pkg, "Test": "TestSlow/part", "Elapsed": 90.0},
		{"Action": "pass", "Package": pkg, "Test": "TestSlow", "Elapsed": 95.0},
		{"Action": "fail", "Package": pkg, "Test": "TestMiddle", "Elapsed": 12.0},
		{"Action": "fail", "Package": pkg, "Elapsed": 110.0},
		{"Action": "pass", "Package": pkg + "/ok", "Elapsed": 1.0},
	} {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(line)
		in.WriteByte('\n')
	}
	var out bytes.Buffer
	rep := newReporter(&out)
	rep.read(strings.NewReader(in.String()))
	rep.summary(nil, "README.md")
	got := out.String()
	want := "\nSlowest packages:\n" +
		"    110.0s  " + pkg + "\n" +
		"      1.0s  " + pkg + "/ok\n" +
		"\nSlowest tests:\n" +
		"     95.0s  " + pkg + " TestSlow\n" +
		"     12.0s  " + pkg + " TestMiddle\n" +
		"      0.5s  " + pkg + " TestQuick\n"
	if !strings.Contains(got, want) {
		t.Fatalf("the report does not list the slowest as\n%s\nit printed:\n%s", want, got)
	}
}

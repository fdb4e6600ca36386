// Command testreport runs `go test -json ...` and prints what `go test`
// without -json would (package results as they come, and the whole output
// of each test that fails), then a list of every test that was skipped or
// checked a stand-in (testenv.StandIn) and why. It exits with go test's
// status if that is not 0, and otherwise with 1 if a skip or stand-in ran
// that the expected list (a marked section of README.md) does not name.
//
//	testreport -expected README.md -- go test -json -count=1 ./...
//
// The section lies between the lines <!-- expected-skips --> and
// <!-- /expected-skips -->; each entry is a line
//
//   - skip `agent/taskfile` `TestDevicesAreNotOpened`: the machine condition, and why
//
// (or "- stand-in ..."), naming the package by its path in the module and
// the test, which covers its subtests. Other lines in the section are
// ignored.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/podiumhq/podium/test/testenv"
)

func main() {
	expectedFile := flag.String("expected", "README.md", "the file whose <!-- expected-skips --> section lists the skips and stand-ins expected")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testreport [-expected README.md] -- go test -json [flags] [packages]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*expectedFile, flag.Args(), os.Stdout, os.Stderr))
}

// run runs the command, reports on its output and returns the exit code.
func run(expectedFile string, command []string, stdout, stderr io.Writer) int {
	doc, err := os.ReadFile(expectedFile)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 2
	}
	expected, err := parseExpected(doc)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %s: %v\n", expectedFile, err)
		return 2
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 2
	}
	// An interrupt reaches go test too (the same process group); this
	// process reads on until go test has ended, to report what ran.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testreport: start %s: %v\n", strings.Join(command, " "), err)
		return 2
	}
	rep := newReporter(stdout)
	rep.read(out)
	waitErr := cmd.Wait()
	unexpected := rep.summary(expected, expectedFile)
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		return exit.ExitCode()
	case waitErr != nil:
		fmt.Fprintf(stderr, "testreport: %s: %v\n", strings.Join(command, " "), waitErr)
		return 2
	case unexpected > 0:
		return 1
	}
	return 0
}

// event is a line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64 // seconds, on a test's or package's pass and fail
	ImportPath string  // build-output, build-fail
}

// timed is how long a top-level test took, for the slowest list.
type timed struct {
	pkg, test string
	seconds   float64
}

// slowestShown is how many of the slowest tests the report lists: where
// make test's time goes, which is what to look at before it grows.
const slowestShown = 12

// kind is what a reported test did instead of its whole check.
type kind string

const (
	skip    kind = "skip"
	standIn kind = "stand-in"
)

// noted is a skip or stand-in that ran.
type noted struct {
	kind    kind
	pkg     string
	test    string
	reasons []string
}

type reporter struct {
	w io.Writer
	// output holds each running test's lines until it ends: printed if it
	// fails, dropped if it passes.
	output map[string][]string
	noted  []noted
	// standIns are the stand-in reasons of each running test.
	standIns map[string][]string
	// tests are the top-level tests that ended, with their time; packages
	// are the packages' times.
	tests, packages []timed
}

func newReporter(w io.Writer) *reporter {
	return &reporter{w: w, output: map[string][]string{}, standIns: map[string][]string{}}
}

var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

func key(pkg, test string) string { return pkg + "\x00" + test }

// read consumes the JSON stream, printing as it goes.
func (r *reporter) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Not test2json's: pass it on as it is.
			fmt.Fprintf(r.w, "%s\n", line)
			continue
		}
		r.handle(ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(r.w, "testreport: reading go test's output: %v\n", err)
	}
	// Whatever never ended (a timeout, a crash of the test binary) was
	// flushed by its package's end; anything left is printed now.
	r.flushAll()
}

func (r *reporter) handle(ev event) {
	switch {
	case ev.Action == "build-output":
		fmt.Fprint(r.w, ev.Output)
	case ev.Test == "":
		switch ev.Action {
		case "output":
			if ev.Output == "PASS\n" {
				break // go test without -v prints only the ok line after it
			}
			if strings.HasPrefix(ev.Output, "FAIL") {
				// Its failing tests' lines go above the package's verdict.
				r.flushPackage(ev.Package)
			}
			fmt.Fprint(r.w, ev.Output)
		case "fail":
			// A package that fails with tests still running (a timeout, a
			// panic) has their lines printed: the last of them say where.
			r.flushPackage(ev.Package)
			r.packages = append(r.packages, timed{pkg: ev.Package, seconds: ev.Elapsed})
		case "pass":
			r.packages = append(r.packages, timed{pkg: ev.Package, seconds: ev.Elapsed})
		}
	default:
		k := key(ev.Package, ev.Test)
		if (ev.Action == "pass" || ev.Action == "fail") && !strings.Contains(ev.Test, "/") {
			r.tests = append(r.tests, timed{pkg: ev.Package, test: ev.Test, seconds: ev.Elapsed})
		}
		switch ev.Action {
		case "output":
			if m := logLine.FindStringSubmatch(strings.TrimRight(ev.Output, "\n")); m != nil {
				if why, ok := strings.CutPrefix(m[1], testenv.StandInMarker); ok {
					r.standIns[k] = append(r.standIns[k], why)
				}
			}
			if !strings.HasPrefix(ev.Output, "=== ") {
				r.output[k] = append(r.output[k], ev.Output)
			}
		case "fail":
			r.flush(k)
			r.noteStandIns(ev)
		case "pass":
			r.noteStandIns(ev)
			delete(r.output, k)
		case "skip":
			r.noteStandIns(ev)
			r.noted = append(r.noted, noted{kind: skip, pkg: ev.Package, test: ev.Test, reasons: skipReasons(r.output[k])})
			delete(r.output, k)
		}
	}
}

// noteStandIns records the test's stand-ins, if it logged any.
func (r *reporter) noteStandIns(ev event) {
	k := key(ev.Package, ev.Test)
	if why := r.standIns[k]; len(why) > 0 {
		r.noted = append(r.noted, noted{kind: standIn, pkg: ev.Package, test: ev.Test, reasons: why})
	}
	delete(r.standIns, k)
}

// skipReasons are the log lines a skipped test wrote, its t.Skip message
// among them, without the --- SKIP line.
func skipReasons(lines []string) []string {
	var out []string
	for _, l := range lines {
		l = strings.TrimRight(l, "\n")
		if strings.HasPrefix(l, "--- SKIP") || strings.TrimSpace(l) == "" {
			continue
		}
		if m := logLine.FindStringSubmatch(l); m != nil {
			if strings.HasPrefix(m[1], testenv.StandInMarker) {
				continue // listed as the stand-in it is
			}
			l = m[1]
		}
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

func (r *reporter) flush(k string) {
	for _, l := range r.output[k] {
		fmt.Fprint(r.w, l)
	}
	delete(r.output, k)
}

func (r *reporter) flushPackage(pkg string) {
	var ks []string
	for k := range r.output {
		if strings.HasPrefix(k, pkg+"\x00") {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	for _, k := range ks {
		r.flush(k)
	}
}

func (r *reporter) flushAll() {
	var ks []string
	for k := range r.output {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		r.flush(k)
	}
}

// summary prints the skips and stand-ins that ran, marking those the
// expected list does not name, and returns how many it does not.
// slowest lists the packages and the top-level tests that took longest.
func (r *reporter) slowest() {
	for _, list := range []struct {
		what  string
		items []timed
	}{{"packages", r.packages}, {"tests", r.tests}} {
		if len(list.items) == 0 {
			continue
		}
		sort.SliceStable(list.items, func(i, j int) bool { return list.items[i].seconds > list.items[j].seconds })
		fmt.Fprintf(r.w, "\nSlowest %s:\n", list.what)
		for _, t := range list.items[:min(len(list.items), slowestShown)] {
			fmt.Fprintf(r.w, "  %7.1fs  %s\n", t.seconds, strings.TrimSpace(t.pkg+" "+t.test))
		}
	}
}

func (r *reporter) summary(expected []expectation, expectedFile string) (unexpected int) {
	r.slowest()
	fmt.Fprintf(r.w, "\nSkips and stand-ins (%d):\n", len(r.noted))
	if len(r.noted) == 0 {
		fmt.Fprintln(r.w, "  none")
	}
	sort.SliceStable(r.noted, func(i, j int) bool {
		return key(r.noted[i].pkg, r.noted[i].test) < key(r.noted[j].pkg, r.noted[j].test)
	})
	for _, n := range r.noted {
		mark := "expected"
		if !isExpected(expected, n) {
			mark = "NOT EXPECTED"
			unexpected++
		}
		fmt.Fprintf(r.w, "  %s %s %s (%s): %s\n", n.kind, n.pkg, n.test, mark, strings.Join(n.reasons, " / "))
	}
	if unexpected > 0 {
		fmt.Fprintf(r.w, "testreport: %d skip(s) or stand-in(s) above are not in the expected list of %s: "+
			"make the test check what its name says on this machine, or, if the machine cannot, add it there with the condition that causes it\n",
			unexpected, expectedFile)
	}
	return unexpected
}

// expectation is an entry of the expected list.
type expectation struct {
	kind kind
	pkg  string // the package's path in the module, e.g. agent/taskfile
	test string
}

func isExpected(list []expectation, n noted) bool {
	for _, e := range list {
		if e.kind != n.kind || (n.pkg != e.pkg && !strings.HasSuffix(n.pkg, "/"+e.pkg)) {
			continue
		}
		if n.test == e.test || strings.HasPrefix(n.test, e.test+"/") {
			return true
		}
	}
	return false
}

const (
	sectionStart = "<!-- expected-skips -->"
	sectionEnd   = "<!-- /expected-skips -->"
)

var entryRe = regexp.MustCompile("^- (skip|stand-in) `([^`]+)` `([^`]+)`")

// parseExpected reads the entries of the marked section of doc.
func parseExpected(doc []byte) ([]expectation, error) {
	_, rest, ok := bytes.Cut(doc, []byte(sectionStart))
	if !ok {
		return nil, fmt.Errorf("no line %s: the expected skips and stand-ins are listed between it and %s", sectionStart, sectionEnd)
	}
	section, _, ok := bytes.Cut(rest, []byte(sectionEnd))
	if !ok {
		return nil, fmt.Errorf("%s is not closed by %s", sectionStart, sectionEnd)
	}
	var out []expectation
	for _, l := range strings.Split(string(section), "\n") {
		if m := entryRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			out = append(out, expectation{kind: kind(m[1]), pkg: m[2], test: m[3]})
		}
	}
	return out, nil
}

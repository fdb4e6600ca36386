package testenv

import (
	"fmt"
	"testing"
)

// StandInMarker opens the log line StandIn writes; the test report
// (test/testenv/testreport, run by `make test`) finds stand-ins by it.
const StandInMarker = "STAND-IN: "

// StandIn records that the test checks a stand-in instead of what its name
// promises, and why (a machine that cannot do the real thing): a line the
// test report lists at the end of `make test`, which fails unless README.md
// lists the stand-in as expected. Call it before checking the stand-in.
func StandIn(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Log(StandInMarker + fmt.Sprintf(format, args...))
}

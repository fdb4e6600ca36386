package e2e

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/tlstest"
)

// A coordinator serving TLS with a certificate from a private CA: the agent
// enrolls, holds its node stream (HTTP/2 through TLS) and runs a task, and
// podium follows it, all told of the CA by PODIUM_CA_FILE alone.
//
// Not parallel: the variable is set for the whole process, which is how the
// agent's and the CLI's processes get it.
func TestEverythingOverTLSWithAPrivateCA(t *testing.T) {
	ca := tlstest.New(t)
	t.Setenv("PODIUM_CA_FILE", ca.CAFile)
	e := newEnvOpts(t, coordtest.Options{TLS: ca}, nil)
	if !strings.HasPrefix(e.r.URL(), "https://") {
		t.Fatalf("the coordinator serves at %s, want https://", e.r.URL())
	}
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", "echo over TLS")
	if r.code != 0 || string(r.stdout) != "over TLS\n" {
		t.Fatalf("podium run over TLS: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}

	// Without the CA, podium says what to give it.
	t.Setenv("PODIUM_CA_FILE", "")
	r = e.podium("tasks")
	if r.code == 0 || !strings.Contains(string(r.stderr), "--ca-file") {
		t.Errorf("podium tasks without the CA: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

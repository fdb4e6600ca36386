package main

import (
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/podiumhq/podium/test/testenv/tlstest"
)

// An https:// coordinator whose certificate a private CA signed: podium
// reaches it (over HTTP/2) given the CA with --ca-file or PODIUM_CA_FILE, and
// without it says what to give.
func TestPrivateCA(t *testing.T) {
	t.Parallel()
	ca := tlstest.New(t)
	cert, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake(t)
	srv := httptest.NewUnstartedServer(f.srv.Config.Handler)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	cli := newTestCLI(map[string]string{"PODIUM_SERVER": srv.URL})
	if code := cli.run(t, "--ca-file", ca.CAFile, "whoami"); code != 0 {
		t.Fatalf("with --ca-file: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := f.recorded(); len(got) != 1 || got[0].proto != "HTTP/2.0" {
		t.Errorf("the coordinator saw %v, want one HTTP/2 request", got)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": srv.URL, "PODIUM_CA_FILE": ca.CAFile})
	if code := cli.run(t, "whoami"); code != 0 {
		t.Fatalf("with PODIUM_CA_FILE: exit %d; stderr:\n%s", code, cli.errOut)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": srv.URL})
	if code := cli.run(t, "whoami"); code != exitPodium || !strings.Contains(cli.errOut.String(), "--ca-file") {
		t.Errorf("without the CA: exit %d, want %d and a word on --ca-file; stderr:\n%s", code, exitPodium, cli.errOut)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": srv.URL})
	if code := cli.run(t, "whoami", "--ca-file", ca.CertFile+".missing"); code != exitUsage || !strings.Contains(cli.errOut.String(), "--ca-file") {
		t.Errorf("a missing CA file: exit %d, want %d naming --ca-file; stderr:\n%s", code, exitUsage, cli.errOut)
	}
}

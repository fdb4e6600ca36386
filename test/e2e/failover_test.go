package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
)

// TestFollowerFailsOverToAnotherReplica follows a task through replica A
// with --server listing A and B, and stops A mid-task: the node moves to B
// (HelloAck listed it), and podium run carries on through B to the task's
// end with every byte once and the task's exit code, where it used to hang
// after its one "reconnecting" line.
func TestFollowerFailsOverToAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := coordtest.Start(t, e.db.URL, e.opts)
	// A new Hello, so that the agent's HelloAck lists B too.
	e.stopAgent()
	e.startAgent()

	f := e.followEnv([]string{"PODIUM_SERVER=" + e.r.URL() + "," + b.URL()}, "--image", e.image, "--", "sh", "-c", slowScript)
	f.waitStdout(t, "\n5\n")
	a := e.r
	e.r = b // for checkSlowTask's own calls
	a.Stop()
	e.checkSlowTask(t, f)
}

// TestFollowerFailsOverWhenItsReplicaIsKilled follows a task through a
// replica running as its own process and SIGKILLs it mid-task: no goodbye,
// its connections just die. podium run, given both addresses, must carry on
// through the other replica (which holds the node) to the task's end, every
// byte once, with the task's exit code.
func TestFollowerFailsOverWhenItsReplicaIsKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var plog syncBuffer
	p := exec.Command(filepath.Join(binDir, "podium-coordinator"), "serve", "--listen", addr)
	p.Env = append(os.Environ(), "PODIUM_DATABASE_URL="+e.db.URL, "PODIUM_TOKEN="+coordtest.Token)
	p.Stdout, p.Stderr = &plog, &plog
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = p.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("killed replica's log:\n%s", plog.String())
		}
	})
	coordtest.Eventually(t, 30*time.Second, "the replica process to be ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	f := e.followEnv([]string{"PODIUM_SERVER=http://" + addr + "," + e.r.URL()}, "--image", e.image, "--", "sh", "-c", slowScript)
	f.waitStdout(t, "\n5\n")
	if err := p.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	e.checkSlowTask(t, f)
	if !strings.Contains(f.stderr.String(), "→ reconnected to "+e.r.URL()) {
		t.Errorf("podium run should say it reconnected to the other replica; stderr:\n%s", f.stderr.String())
	}
}

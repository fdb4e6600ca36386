package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// sumLine is a line of sha256sum's output.
var sumLine = regexp.MustCompile(`(?m)^([0-9a-f]{64})  (\S+)$`)

// sums reads what the task's own sha256sum printed: name → digest.
func sums(stderr []byte) map[string]string {
	out := map[string]string{}
	for _, m := range sumLine.FindAllSubmatch(stderr, -1) {
		out[string(m[2])] = string(m[1])
	}
	return out
}

// artifactList is `podium artifacts --json ID`.
func (e *env) artifactList(id string) []*podiumv1.Artifact {
	e.t.Helper()
	r := e.podium("artifacts", "--json", id)
	if r.code != 0 {
		e.t.Fatalf("podium artifacts --json: exit %d\n%s", r.code, r.stderr)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(r.stdout, &raw); err != nil {
		e.t.Fatalf("podium artifacts --json printed %q: %v", r.stdout, err)
	}
	list := make([]*podiumv1.Artifact, len(raw))
	for i, m := range raw {
		list[i] = &podiumv1.Artifact{}
		if err := protojson.Unmarshal(m, list[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	return list
}

// A task's files reach the object store when it exits: those it wrote under
// /workspace/.podium/artifacts (a subdirectory too) and one it published with
// podium-runner artifact add. Artifacts are stored before the task counts as
// ended, so they are listed the moment podium run returns; a symbolic link is
// skipped, and the log says so.
func TestArtifactsAreStoredWhenPodiumRunReturns(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	e := newEnvWithArtifacts(t, s3)
	script := `set -e
A=/workspace/.podium/artifacts
mkdir -p $A/reports
echo '<testsuite tests="1"/>' > $A/reports/junit.xml
seq 1 1000 > /workspace/build.log
podium-runner artifact add /workspace/build.log --name logs/build.log
ln -s /etc/passwd $A/passwd
cd $A && sha256sum reports/junit.xml logs/build.log >&2`
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("podium run: exit %d\n%s", r.code, r.stderr)
	}
	id := r.taskID(t)
	want := sums(r.stderr)
	list := e.artifactList(id)
	if len(list) != 2 || len(want) != 2 {
		t.Fatalf("listed %v right after podium run returned; the task's sums %v", list, want)
	}
	for _, a := range list {
		if a.GetSha256() != want[a.GetName()] {
			t.Errorf("%s: stored sha256 %s, the task's sha256sum says %s", a.GetName(), a.GetSha256(), want[a.GetName()])
		}
		if !bytes.Contains(r.stderr, []byte("→ artifact "+a.GetName()+" (")) {
			t.Errorf("podium run did not show that %s was stored:\n%s", a.GetName(), r.stderr)
		}
	}
	var total int64
	for _, a := range list {
		total += a.GetSize()
	}
	if got := e.task(id).GetUsage().GetArtifactBytes(); got != total {
		t.Errorf("the task's usage counts %d bytes of artifacts, want the %d its listed artifacts hold", got, total)
	}
	if !bytes.Contains(r.stderr, []byte("→ artifact passwd skipped: it is a symbolic link")) {
		t.Errorf("podium run did not show the skipped link:\n%s", r.stderr)
	}
	coordtest.Eventually(t, 10*time.Second, "the task's directory on the node to be removed", func() bool {
		entries, _ := os.ReadDir(filepath.Join(e.data, "tasks"))
		return len(entries) == 0
	})
}

// A spec's artifacts globs reach files the task left elsewhere in its
// workspace: they are stored under their path in /workspace, byte for byte,
// next to the ones the globs keep from .podium/artifacts, and nothing else.
func TestArtifactGlobsWidenToTheWorkspace(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	e := newEnvWithArtifacts(t, s3)
	spec := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(spec, []byte(`image: `+e.image+`
working_dir: /workspace
command:
  - sh
  - -c
  - |
    set -e
    mkdir -p dist reports/unit .podium/artifacts
    seq 1 20000 | gzip > dist/app.tar.gz
    echo '<testsuite/>' > reports/unit/junit.xml
    echo not this > dist/notes.txt
    echo '{}' > .podium/artifacts/summary.json
    sha256sum dist/app.tar.gz reports/unit/junit.xml >&2
    cd .podium/artifacts && sha256sum summary.json >&2
artifacts:
  - dist/*.tar.gz
  - "reports/**/*.xml"
  - .podium/artifacts/**
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.podium("run", "--spec", spec)
	if r.code != 0 {
		t.Fatalf("podium run: exit %d\n%s", r.code, r.stderr)
	}
	want := sums(r.stderr)
	list := e.artifactList(r.taskID(t))
	if len(list) != 3 || len(want) != 3 {
		t.Fatalf("listed %v; the task's sums %v; want dist/app.tar.gz, reports/unit/junit.xml and summary.json", list, want)
	}
	for _, a := range list {
		if a.GetSha256() != want[a.GetName()] {
			t.Errorf("%s: stored sha256 %s, the task's sha256sum says %s", a.GetName(), a.GetSha256(), want[a.GetName()])
		}
	}
}

// Three files, one of 50 MB, are uploaded when the task exits; the object
// store is down just then. The task still succeeds, its log says the upload
// failed and will be retried, the files wait on the node, and once the store
// is back the retry stores each exactly once, byte for byte.
func TestArtifactsSurviveAnObjectStoreOutage(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	e := newEnvWithArtifacts(t, s3)
	script := `set -e
A=/workspace/.podium/artifacts
mkdir -p $A/reports
head -c 52428800 /dev/urandom > $A/big.bin
echo '<testsuite tests="3"/>' > $A/reports/junit.xml
seq 1 1000 > /workspace/build.log
podium-runner artifact add /workspace/build.log --name logs/build.log
cd $A && sha256sum big.bin reports/junit.xml logs/build.log >&2
echo ready
podium-runner ask >/dev/null
echo done`
	cmd := e.podiumCmd("run", "--image", e.image, "--", "sh", "-c", script)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	coordtest.Eventually(t, 60*time.Second, "the task to have written its files", func() bool {
		return strings.Contains(out.String(), "ready\n")
	})
	id := taskIDRe.FindString(errb.String())
	want := sums([]byte(errb.String()))
	if id == "" || len(want) != 3 {
		t.Fatalf("task id %q, sums %v; stderr:\n%s", id, want, errb.String())
	}

	s3.Stop()
	if r := e.podium("task", "send", id, "go"); r.code != 0 {
		t.Fatalf("podium task send: exit %d\n%s", r.code, r.stderr)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("podium run exited %d, want 0: a failed upload must not fail the task\n%s", code, errb.String())
	}
	if s := e.task(id).State; s != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task is %v, want succeeded", s)
	}
	if !strings.Contains(errb.String(), "→ artifact big.bin: upload failed: ") || !strings.Contains(errb.String(), "(will retry)") {
		t.Fatalf("podium run did not show the failed upload:\n%s", errb.String())
	}
	// The node keeps the files for the retry.
	taskDir := filepath.Join(e.data, "tasks", id+"-1")
	if st, err := os.Stat(filepath.Join(taskDir, "artifacts", "big.bin")); err != nil || st.Size() != 52428800 {
		t.Fatalf("the file waiting for its upload is gone from the node: %v", err)
	}
	if list := e.artifactList(id); len(list) != 0 {
		t.Fatalf("listed %v while the object store was down", list)
	}

	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	var list []*podiumv1.Artifact
	coordtest.Eventually(t, 60*time.Second, "the retries to store all three artifacts", func() bool {
		list = e.artifactList(id)
		return len(list) == 3
	})
	sizes := map[string]int64{"big.bin": 52428800, "reports/junit.xml": 23, "logs/build.log": 3893}
	for _, a := range list {
		if a.GetSha256() != want[a.GetName()] || a.GetSize() != sizes[a.GetName()] {
			t.Errorf("%s: stored %d bytes with sha256 %s; the task wrote %d bytes with sha256 %s",
				a.GetName(), a.GetSize(), a.GetSha256(), sizes[a.GetName()], want[a.GetName()])
		}
	}
	// Exactly one row per name: retries replace, they do not add.
	stored, err := e.r.Store().ListArtifacts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rows := len(stored); rows != 3 {
		t.Fatalf("%d artifact rows for the task, want 3", rows)
	}
	if r := e.podium("artifacts", id); r.code != 0 || !bytes.Contains(r.stdout, []byte("big.bin")) ||
		!bytes.Contains(r.stdout, []byte("50.0 MiB")) || !bytes.Contains(r.stdout, []byte(want["big.bin"])) {
		t.Fatalf("podium artifacts: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	dest := filepath.Join(t.TempDir(), "big.bin")
	if r := e.podium("artifact", "get", id, "big.bin", "-o", dest); r.code != 0 {
		t.Fatalf("podium artifact get: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if len(b) != 52428800 || hex.EncodeToString(sum[:]) != want["big.bin"] {
		t.Fatalf("podium artifact get wrote %d bytes with sha256 %x, not what the task wrote", len(b), sum)
	}

	logs := e.podium("logs", id)
	for _, line := range []string{
		"→ artifact big.bin: upload failed: ",
		"→ artifact big.bin (52428800 bytes, sha256 " + want["big.bin"] + ") stored",
		"→ artifact logs/build.log (3893 bytes",
	} {
		if !bytes.Contains(logs.stderr, []byte(line)) {
			t.Errorf("podium logs does not show %q:\n%s", line, logs.stderr)
		}
	}
	coordtest.Eventually(t, 10*time.Second, "the task's directory on the node to be removed after the uploads", func() bool {
		_, err := os.Stat(taskDir)
		return os.IsNotExist(err)
	})
}

// An artifact still waiting for its upload when the task has ended outlives
// the agent: the object store is down when the task exits, so the task
// succeeds with a note that the upload failed; the agent then stops (or is
// killed) before any retry could work, the store comes back, and the next
// agent process stores the file from the record it finds in the attempt's
// directory, exactly once and byte for byte, and removes the directory.
func TestPendingArtifactsSurviveAnAgentRestart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stopped", "killed"} {
		t.Run(how, func(t *testing.T) {
			s3 := s3test.Start(t)
			e := newEnvWithArtifacts(t, s3)
			s3.Stop()
			script := `set -e
A=/workspace/.podium/artifacts
seq 1 5000 > $A/report.txt
cd $A && sha256sum report.txt >&2`
			r := e.podium("run", "--image", e.image, "--", "sh", "-c", script)
			if r.code != 0 {
				t.Fatalf("podium run exited %d, want 0: a failed upload must not fail the task\n%s", r.code, r.stderr)
			}
			id := r.taskID(t)
			want := sums(r.stderr)["report.txt"]
			if want == "" || !bytes.Contains(r.stderr, []byte("→ artifact report.txt: upload failed: ")) {
				t.Fatalf("podium run did not show the task's sum and the failed upload:\n%s", r.stderr)
			}
			taskDir := filepath.Join(e.data, "tasks", id+"-1")
			coordtest.Eventually(t, 10*time.Second, "the record of the pending upload", func() bool {
				_, err := os.Stat(filepath.Join(taskDir, "uploads.json"))
				return err == nil
			})
			if how == "killed" {
				e.killAgent()
			} else {
				e.stopAgent()
			}
			if _, err := os.Stat(filepath.Join(taskDir, "artifacts", "report.txt")); err != nil {
				t.Fatalf("the file waiting for its upload is gone with the agent: %v", err)
			}
			if err := s3.Restart(); err != nil {
				t.Fatal(err)
			}
			if list := e.artifactList(id); len(list) != 0 {
				t.Fatalf("listed %v before the next agent started", list)
			}

			e.startAgent()
			var list []*podiumv1.Artifact
			coordtest.Eventually(t, 60*time.Second, "the next agent to store the artifact", func() bool {
				list = e.artifactList(id)
				return len(list) == 1
			})
			if a := list[0]; a.GetName() != "report.txt" || a.GetSha256() != want || a.GetSize() != 23893 {
				t.Fatalf("stored %s, %d bytes with sha256 %s; the task wrote report.txt, 23893 bytes with sha256 %s",
					a.GetName(), a.GetSize(), a.GetSha256(), want)
			}
			coordtest.Eventually(t, 10*time.Second, "the task's directory on the node to be removed after the upload", func() bool {
				_, err := os.Stat(taskDir)
				return os.IsNotExist(err)
			})
			listed, err := e.r.Store().ListArtifacts(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			rows := len(listed)
			logs := e.podium("logs", id)
			stored := "→ artifact report.txt (23893 bytes, sha256 " + want + ") stored"
			if n := bytes.Count(logs.stderr, []byte("→ artifact report.txt (")); rows != 1 || n != 1 || !bytes.Contains(logs.stderr, []byte(stored)) {
				t.Fatalf("%d artifact rows and %d stored notes, want one of each, %q:\n%s", rows, n, stored, logs.stderr)
			}
			if !strings.Contains(e.alog.String(), "resuming the artifact uploads an earlier agent process left pending") {
				t.Errorf("the agent's log does not say it resumed the upload:\n%s", e.alog.String())
			}
		})
	}
}

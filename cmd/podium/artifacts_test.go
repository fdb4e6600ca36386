package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Faults the fake's downloads can have.
const (
	faultCorrupt = "corrupt" // one byte flipped
	faultBreak   = "break"   // the stream fails half way
)

func (f *fake) addArtifact(attempt int32, name string, data []byte) {
	sum := sha256.Sum256(data)
	f.artifacts = append(f.artifacts, &podiumv1.Artifact{
		Id: fmt.Sprintf("art_%02d", len(f.artifacts)), TaskId: f.task.GetId(), Attempt: attempt, Name: name,
		Size: int64(len(data)), Sha256: hex.EncodeToString(sum[:]), CreatedAt: timestamppb.Now(), NodeId: "node_01A",
	})
	if f.artifactData == nil {
		f.artifactData = map[string][]byte{}
	}
	f.artifactData[name] = data
}

func (f *fake) findArtifact(taskID, name string) (*podiumv1.Artifact, error) {
	if taskID != f.currentTask().GetId() {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no task %s", taskID))
	}
	for _, a := range f.artifacts {
		if a.GetName() == name {
			return a, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no such artifact: task %s has no artifact %q (see `podium artifacts %s`)", taskID, name, taskID))
}

func (f *fake) ListArtifacts(_ context.Context, req *connect.Request[podiumv1.ListArtifactsRequest]) (*connect.Response[podiumv1.ListArtifactsResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	if req.Msg.GetId() != f.currentTask().GetId() {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	return connect.NewResponse(&podiumv1.ListArtifactsResponse{Artifacts: f.artifacts}), nil
}

func (f *fake) DownloadArtifact(_ context.Context, req *connect.Request[podiumv1.DownloadArtifactRequest], s *connect.ServerStream[podiumv1.DownloadArtifactResponse]) error {
	a, err := f.findArtifact(req.Msg.GetId(), req.Msg.GetName())
	if err != nil {
		return err
	}
	if err := s.Send(&podiumv1.DownloadArtifactResponse{Msg: &podiumv1.DownloadArtifactResponse_Artifact{Artifact: a}}); err != nil {
		return err
	}
	data := bytes.Clone(f.artifactData[a.GetName()])
	if f.artifactsFault == faultCorrupt {
		data[len(data)/2] ^= 1
	}
	for i := 0; i < len(data); i += 1000 {
		if f.artifactsFault == faultBreak && i >= len(data)/2 {
			return connect.NewError(connect.CodeUnavailable, errors.New("the artifact store is unavailable: the object store at s3:9000 does not answer"))
		}
		chunk := data[i:min(i+1000, len(data))]
		if err := s.Send(&podiumv1.DownloadArtifactResponse{Msg: &podiumv1.DownloadArtifactResponse_Chunk{Chunk: chunk}}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fake) ArtifactURL(_ context.Context, req *connect.Request[podiumv1.ArtifactURLRequest]) (*connect.Response[podiumv1.ArtifactURLResponse], error) {
	a, err := f.findArtifact(req.Msg.GetId(), req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.ArtifactURLResponse{
		Url:       "http://s3.example:9000/podium/tasks/" + a.GetTaskId() + "/" + a.GetId() + "?X-Amz-Signature=abc",
		ExpiresAt: timestamppb.New(time.Now().Add(15 * time.Minute)), ValidSeconds: 900, Artifact: a,
	}), nil
}

// A file the size of several chunks, so that a fault lands in the middle.
var reportData = bytes.Repeat([]byte("<testcase name=\"t\"/>\n"), 500)

func artifactsFake(t *testing.T) *fake {
	f := newFake(t)
	f.addArtifact(1, "out/report.xml", reportData)
	f.addArtifact(1, "empty.txt", nil)
	return f
}

func TestArtifactsList(t *testing.T) {
	f := artifactsFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts", "task_01TEST"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	sum := sha256.Sum256(reportData)
	for _, want := range []string{"NAME", "SIZE", "SHA256", "out/report.xml", "10.3 KiB", hex.EncodeToString(sum[:]), "empty.txt", "0 B"} {
		if !strings.Contains(cli.out.String(), want) {
			t.Errorf("table does not show %q:\n%s", want, cli.out)
		}
	}
	if strings.Contains(cli.out.String(), "ATTEMPT") {
		t.Errorf("one attempt, but the table has an ATTEMPT column:\n%s", cli.out)
	}

	// --json is the API's array, sizes in bytes.
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts", "--json", "task_01TEST"); code != 0 {
		t.Fatalf("--json: exit %d; stderr:\n%s", code, cli.errOut)
	}
	var got []map[string]any
	if err := json.Unmarshal(cli.out.Bytes(), &got); err != nil {
		t.Fatalf("--json printed %q: %v", cli.out, err)
	}
	if len(got) != 2 || got[0]["name"] != "out/report.xml" || got[0]["size"] != float64(len(reportData)) || got[0]["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("--json = %v", got)
	}

	// Artifacts of two runs show which run each is from.
	f.addArtifact(2, "out/report.xml", []byte("second run"))
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts", "task_01TEST"); code != 0 || !strings.HasPrefix(cli.out.String(), "ATTEMPT") {
		t.Errorf("two attempts: exit %d, table:\n%s", code, cli.out)
	}

	// None: nothing on stdout, a line on stderr.
	f.artifacts = nil
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts", "task_01TEST"); code != 0 || cli.out.String() != "" || cli.errOut.String() != "→ task task_01TEST has no artifacts\n" {
		t.Errorf("none: exit %d, stdout %q, stderr %q", code, cli.out, cli.errOut)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts", "task_01NOPE"); code != exitUsage || cli.errOut.String() != "podium: no task task_01NOPE\n" {
		t.Errorf("unknown task: exit %d, stderr %q", code, cli.errOut)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifacts"); code != exitUsage {
		t.Errorf("no ID: exit %d, want 2", code)
	}
}

// dirEntries lists a directory, to prove a failed download left nothing.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestArtifactGet(t *testing.T) {
	f := artifactsFake(t)
	dir := t.TempDir()
	t.Chdir(dir)

	// Default destination: the last part of the name, in the current directory.
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "task_01TEST", "out/report.xml"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "report.xml")); !bytes.Equal(got, reportData) {
		t.Fatalf("report.xml holds %d bytes, want the artifact's %d", len(got), len(reportData))
	}
	if want := "→ saved out/report.xml to report.xml (10.3 KiB, sha256 verified)\n"; cli.errOut.String() != want {
		t.Errorf("stderr = %q, want %q (and no progress bar: it is not a terminal)", cli.errOut, want)
	}
	if cli.out.String() != "" {
		t.Errorf("stdout = %q, want nothing", cli.out)
	}
	if fi, _ := os.Stat("report.xml"); fi.Mode().Perm() != 0o644 {
		t.Errorf("report.xml has mode %v, want 0644", fi.Mode().Perm())
	}

	// -o FILE, -o DIR, -o - and an empty artifact.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		path string
		want []byte
	}{
		{[]string{"-o", "named.xml"}, "named.xml", reportData},
		{[]string{"-o", sub}, filepath.Join(sub, "report.xml"), reportData},
	} {
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		if code := cli.run(t, append([]string{"artifact", "get", "task_01TEST", "out/report.xml"}, tc.args...)...); code != 0 {
			t.Fatalf("%v: exit %d; stderr:\n%s", tc.args, code, cli.errOut)
		}
		if got, _ := os.ReadFile(tc.path); !bytes.Equal(got, tc.want) {
			t.Errorf("%v: %s holds %d bytes", tc.args, tc.path, len(got))
		}
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "-o", "-", "task_01TEST", "out/report.xml"); code != 0 || !bytes.Equal(cli.out.Bytes(), reportData) {
		t.Errorf("-o -: exit %d, %d bytes on stdout", code, len(cli.out.Bytes()))
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "task_01TEST", "empty.txt"); code != 0 {
		t.Errorf("empty artifact: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if fi, err := os.Stat("empty.txt"); err != nil || fi.Size() != 0 {
		t.Errorf("empty.txt: %v, %v", fi, err)
	}

	// On a terminal, a progress bar on stderr that ends at 100%.
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	cli.isTerminal = func() bool { return true }
	if code := cli.run(t, "artifact", "get", "-o", "tty.xml", "task_01TEST", "out/report.xml"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if e := cli.errOut.String(); !strings.Contains(e, "\rout/report.xml 100% [==============================] 10.3 KiB / 10.3 KiB") {
		t.Errorf("no finished progress bar on a terminal: %q", e)
	}
	if names := dirEntries(t, dir); strings.Contains(strings.Join(names, " "), ".podium-") {
		t.Errorf("temporary files left behind: %v", names)
	}
}

// A download that does not match the stored digest, or breaks off, leaves no
// file (not even an earlier one of the same name is touched) and exits 125.
func TestArtifactGetFailures(t *testing.T) {
	f := artifactsFake(t)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("keep.xml", []byte("an older file"), 0o644); err != nil {
		t.Fatal(err)
	}

	f.artifactsFault = faultCorrupt
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "task_01TEST", "out/report.xml"); code != exitPodium {
		t.Fatalf("corrupt: exit %d, want 125", code)
	}
	if e := cli.errOut.String(); !strings.Contains(e, "podium: artifact out/report.xml of task task_01TEST is corrupt: received 10500 bytes with SHA-256 ") ||
		!strings.Contains(e, "it was deleted and nothing was saved") {
		t.Errorf("corrupt: stderr %q", e)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "-o", "keep.xml", "task_01TEST", "out/report.xml"); code != exitPodium {
		t.Fatalf("corrupt over an existing file: exit %d, want 125", code)
	}
	if got, _ := os.ReadFile("keep.xml"); string(got) != "an older file" {
		t.Errorf("a corrupt download replaced keep.xml with %q", got)
	}

	f.artifactsFault = faultBreak
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	cli.isTerminal = func() bool { return true }
	if code := cli.run(t, "artifact", "get", "task_01TEST", "out/report.xml"); code != exitPodium {
		t.Fatalf("broken stream: exit %d, want 125", code)
	}
	if e := cli.errOut.String(); !strings.Contains(e, "\npodium: the coordinator at "+f.url()+" is unavailable: the artifact store is unavailable") {
		t.Errorf("broken stream: stderr %q (want the reason on a line of its own after the bar)", e)
	}
	if names := dirEntries(t, dir); len(names) != 1 || names[0] != "keep.xml" {
		t.Errorf("failed downloads left %v, want only keep.xml", names)
	}

	// Not there: the coordinator's sentence, which says how to see what is.
	f.artifactsFault = ""
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "task_01TEST", "nope.txt"); code != exitUsage ||
		!strings.Contains(cli.errOut.String(), "task task_01TEST has no artifact \"nope.txt\" (see `podium artifacts task_01TEST`)") {
		t.Errorf("missing: exit %d, stderr %q", code, cli.errOut)
	}
	if names := dirEntries(t, dir); len(names) != 1 {
		t.Errorf("a refused download left %v", names)
	}
}

func TestArtifactGetURL(t *testing.T) {
	f := artifactsFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "artifact", "get", "--url", "task_01TEST", "out/report.xml"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := cli.out.String(); !strings.HasPrefix(got, "http://s3.example:9000/podium/tasks/task_01TEST/art_00?X-Amz-Signature=") || strings.Count(got, "\n") != 1 {
		t.Errorf("stdout = %q, want the URL alone", got)
	}
	if e := cli.errOut.String(); !strings.HasPrefix(e, "→ valid for 15m0s, until ") || !strings.Contains(e, "anyone with the URL can download out/report.xml") {
		t.Errorf("stderr = %q, want how long the URL is valid", e)
	}

	// --url downloads nothing, so -o with it is a mistake, refused before
	// anything is sent.
	f2 := artifactsFake(t)
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f2.url()})
	if code := cli.run(t, "artifact", "get", "--url", "-o", "x", "task_01TEST", "out/report.xml"); code != exitUsage {
		t.Errorf("--url with -o: exit %d, want 2", code)
	}
	for _, args := range [][]string{
		{"artifact", "get", "task_01TEST"},
		{"artifact", "get", "--attempt", "-1", "task_01TEST", "x"},
	} {
		cli = newTestCLI(map[string]string{"PODIUM_SERVER": f2.url()})
		if code := cli.run(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if p := f2.paths(); len(p) != 0 {
		t.Errorf("refused invocations sent %v", p)
	}
}

package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The flags a docker run user types reach the submitted spec: short forms
// where Docker has them (-e, -w, -u, -m, -d), --memory in Docker's units,
// --retry as tries after the first, and each over the spec file's field.
func TestRunTakesDockerStyleFlags(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	spec := writeFile(t, "task.yaml", "image: alpine:3\nname: from-file\nworking_dir: /file\nresources:\n  cpu: 4\n  memory_mb: 64\n")
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--spec", spec, "--name", "deploy-web", "-e", "A=1", "--env", "B=2",
		"-w", "/src", "-u", "1000:1000", "--cpus", "1.5", "-m", "512m", "--retry", "2", "--concurrency-key", "deploy/prod",
		"--", "make", "test")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, tc.errOut)
	}
	s := f.spec
	if s.GetName() != "deploy-web" || s.GetWorkingDir() != "/src" || s.GetUser() != "1000:1000" ||
		s.GetEnv()["A"] != "1" || s.GetEnv()["B"] != "2" || strings.Join(s.GetCommand(), " ") != "make test" {
		t.Errorf("submitted spec %v: want name deploy-web, working_dir /src, user 1000:1000, env A=1 B=2, command make test", s)
	}
	if want := (&podiumv1.Resources{Cpu: 1.5, MemoryMb: 512}); !proto.Equal(s.GetResources(), want) {
		t.Errorf("submitted resources %v, want %v", s.GetResources(), want)
	}
	if s.GetRetry().GetAttempts() != 3 || s.GetMaxAttempts() != 3 {
		t.Errorf("--retry 2 submitted retry.attempts %d and max_attempts %d, want 3 runs in all", s.GetRetry().GetAttempts(), s.GetMaxAttempts())
	}
	if c := s.GetConcurrency(); c.GetKey() != "deploy/prod" || c.GetLimit() != 1 {
		t.Errorf("--concurrency-key deploy/prod submitted %v, want key deploy/prod, limit 1", c)
	}

	// -d is --detach: the id on stdout, nothing followed.
	f = newFake(t)
	tc = newTestCLI(nil)
	if code := tc.run(t, "--server", f.url(), "run", "-d", "--image", "alpine:3", "--", "true"); code != 0 {
		t.Fatalf("run -d: exit %d, stderr:\n%s", code, tc.errOut)
	}
	if got := strings.TrimSpace(tc.out.String()); got != f.task.GetId() {
		t.Errorf("run -d printed %q, want the task id %s", got, f.task.GetId())
	}
}

// --memory reads Docker's sizes (powers of 1024) and Podium's own, rounded
// up to whole MiB.
func TestRunMemorySizes(t *testing.T) {
	for in, mib := range map[string]int64{"512m": 512, "2g": 2048, "2G": 2048, "1048576b": 1, "1k": 1, "100MiB": 100, "1.5GiB": 1536, "500MB": 477} {
		o := &runOptions{image: "alpine:3", memory: in, set: map[string]bool{"image": true, "memory": true}}
		s, err := o.buildSpec(nil)
		if err != nil || s.GetResources().GetMemoryMb() != mib {
			t.Errorf("--memory %s = %d MiB (%v), want %d", in, s.GetResources().GetMemoryMb(), err, mib)
		}
	}
}

// Each bad docker-style flag is refused before anything is sent, naming the
// flag and what to give.
func TestRunDockerStyleFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a name with a space", []string{"--name", "deploy web"}, `--name "deploy web" is not a task name`},
		{"a name too long", []string{"--name", strings.Repeat("n", 129)}, "at most 128 bytes"},
		{"a relative workdir", []string{"-w", "src"}, `--workdir "src" is relative: give an absolute path`},
		{"no CPU", []string{"--cpus", "0"}, "--cpus 0: give a positive number of CPU cores"},
		{"negative CPU", []string{"--cpus", "-1"}, "--cpus -1: give a positive number"},
		{"memory without a size", []string{"-m", "lots"}, "--memory"},
		{"no memory", []string{"--memory", "0m"}, `--memory "0m": give a positive size`},
		{"memory past int64", []string{"--memory", "99999999999999g"}, "give a positive size"},
		{"negative retries", []string{"--retry", "-1"}, "--retry -1 is out of range: give how many more tries a failed task gets, 0 to 99"},
		{"too many retries", []string{"--retry", "100"}, "--retry 100 is out of range"},
		{"a bad concurrency key", []string{"--concurrency-key", "a b"}, "spec.concurrency.key"},
		{"an env entry without =", []string{"-e", "HOME"}, "HOME"},
	} {
		t.Run(tc.name, func(t *testing.T) { runRefusedLocally(t, tc.args, tc.want) })
	}
}

// Help lists a short alias on its long flag's line, once.
func TestRunHelpShowsShortForms(t *testing.T) {
	tc := newTestCLI(nil)
	if code := tc.run(t, "help", "run"); code != 0 {
		t.Fatalf("help run: exit %d", code)
	}
	help := tc.out.String()
	for _, want := range []string{"-e, --env KEY=VALUE", "-d, --detach", "-w, --workdir DIR", "-m, --memory SIZE", "-u, --user USER", "--name NAME", "--retry N", "--cpus N"} {
		if !strings.Contains(help, want) {
			t.Errorf("podium help run does not show %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "alias of") || strings.Contains(help, "\n  -e ") {
		t.Errorf("podium help run lists an alias on a line of its own:\n%s", help)
	}
}

// runRefusedLocally runs podium run --image alpine:3 with args and a command,
// and checks that it exits 125 saying want, with nothing submitted.
func runRefusedLocally(t *testing.T, args []string, want string) {
	t.Helper()
	f := newFake(t)
	cli := newTestCLI(nil)
	args = append([]string{"--server", f.url(), "run", "--image", "alpine:3"}, args...)
	if code := cli.run(t, append(args, "--", "true")...); code != exitPodium {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitPodium, cli.errOut)
	}
	if !strings.Contains(cli.errOut.String(), want) {
		t.Errorf("stderr = %q, want it to say %q", cli.errOut, want)
	}
	if f.spec != nil {
		t.Errorf("a spec was submitted: %v", f.spec)
	}
}

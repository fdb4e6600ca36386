package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// podium task get shows a task's container options and which of its
// sidecars are privileged, and neither line for a task without them.
func TestTaskGetShowsContainerOptions(t *testing.T) {
	task := &podiumv1.Task{Id: "task_1", Spec: &podiumv1.TaskSpec{Image: "docker:cli", ReadOnly: true, ShmSizeBytes: 1 << 30,
		Ulimits: []*podiumv1.Ulimit{{Name: "nofile", Soft: 65536, Hard: 65536}, {Name: "core", Soft: 0, Hard: -1}},
		Tmpfs:   []*podiumv1.TmpfsMount{{Path: "/cache", SizeBytes: 512 << 20, Exec: true}, {Path: "/scratch"}},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres:16"},
			{Name: "docker", Image: "docker:dind", Privileged: true, ShareWorkspace: true}}}}
	var out bytes.Buffer
	writeTask(&out, task, time.Now())
	for _, want := range []string{
		"container:", "read-only root, shm 1 GiB, ulimits nofile=65536, core=0:unlimited, tmpfs /cache 512 MiB exec, tmpfs /scratch 64 MiB",
		"privileged sidecars:", "docker\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("task get printed\n%s\nwant %q", out.String(), want)
		}
	}
	out.Reset()
	writeTask(&out, &podiumv1.Task{Id: "task_2", Spec: &podiumv1.TaskSpec{Image: "alpine:3",
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres:16", ShareWorkspace: true}}}}, time.Now())
	if strings.Contains(out.String(), "container:") || strings.Contains(out.String(), "privileged") {
		t.Errorf("a task without container options or privileged sidecars:\n%s", out.String())
	}
}

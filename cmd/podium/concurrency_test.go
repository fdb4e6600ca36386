package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// podium task get shows a task's concurrency key, and no such line for a
// task without one.
func TestTaskGetShowsConcurrencyKey(t *testing.T) {
	var out bytes.Buffer
	writeTask(&out, &podiumv1.Task{Id: "task_1", Spec: &podiumv1.TaskSpec{Image: "alpine:3",
		Concurrency: &podiumv1.Concurrency{Key: "deploy-prod", Limit: 1, OnConflict: "cancel_older"}}}, time.Now())
	if want := "key deploy-prod, limit 1, on conflict cancel_older"; !strings.Contains(out.String(), "concurrency:") || !strings.Contains(out.String(), want) {
		t.Errorf("task get printed\n%s\nwant %q", out.String(), want)
	}
	out.Reset()
	writeTask(&out, &podiumv1.Task{Id: "task_2", Spec: &podiumv1.TaskSpec{Image: "alpine:3"}}, time.Now())
	if strings.Contains(out.String(), "concurrency") {
		t.Errorf("a task without a key:\n%s", out.String())
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// task get says where an archived log is, and nothing about a log that is
// not archived.
func TestTaskGetShowsTheLogArchive(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	task := &podiumv1.Task{Id: "task_1", LogArchive: &podiumv1.LogArchive{
		Key: "tasks/task_1/log-9.zst", Size: 12595, Sha256: "ab12", ArchivedAt: timestamppb.New(at), ArchivedSeq: 9}}
	var out bytes.Buffer
	writeTask(&out, task, at.Add(time.Hour))
	want := "archived " + at.Local().Format(time.RFC3339) + " (12.3 KiB zstd, sha256 ab12)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("task get printed\n%s\nwant a line %q", out.String(), want)
	}
	task.LogArchive.InDatabase, task.LogArchive.Key, task.LogArchive.ArchivedAt = true, "", nil
	if got := logArchiveText(task.LogArchive); got != "archived in Postgres up to event 9, newer events not yet (12.3 KiB zstd, sha256 ab12)" {
		t.Errorf("pending re-archive in Postgres: %q", got)
	}
	out.Reset()
	writeTask(&out, &podiumv1.Task{Id: "task_2"}, at)
	if strings.Contains(out.String(), "log:") {
		t.Errorf("a task whose log is not archived: %s", out.String())
	}
}

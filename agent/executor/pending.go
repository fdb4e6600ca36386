package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// uploadsFile, in an attempt's host directory, lists the artifacts still to
// be uploaded after the attempt's final status was sent. Without it a
// restarted agent could not tell those files from what a finished attempt
// left behind, and would remove them with the directory (RemoveOrphans):
// the task is over for the coordinator, so nothing would collect them again.
const uploadsFile = "uploads.json"

// pendingRecord is the content of uploadsFile.
type pendingRecord struct {
	TaskID  string `json:"task_id"`
	Attempt int32  `json:"attempt"`
	// EndedAt is when the final status was sent: the coordinator's window
	// for the attempt's uploads starts then.
	EndedAt time.Time `json:"ended_at"`
	// LastSeq is the seq of the attempt's newest event when the record was
	// written, so that a restarted agent's notes continue the task's log
	// (the session forgets an ended attempt's seqs with the process).
	LastSeq uint64        `json:"last_seq"`
	Files   []pendingFile `json:"files"`
}

type pendingFile struct {
	Name string `json:"name"`
	// Path is relative to the attempt's directory: a record never points a
	// restarted agent at a file outside it.
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ContinueAfter tells the caller of Emit (the session) that a task attempt
// it does not know of any more, one whose final status an earlier agent
// process sent, is about to get more notes, and that its newest event so far
// had seq lastSeq.
type ContinueAfter func(k Key, lastSeq uint64)

// writePending keeps what the uploads of the attempt in dir still have to
// send, or removes the record when nothing is left. It writes a temporary
// file, syncs it and renames it into place, so a crash leaves the old record
// or the new one, never half of either.
func writePending(dir string, rec pendingRecord) error {
	path := filepath.Join(dir, uploadsFile)
	if len(rec.Files) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+uploadsFile+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// readPending reads the record in an attempt's directory. found is false
// when there is none; an error means one is there but cannot be used.
func readPending(dir string, k Key) (rec pendingRecord, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, uploadsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, true, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, true, fmt.Errorf("%s is not a record of pending uploads: %w", uploadsFile, err)
	}
	switch {
	case rec.TaskID != k.TaskID || rec.Attempt != k.Attempt:
		return rec, true, fmt.Errorf("%s names %s/%d, not the attempt of its directory", uploadsFile, rec.TaskID, rec.Attempt)
	case rec.EndedAt.IsZero():
		return rec, true, fmt.Errorf("%s has no ended_at", uploadsFile)
	case len(rec.Files) == 0:
		return rec, true, fmt.Errorf("%s lists no files", uploadsFile)
	}
	for _, f := range rec.Files {
		if f.Name == "" || !filepath.IsLocal(f.Path) {
			return rec, true, fmt.Errorf("%s lists a file %q at %q, which is not in the attempt's directory", uploadsFile, f.Name, f.Path)
		}
	}
	return rec, true, nil
}

// pendingKeeper returns the Uploads.Pending of an attempt: it writes the
// record in dir, with lastSeq's answer at the time.
func (e *Executor) pendingKeeper(k Key, dir string, lastSeq func() uint64) func(time.Time, []artifacts.File) {
	log := e.log.With("task_id", k.TaskID, "attempt", k.Attempt)
	return func(endedAt time.Time, files []artifacts.File) {
		rec := pendingRecord{TaskID: k.TaskID, Attempt: k.Attempt, EndedAt: endedAt.UTC(), LastSeq: lastSeq()}
		for _, f := range files {
			rel, err := filepath.Rel(dir, f.Path)
			if err != nil || !filepath.IsLocal(rel) {
				log.Warn("an artifact waiting for its upload is outside the attempt's directory; a restarted agent will not resume it",
					"name", f.Name, "path", f.Path)
				continue
			}
			rec.Files = append(rec.Files, pendingFile{Name: f.Name, Path: rel, Size: f.Size})
		}
		if err := writePending(dir, rec); err != nil {
			log.Warn("could not record the artifacts waiting for their upload; an agent restart before they are stored loses them",
				"dir", dir, "err", err)
		}
	}
}

// ResumeUploads takes over the uploads an earlier agent process left
// pending after it sent their attempts' final status (see uploadsFile): each
// attempt whose coordinator window (artifacts.UploadWindow from the recorded
// end) is still open is handed to the uploader with the files left, retried
// and noted in the task's log as before; its directory is removed once they
// are all stored or given up. A record past the window is removed with its
// directory, noting nothing (the coordinator would refuse the files, and the
// task's log already says they failed); so is one that cannot be read, with
// a line in the agent's log. Directories without a record are left to
// RemoveOrphans, which must be called after this and keeps the ones taken
// over.
//
// emit and continueAfter carry the notes; ctx is the agent's, and the
// uploads end with it, leaving their record for the next agent process.
func (e *Executor) ResumeUploads(ctx context.Context, emit attempt.Emit, continueAfter ContinueAfter) {
	entries, err := os.ReadDir(e.tasksDir)
	if err != nil {
		e.log.Warn("could not read the tasks directory for pending artifact uploads", "dir", e.tasksDir, "err", err)
		return
	}
	for _, d := range entries {
		k, ok := attempt.ParseFileName(d.Name())
		if !ok || !d.IsDir() || e.owns(k) {
			continue
		}
		dir := e.dirOf(k)
		log := e.log.With("task_id", k.TaskID, "attempt", k.Attempt)
		rec, found, err := readPending(dir, k)
		switch {
		case !found:
			continue
		case err != nil:
			log.Warn("the record of an attempt's pending artifact uploads cannot be used; its files are dropped with the directory",
				"dir", dir, "err", err)
			e.removeDir(dir)
			continue
		case !time.Now().Before(rec.EndedAt.Add(artifacts.UploadWindow)):
			log.Info("the coordinator's window for an attempt's pending artifact uploads has closed; its files are dropped with the directory",
				"dir", dir, "ended_at", rec.EndedAt, "files", len(rec.Files))
			e.removeDir(dir)
			continue
		case e.uploader == nil:
			log.Warn("an attempt has artifacts waiting for their upload, but this executor uploads none; they are dropped", "dir", dir)
			e.removeDir(dir)
			continue
		}
		files := make([]artifacts.File, len(rec.Files))
		for i, f := range rec.Files {
			files[i] = artifacts.File{Name: f.Name, Path: filepath.Join(dir, f.Path), Size: f.Size}
		}
		n := &noter{key: k, emit: emit}
		n.seq.Store(rec.LastSeq)
		if continueAfter != nil {
			continueAfter(k, rec.LastSeq)
		}
		e.mu.Lock()
		e.uploading[k] = true
		e.mu.Unlock()
		e.wg.Add(1)
		log.Info("resuming the artifact uploads an earlier agent process left pending", "files", len(files), "ended_at", rec.EndedAt)
		job := e.uploader.Upload(ctx, artifacts.Uploads{
			TaskID: k.TaskID, Attempt: k.Attempt, Files: files, EndedAt: rec.EndedAt,
			Note: n.note, Pending: e.pendingKeeper(k, dir, n.seq.Load),
		})
		go func() {
			defer e.wg.Done()
			<-job.Done()
			// The record goes when nothing is left; while it is there the
			// agent stopped with files to send, and the next one resumes.
			if _, err := os.Stat(filepath.Join(dir, uploadsFile)); errors.Is(err, fs.ErrNotExist) {
				e.removeDir(dir)
			}
			e.mu.Lock()
			delete(e.uploading, k)
			e.mu.Unlock()
		}()
	}
}

func (e *Executor) removeDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		e.log.Warn("could not remove a task's directory; the next agent start removes it", "dir", dir, "err", err)
	}
}

// noter writes notes into the log of an attempt no run holds any more, and
// keeps the seq of the newest (see attempt.Emit).
type noter struct {
	key  Key
	emit attempt.Emit
	seq  atomic.Uint64
}

func (n *noter) note(text string) {
	ev := &podiumv1.TaskEvent{TaskId: n.key.TaskID, Attempt: n.key.Attempt, Time: now(),
		Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: strings.ToValidUTF8(text, "\uFFFD")}}}
	n.emit(ev, nil)
	if s := ev.GetSeq(); s > 0 {
		n.seq.Store(s)
	}
}

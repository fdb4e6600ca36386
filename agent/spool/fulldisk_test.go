package spool_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// smallDisk mounts a tmpfs of size bytes on a new directory for the test, so
// that writes fail with ENOSPC for real, and unmounts it afterwards.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (the test needs root): %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file of zeros into dir until the disk is full, leaving
// about keep bytes free, and returns its path.
func fill(t *testing.T, dir string, keep int64) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*st.Bsize - keep
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, max(n, 0))); err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	return path
}

// appendUntilFull appends chunk-sized log events from seq on until the
// spool says a write failed, and returns the seq of the first event it
// could not store.
func appendUntilFull(t *testing.T, s interface {
	Append(*podiumv1.TaskEvent, []byte) error
}, task string, seq uint64, chunk string) uint64 {
	t.Helper()
	for ; seq < 10000; seq++ {
		err := s.Append(logEv(task, seq, chunk), []byte(fmt.Sprintf(`{"n":%d}`, seq)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append %d failed, but not for want of room: %v", seq, err)
			}
			return seq
		}
	}
	t.Fatal("the disk never filled")
	return 0
}

// Events appended while the disk is full are kept and written once it has
// room again, without a gap: a reopened spool holds every unacknowledged
// event, in order, and the cursor of the newest.
func TestEventsWrittenOnceTheDiskHasRoom(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 4<<20)
	dir := filepath.Join(disk, "spool")
	s, _ := open(t, dir)
	filler := fill(t, disk, 256<<10)
	_ = s.Begin(&podiumv1.Assign{TaskId: "t1", Attempt: 1}, 0)
	chunk := strings.Repeat("x", 16<<10)
	first := appendUntilFull(t, s, "t1", 1, chunk)
	last := first + 5
	for seq := first + 1; seq <= last; seq++ {
		_ = s.Append(logEv("t1", seq, chunk), []byte(fmt.Sprintf(`{"n":%d}`, seq)))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The disk has room: the next write stores everything that waited.
	if err := s.Ack(attempt.Key{TaskID: "t1", Attempt: 1}, 2); err != nil {
		t.Fatalf("an ack once the disk has room: %v", err)
	}
	_ = s.Close()
	_, got := open(t, dir)
	a := got["t1"]
	if a == nil {
		t.Fatal("the attempt is gone from the spool")
	}
	if a.LastSeq != last || a.Acked != 2 || len(a.Events) != int(last-2) || string(a.Cursor) != fmt.Sprintf(`{"n":%d}`, last) {
		t.Fatalf("reopened after the disk was full from event %d to %d and then freed: last %d acked %d events %d cursor %s; "+
			"want last %d acked 2, %d events, the cursor of %d", first, last, a.LastSeq, a.Acked, len(a.Events), a.Cursor, last, last-2, last)
	}
	for i, ev := range a.Events {
		if ev.GetSeq() != uint64(i)+3 || string(ev.GetLog().GetData()) != chunk {
			t.Fatalf("event %d of the reopened spool is seq %d with %d bytes", i, ev.GetSeq(), len(ev.GetLog().GetData()))
		}
	}
}

// A spool that filled the disk itself is made small by the acks of what it
// holds, even though there is no room to compact it through a new file, and
// then stores events again.
func TestSpoolThatFilledTheDiskShrinksOnAcks(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 2<<20)
	dir := filepath.Join(disk, "spool")
	s, _ := open(t, dir)
	key := attempt.Key{TaskID: "t1", Attempt: 1}
	_ = s.Begin(&podiumv1.Assign{TaskId: "t1", Attempt: 1}, 0)
	chunk := strings.Repeat("y", 32<<10)
	first := appendUntilFull(t, s, "t1", 1, chunk)
	for seq := first + 1; seq <= first+3; seq++ {
		_ = s.Append(logEv("t1", seq, chunk), []byte(fmt.Sprintf(`{"n":%d}`, seq)))
	}
	// Everything is acknowledged: nothing of the file is needed but where
	// the attempt stands.
	_ = s.Ack(key, first+3)
	if size := dirSize(t, dir); size > 4<<10 || s.Size() != size {
		t.Fatalf("every event acknowledged, the spool holds %d bytes (Size says %d); want it shrunk to its header and a checkpoint",
			size, s.Size())
	}
	next := first + 4
	if err := s.Append(logEv("t1", next, "after"), []byte(`{"n":"after"}`)); err != nil {
		t.Fatalf("append once the acks freed the disk: %v", err)
	}
	_ = s.Close()
	_, got := open(t, dir)
	a := got["t1"]
	if a == nil || a.Assign == nil || a.LastSeq != next || a.Acked != first+3 || len(a.Events) != 1 ||
		string(a.Events[0].GetLog().GetData()) != "after" || string(a.Cursor) != `{"n":"after"}` {
		t.Fatalf("reopened: %+v; want the header, last %d, acked %d and the one event after", a, next, first+3)
	}
}

// Package spool keeps a node's task events on disk until the coordinator has
// acknowledged storing them.
//
// Events are numbered per task attempt and must reach the coordinator exactly
// once each, in order, across stream drops, coordinator restarts and agent
// restarts. Keeping the unacknowledged tail in memory covers the first two;
// only a file covers the third. So every event is appended to its attempt's
// spool file before it is queued for sending, every acknowledgement is
// appended after it arrives, and an agent that starts finds, per attempt, the
// highest seq it produced (what Hello reports), the highest acknowledged and
// the events in between (what it re-sends once HelloAck says from where).
//
// Each event is stored together with a cursor, an opaque blob from the
// executor saying how far into the task's runner log that event reaches. The
// two are written in one record, so after a crash either both are on disk or
// neither: the agent never re-reads output it already turned into an event,
// and never skips output it did not.
//
// # File format
//
// One file per attempt, <task>-<attempt>.spool, of records:
//
//	kind    1 byte   'H' header, 'E' event, 'A' ack, 'C' checkpoint
//	length  4 bytes  big-endian, of payload
//	payload
//	crc     4 bytes  big-endian CRC-32C of kind, length and payload
//
// H holds the assignment (protobuf, without anything that may be a
// credential: see withoutCredentials; none is needed once the container
// exists). E holds the cursor's length
// (4 bytes), the cursor and the event (protobuf). A holds the acknowledged
// seq (8 bytes). C, written when a file is compacted, holds the last seq, the
// acknowledged seq, a flags byte and the cursor, standing in for the records
// it replaced. A record that fails its CRC ends the file: it can only be the
// torn tail of a crash, and it is cut off when the file is opened.
package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Compaction: a file is rewritten with only its unacknowledged events once it
// is bigger than compactMin and at least three quarters of it is acknowledged.
// That bounds a long task's spool to a small multiple of its unacknowledged
// output, and each rewrite copies at most a quarter of what it reclaims.
const compactMin = 4 << 20

// compactOverMin is the smallest file compacted while the spool is over its
// bound (see Options.MaxBytes).
const compactOverMin = 64 << 10

const fileSuffix = ".spool"

// Attempt is what a spool file held when the spool was opened.
type Attempt struct {
	attempt.Key
	// Assign is the assignment the attempt was started with, without
	// anything that may be a credential (see withoutCredentials: it keeps
	// its secrets' names but not their values); nil for an attempt that only
	// ever had an assignment rejected.
	Assign *podiumv1.Assign
	// LastSeq is the highest seq produced; Acked the highest acknowledged.
	LastSeq, Acked uint64
	// Events are the unacknowledged events, seq Acked+1..LastSeq in order.
	Events []*podiumv1.TaskEvent
	// Cursor is the newest cursor stored with an event.
	Cursor []byte
	// Final reports that the newest event ends the attempt on this node (a
	// terminal status, or the QUEUED of a rejected assignment); Ended that
	// it was a terminal status.
	Final, Ended bool
}

// Spool is a directory of spool files. It is safe for concurrent use.
type Spool struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	files map[attempt.Key]*file
	// total is the size of all the files; maxBytes the bound past which an
	// ack compacts a file sooner (see Options.MaxBytes).
	total    int64
	maxBytes int64
}

type file struct {
	path    string
	f       *os.File
	size    int64
	acked   uint64
	lastSeq uint64
	cursor  []byte
	final   bool
	ended   bool
	// unackedBytes approximates the bytes of unacknowledged events in the
	// file, for the compaction rule.
	sizes map[uint64]int64
	// pending are the records a write could not store (a full disk), in
	// order: each write first tries to store them, and an ack drops the
	// events it covers, so the file catches up as soon as there is room,
	// without a gap a reopen would refuse. behind says the file lacks
	// them; the first failure is reported, the rest are not.
	pending []pendingRecord
	behind  bool
	// squeezed says a write failed since the file was last compacted: the
	// disk was full, and this file may be what fills it.
	squeezed bool
}

// pendingRecord is a record waiting for room on disk: its kind, and its
// event's seq.
type pendingRecord struct {
	kind byte
	seq  uint64
	rec  []byte
}

// Options are how a spool is opened.
type Options struct {
	// MaxBytes is the bound the caller holds the spool to (0: none). The
	// spool does not refuse anything past it: events must be stored
	// whatever happens, and it is the caller that slows down what it
	// appends. It compacts files sooner while it is over the bound, so that
	// acknowledgements bring it back under.
	MaxBytes int64
	// Logger is where the spool logs; nil means slog.Default().
	Logger *slog.Logger
}

// Open opens the spool in dir, creating dir if needed, and returns what its
// files hold. A file it cannot make sense of is renamed to *.bad and logged,
// never deleted: it is evidence for whoever investigates.
func Open(dir string, opts Options) (*Spool, []*Attempt, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create the spool directory: %w", err)
	}
	s := &Spool{dir: dir, log: log, files: make(map[attempt.Key]*file), maxBytes: opts.MaxBytes}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read the spool directory: %w", err)
	}
	var out []*Attempt
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp") {
			_ = os.Remove(filepath.Join(dir, name)) // an interrupted compaction
			continue
		}
		if !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		a, f, err := load(path)
		if err != nil {
			log.Error("a spool file cannot be read; setting it aside", "file", path, "err", err)
			_ = os.Rename(path, path+".bad")
			continue
		}
		if a == nil {
			_ = os.Remove(path) // empty: nothing was ever spooled
			continue
		}
		if _, dup := s.files[a.Key]; dup {
			log.Error("two spool files for one task attempt; setting the second aside", "file", path, "attempt", a.Key.String())
			_ = f.f.Close()
			_ = os.Rename(path, path+".bad")
			continue
		}
		s.files[a.Key] = f
		s.total += f.size
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return s, out, nil
}

// fileName is the file of an attempt: escaped by attempt.FileName, so no task
// id can reach outside the directory.
func fileName(k attempt.Key) string { return attempt.FileName(k) + fileSuffix }

// load reads a spool file, cutting off a torn tail, and leaves it open for
// appending. It returns a nil Attempt for a file with no records. What the
// bytes mean is decode's business; this is only the file around it, closed
// here, in one place, whenever load does not hand it on.
func load(path string) (a *Attempt, f *file, err error) {
	fh, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if f == nil {
			_ = fh.Close()
		}
	}()
	data, err := io.ReadAll(fh)
	if err != nil {
		return nil, nil, err
	}
	a, sizes, n, err := decode(data)
	if err != nil {
		return nil, nil, err
	}
	if n < len(data) {
		if err := fh.Truncate(int64(n)); err != nil {
			return nil, nil, fmt.Errorf("cut off a torn tail: %w", err)
		}
	}
	if a == nil {
		return nil, nil, nil
	}
	if _, err := fh.Seek(int64(n), io.SeekStart); err != nil {
		return nil, nil, err
	}
	return a, &file{path: path, f: fh, size: int64(n), sizes: sizes,
		acked: a.Acked, lastSeq: a.LastSeq, cursor: a.Cursor, final: a.Final, ended: a.Ended}, nil
}

// withoutCredentials is a copy of a with every field that may hold a
// credential emptied: the task's and its sidecars' environment, its secrets'
// values, its private registry logins and its notify URLs (a chat webhook's
// URL is itself the credential). The node's disk is not a place for them: a
// backup, a cloned VM or a removed disk would carry them away. A restarted
// agent needs none of them: it adopts containers that already exist (an
// attempt whose container was never started is not resumed but lost, and
// assigned afresh with everything), and the coordinator sends the secrets'
// values again in its HelloAck. The secrets' names stay, so that a restarted
// agent knows to hold the attempt's output until their values arrive.
func withoutCredentials(a *podiumv1.Assign) *podiumv1.Assign {
	hdr := proto.Clone(a).(*podiumv1.Assign)
	if spec := hdr.GetSpec(); spec != nil {
		spec.Env = nil
		spec.Notify = nil
		for _, sc := range spec.GetSidecars() {
			sc.Env = nil
		}
	}
	for _, v := range hdr.GetSecrets() {
		v.Value = nil
	}
	hdr.RegistryAuths = nil
	return hdr
}

// Begin starts the file of an attempt the node accepted, replacing any file
// it had (a rejected assignment's). lastSeq is the seq its events continue
// after, all of it already acknowledged.
func (s *Spool) Begin(a *podiumv1.Assign, lastSeq uint64) error {
	k := attempt.Of(a)
	hb, err := proto.Marshal(withoutCredentials(a))
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.files[k]; old != nil {
		_ = old.f.Close()
		s.total -= old.size
		delete(s.files, k)
	}
	path := filepath.Join(s.dir, fileName(k))
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create the spool file of %s: %w", k, err)
	}
	buf := appendRecord(nil, kindHeader, hb)
	if lastSeq > 0 {
		buf = appendRecord(buf, kindCheckpoint, checkpoint(lastSeq, lastSeq, 0, nil)...)
	}
	f := &file{path: path, f: fh, acked: lastSeq, lastSeq: lastSeq, sizes: make(map[uint64]int64),
		pending: []pendingRecord{{kind: kindHeader, rec: buf}}}
	s.files[k] = f
	if err := s.catchUpLocked(k, f); err != nil {
		// The header waits for room like any record (see file.pending).
		return fmt.Errorf("write the spool file of %s: %w; it is kept in memory until the disk has room "+
			"(free space on the agent's data disk)", k, err)
	}
	return nil
}

// Append stores an event (numbered already) with the cursor it reaches, nil
// if it moves none. An attempt without a file (a rejected assignment) gets
// one.
func (s *Spool) Append(ev *podiumv1.TaskEvent, cursor []byte) error {
	k := attempt.Of(ev)
	eb, err := proto.Marshal(ev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil {
		path := filepath.Join(s.dir, fileName(k))
		fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("create the spool file of %s: %w", k, err)
		}
		f = &file{path: path, f: fh, sizes: make(map[uint64]int64)}
		s.files[k] = f
	}
	var cl [4]byte
	binary.BigEndian.PutUint32(cl[:], uint32(len(cursor)))
	rec := appendRecord(nil, kindEvent, cl[:], cursor, eb)
	f.lastSeq = max(f.lastSeq, ev.GetSeq())
	f.sizes[ev.GetSeq()] = int64(len(rec))
	if cursor != nil {
		f.cursor = append(f.cursor[:0], cursor...)
	}
	if ev.GetStatus() != nil {
		f.final, f.ended = attempt.IsFinal(ev)
	}
	f.pending = append(f.pending, pendingRecord{kind: kindEvent, seq: ev.GetSeq(), rec: rec})
	if err := s.catchUpLocked(k, f); err != nil {
		return fmt.Errorf("spool an event of %s: %w; its events are kept in memory until the disk has room "+
			"(free space on the agent's data disk)", k, err)
	}
	return nil
}

// catchUpLocked writes the file's pending records, oldest first, until one
// fails. It returns the error only when the file falls behind; while it
// stays behind it says nothing more, and once it has caught up it logs so.
func (s *Spool) catchUpLocked(k attempt.Key, f *file) error {
	for len(f.pending) > 0 {
		rec := f.pending[0].rec
		if err := f.write(rec); err != nil {
			f.squeezed = true
			if f.behind {
				return nil
			}
			f.behind = true
			return err
		}
		s.total += int64(len(rec))
		f.pending[0] = pendingRecord{}
		f.pending = f.pending[1:]
	}
	f.pending = nil
	if f.behind {
		f.behind = false
		s.log.Info("the spool file of a task attempt has caught up: the disk has room again", "attempt", k.String())
	}
	return nil
}

// write appends rec, cutting off whatever part of it a failed write left.
func (f *file) write(rec []byte) error {
	n, err := f.f.WriteAt(rec, f.size)
	if err != nil {
		if n > 0 {
			_ = f.f.Truncate(f.size)
		}
		return err
	}
	f.size += int64(n)
	return nil
}

// Ack records that the coordinator stored everything up to seq, and compacts
// the file when most of it is acknowledged.
func (s *Spool) Ack(k attempt.Key, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil || seq <= f.acked {
		return nil
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	rec := appendRecord(nil, kindAck, b[:])
	// What the ack covers need never be written: the coordinator has it,
	// and the ack record stands for the events left out (and for older
	// acks).
	f.pending = slices.DeleteFunc(f.pending, func(p pendingRecord) bool {
		return p.kind == kindAck || p.kind == kindEvent && p.seq <= seq
	})
	f.pending = append(f.pending, pendingRecord{kind: kindAck, rec: rec})
	err := s.catchUpLocked(k, f)
	f.acked = seq
	f.lastSeq = max(f.lastSeq, seq)
	var unacked int64
	for s, n := range f.sizes {
		if s <= seq {
			delete(f.sizes, s)
		} else {
			unacked += n
		}
	}
	// Over the spool's bound, any file that is mostly acknowledged is
	// compacted, however small: many small files add up too. So is one
	// that found the disk full, at every ack that leaves most of it
	// acknowledged: that frees the disk, for its own pending records too,
	// which the rewrite stores.
	over := s.maxBytes > 0 && s.total > s.maxBytes && f.size > compactOverMin && unacked*2 < f.size
	if f.size > compactMin && unacked*4 < f.size || over || f.squeezed && unacked*2 < f.size {
		if cerr := s.compactLocked(k, f); cerr != nil {
			if rerr := s.resetLocked(k, f); rerr != nil && !f.behind {
				s.log.Warn("could not compact a spool file; it keeps growing until the task ends", "attempt", k.String(), "err", cerr)
			}
		}
	}
	if err != nil && f.behind {
		return fmt.Errorf("spool an ack of %s: %w; it is kept in memory until the disk has room "+
			"(free space on the agent's data disk)", k, err)
	}
	return nil
}

// compactLocked rewrites f with its header, a checkpoint and the
// unacknowledged events, through a temporary file renamed into place, so a
// crash leaves either the old file or the new one. It reads the old file a
// record at a time: a file that grew large while acks lagged must not be
// read into memory whole just to be made small.
func (s *Spool) compactLocked(k attempt.Key, f *file) error {
	var flags byte
	if f.final {
		flags |= flagFinal
	}
	if f.ended {
		flags |= flagEnded
	}
	tmp := filepath.Join(s.dir, "."+filepath.Base(f.path)+".tmp")
	fh, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = fh.Close()
		_ = os.Remove(tmp)
		return err
	}
	w := bufio.NewWriterSize(fh, 256<<10)
	rd := &recordReader{f: f.f, end: f.size}
	kind, rec, err := rd.next()
	switch {
	case err == nil && kind == kindHeader:
		_, _ = w.Write(rec)
	case errors.Is(err, io.EOF) || err == nil:
		// The header may be waiting for room itself.
		for _, p := range f.pending {
			if p.kind == kindHeader {
				_, _ = w.Write(p.rec)
			}
		}
	default:
		return fail(err)
	}
	_, _ = w.Write(appendRecord(nil, kindCheckpoint, checkpoint(f.lastSeq, f.acked, flags, f.cursor)...))
	rd.pos = 0
	for {
		kind, rec, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		if kind != kindEvent {
			continue
		}
		payload := rec[5 : len(rec)-4]
		if len(payload) < 4 || 4+int(binary.BigEndian.Uint32(payload)) > len(payload) {
			return fail(errors.New("an event record with a cursor longer than itself"))
		}
		cl := int(binary.BigEndian.Uint32(payload))
		ev := &podiumv1.TaskEvent{}
		if err := proto.Unmarshal(payload[4+cl:], ev); err != nil {
			return fail(err)
		}
		if ev.GetSeq() > f.acked {
			_, _ = w.Write(rec)
		}
	}
	for _, p := range f.pending {
		if p.kind == kindEvent && p.seq > f.acked {
			_, _ = w.Write(p.rec)
		}
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := fh.Sync(); err != nil {
		return fail(err)
	}
	size, err := fh.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fail(err)
	}
	_ = f.f.Close()
	f.f = fh
	s.total += size - f.size
	f.size = size
	s.caughtUpLocked(k, f)
	s.log.Debug("compacted a spool file", "attempt", k.String(), "bytes", f.size)
	return nil
}

// caughtUpLocked marks f as holding everything: a rewrite stored what was
// pending.
func (s *Spool) caughtUpLocked(k attempt.Key, f *file) {
	f.pending, f.squeezed = nil, false
	if f.behind {
		f.behind = false
		s.log.Info("the spool file of a task attempt has caught up: the disk has room again", "attempt", k.String())
	}
}

// resetLocked shrinks a file whose events are all acknowledged to its
// header and a checkpoint, in place, for when compacting through a new file
// cannot: on a full disk there is no room for one, and this file may be
// what fills it. The checkpoint overwrites bytes the file already holds, so
// it needs no room, and the file is cut after it. A crash in between leaves
// the checkpoint followed by the rest of an old record, a torn tail the next
// open cuts off, or by whole old records, all acknowledged, which the
// checkpoint makes decode pass over.
func (s *Spool) resetLocked(k attempt.Key, f *file) error {
	if f.acked != f.lastSeq {
		return errors.New("it holds unacknowledged events")
	}
	var flags byte
	if f.final {
		flags |= flagFinal
	}
	if f.ended {
		flags |= flagEnded
	}
	rd := &recordReader{f: f.f, end: f.size}
	var at int64
	if kind, rec, err := rd.next(); err == nil && kind == kindHeader {
		at = int64(len(rec))
	}
	ck := appendRecord(nil, kindCheckpoint, checkpoint(f.lastSeq, f.acked, flags, f.cursor)...)
	end := at + int64(len(ck))
	if end > f.size {
		return errors.New("the file is smaller than its header and a checkpoint")
	}
	if _, err := f.f.WriteAt(ck, at); err != nil {
		return err
	}
	if err := f.f.Truncate(end); err != nil {
		return err
	}
	s.total += end - f.size
	f.size = end
	s.caughtUpLocked(k, f)
	s.log.Info("reset a spool file in place: the disk had no room to compact it", "attempt", k.String())
	return nil
}

// recordReader reads the whole records of a spool file one at a time, up to
// end, reusing one buffer the size of the biggest record.
type recordReader struct {
	f   *os.File
	pos int64
	end int64
	buf []byte
}

// next returns the next record, framing and all (valid until the next call),
// and io.EOF after the last whole one.
func (r *recordReader) next() (byte, []byte, error) {
	var h [5]byte
	if r.pos+int64(len(h)) > r.end {
		return 0, nil, io.EOF
	}
	if _, err := r.f.ReadAt(h[:], r.pos); err != nil {
		return 0, nil, err
	}
	l := binary.BigEndian.Uint32(h[1:])
	n := int64(5) + int64(l) + 4
	if l > maxRecord || r.pos+n > r.end {
		return 0, nil, io.EOF
	}
	if int64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := r.f.ReadAt(b, r.pos); err != nil {
		return 0, nil, err
	}
	kind, _, _, ok := parseRecord(b)
	if !ok {
		return 0, nil, io.EOF
	}
	r.pos += n
	return kind, b, nil
}

// Remove deletes an attempt's file: everything about it is acknowledged, or
// the coordinator disowned it.
func (s *Spool) Remove(k attempt.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil {
		return nil
	}
	delete(s.files, k)
	s.total -= f.size
	_ = f.f.Close()
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Size is how many bytes the spool's files hold.
func (s *Spool) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Close closes every file. The files stay: they are what the next agent
// process starts from.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for k, f := range s.files {
		errs = append(errs, f.f.Close())
		delete(s.files, k)
	}
	s.total = 0
	return errors.Join(errs...)
}

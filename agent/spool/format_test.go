package spool

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// seedFiles are spool files of the kinds the spool writes: an accepted
// attempt with events, acks and a torn tail, a compacted one, a rejected
// one, and a few broken ones.
func seedFiles(t testing.TB) [][]byte {
	t.Helper()
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	event := func(seq uint64, cursor string, body *podiumv1.TaskEvent) []byte {
		body.TaskId, body.Attempt, body.Seq = "task_01JD", 2, seq
		var cl [4]byte
		binary.BigEndian.PutUint32(cl[:], uint32(len(cursor)))
		return appendRecord(nil, kindEvent, cl[:], []byte(cursor), marshal(body))
	}
	logEv := func(data string) *podiumv1.TaskEvent {
		return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: []byte(data)}}}
	}
	status := func(s podiumv1.TaskState) *podiumv1.TaskEvent {
		return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
	}
	ack := func(seq uint64) []byte {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], seq)
		return appendRecord(nil, kindAck, b[:])
	}
	header := appendRecord(nil, kindHeader, marshal(&podiumv1.Assign{TaskId: "task_01JD", Attempt: 2,
		Spec: &podiumv1.TaskSpec{Image: "alpine:3", Command: []string{"sh", "-c", "echo hi"}}}))
	join := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }

	running := join(header,
		event(1, "", status(podiumv1.TaskState_TASK_STATE_PROVISIONING)),
		event(2, `{"started":true}`, status(podiumv1.TaskState_TASK_STATE_RUNNING)),
		event(3, `{"task":{"offset":3}}`, logEv("hi\n")),
		ack(2))
	ended := join(running,
		event(4, `{"task":{"offset":9}}`, status(podiumv1.TaskState_TASK_STATE_SUCCEEDED)),
		event(5, "", logEv("note: uploaded report.xml")),
		ack(5))
	compacted := join(header,
		appendRecord(nil, kindCheckpoint, checkpoint(7, 6, flagFinal|flagEnded, []byte(`{"task":{"offset":40}}`))...),
		event(7, "", logEv("late note")))
	rejected := event(1, "", status(podiumv1.TaskState_TASK_STATE_QUEUED))
	return [][]byte{
		nil,
		running,
		ended,
		append(append([]byte(nil), running...), 'E', 0, 0, 0, 200, 1, 2), // torn tail
		compacted,
		rejected,
		join(header, event(3, "", logEv("a gap"))),                  // events 1 and 2 missing
		join(header, appendRecord(nil, 'Z', []byte("what?"))),       // unknown kind
		join(header, appendRecord(nil, kindEvent, []byte{0, 0, 1})), // short event
		join(header, appendRecord(nil, kindAck, []byte{1})),         // short ack
		// A file reset in place (resetLocked) by a crash before the cut:
		// the checkpoint, then whole old records, all acknowledged.
		join(header,
			appendRecord(nil, kindCheckpoint, checkpoint(5, 5, 0, []byte(`{"task":{"offset":50}}`))...),
			event(3, `{"task":{"offset":3}}`, logEv("hi\n")),
			event(4, `{"task":{"offset":9}}`, logEv("old\n")),
			ack(4)),
	}
}

// A checkpoint written in place over a file's old records, with the agent
// crashing before it cut them off, still says where the attempt stands: the
// old records after it, all acknowledged, do not move its cursor back (the
// agent would read output it already sent again).
func TestCheckpointInPlaceOverOldRecords(t *testing.T) {
	t.Parallel()
	seeds := seedFiles(t)
	a, _, n, err := decode(seeds[len(seeds)-1])
	if err != nil || n != len(seeds[len(seeds)-1]) {
		t.Fatalf("decode: %v, %d of %d bytes", err, n, len(seeds[len(seeds)-1]))
	}
	if a.LastSeq != 5 || a.Acked != 5 || len(a.Events) != 0 || string(a.Cursor) != `{"task":{"offset":50}}` {
		t.Fatalf("decoded as last %d acked %d, %d events, cursor %s; want the checkpoint's 5, 5, none, offset 50",
			a.LastSeq, a.Acked, len(a.Events), a.Cursor)
	}
}

// withGoodCRCs is data with every record's CRC recomputed, so that the
// fuzzer's changes to a payload reach the code that reads payloads instead
// of all ending as a torn tail.
func withGoodCRCs(data []byte) []byte {
	out := append([]byte(nil), data...)
	for pos := 0; len(out)-pos >= 9; {
		l := binary.BigEndian.Uint32(out[pos+1:])
		if l > maxRecord || len(out)-pos < 9+int(l) {
			break
		}
		end := pos + 5 + int(l)
		binary.BigEndian.PutUint32(out[end:], crc32.Checksum(out[pos:end], castagnoli))
		pos = end + 4
	}
	return out
}

// FuzzSpoolDecode feeds decode what a crash, a full disk or a stray editor
// can leave in a spool file. Whatever the bytes, decode must not panic; it
// must keep only whole records (what load leaves on disk decodes to the same
// again, with nothing left to cut); and an attempt it returns must hold
// every unacknowledged event, in order, which is what the session re-sends.
func FuzzSpoolDecode(f *testing.F) {
	for _, seed := range seedFiles(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		checkDecode(t, withGoodCRCs(data))
	})
}

func checkDecode(t *testing.T, data []byte) {
	a, sizes, n, err := decode(data)
	if err != nil {
		if a != nil || sizes != nil || n != 0 {
			t.Fatalf("decode failed (%v) but returned %v, %v, %d", err, a, sizes, n)
		}
		return
	}
	if n < 0 || n > len(data) {
		t.Fatalf("decode kept %d bytes of %d", n, len(data))
	}
	again, _, n2, err := decode(data[:n])
	if err != nil || n2 != n {
		t.Fatalf("the %d whole bytes decode to %d bytes, %v", n, n2, err)
	}
	if !sameAttempt(a, again) {
		t.Fatalf("the whole records alone decode differently:\n%+v\n%+v", a, again)
	}
	if a == nil {
		return
	}
	if a.LastSeq < a.Acked {
		t.Fatalf("last seq %d is below the acknowledged %d", a.LastSeq, a.Acked)
	}
	if uint64(len(a.Events)) != a.LastSeq-a.Acked {
		t.Fatalf("%d events between acknowledged %d and last %d", len(a.Events), a.Acked, a.LastSeq)
	}
	for i, ev := range a.Events {
		if ev.GetSeq() != a.Acked+1+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.GetSeq(), a.Acked+1+uint64(i))
		}
	}
}

func sameAttempt(a, b *Attempt) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Key != b.Key || a.LastSeq != b.LastSeq || a.Acked != b.Acked || a.Final != b.Final || a.Ended != b.Ended ||
		!bytes.Equal(a.Cursor, b.Cursor) || !proto.Equal(a.Assign, b.Assign) || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		if !proto.Equal(a.Events[i], b.Events[i]) {
			return false
		}
	}
	return true
}

// The seeds decode to what was written.
func TestDecodeSeeds(t *testing.T) {
	t.Parallel()
	seeds := seedFiles(t)
	for i, tc := range []struct {
		name             string
		wantErr          bool
		lastSeq, acked   uint64
		events           int
		final, ended     bool
		assign, cutsTail bool
	}{
		{name: "empty"},
		{name: "running", lastSeq: 3, acked: 2, events: 1, assign: true},
		{name: "ended", lastSeq: 5, acked: 5, final: true, ended: true, assign: true},
		{name: "torn tail", lastSeq: 3, acked: 2, events: 1, assign: true, cutsTail: true},
		{name: "compacted", lastSeq: 7, acked: 6, events: 1, final: true, ended: true, assign: true},
		{name: "rejected", lastSeq: 1, events: 1, final: true},
		{name: "gap", wantErr: true},
		{name: "unknown kind", wantErr: true},
		{name: "short event", wantErr: true},
		{name: "short ack", wantErr: true},
	} {
		a, _, n, err := decode(seeds[i])
		switch {
		case tc.wantErr:
			if err == nil {
				t.Errorf("%s: decoded as %+v, want an error", tc.name, a)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
			continue
		case (n < len(seeds[i])) != tc.cutsTail:
			t.Errorf("%s: %d whole bytes of %d", tc.name, n, len(seeds[i]))
		}
		if tc.name == "empty" {
			if a != nil {
				t.Errorf("empty: decoded as %+v, want nothing", a)
			}
			continue
		}
		if a == nil || a.TaskID != "task_01JD" || a.Attempt != 2 || a.LastSeq != tc.lastSeq || a.Acked != tc.acked ||
			len(a.Events) != tc.events || a.Final != tc.final || a.Ended != tc.ended || (a.Assign != nil) != tc.assign {
			t.Errorf("%s: decoded as %+v", tc.name, a)
		}
	}
}

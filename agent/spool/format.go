package spool

// The bytes of a spool file (see "File format" in the package doc): framing
// records, and decode, which turns a file's bytes back into what they say
// without touching any file, so that it can be tested and fuzzed on bytes
// alone.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

const (
	kindHeader     = 'H'
	kindEvent      = 'E'
	kindAck        = 'A'
	kindCheckpoint = 'C'

	flagFinal = 1 << 0
	flagEnded = 1 << 1

	maxRecord = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decode reads the records of a spool file. It returns what they say; the
// sizes of the unacknowledged events' records, by seq, for the compaction
// rule; and how many bytes of data are whole records: anything after is a
// torn tail, which the caller cuts off. The Attempt is nil when no record names an attempt; an
// error means the records are whole but make no sense, which no crash can
// cause.
func decode(data []byte) (*Attempt, map[uint64]int64, int, error) {
	a := &Attempt{}
	sizes := make(map[uint64]int64)
	known := false
	events := make(map[uint64]*podiumv1.TaskEvent)
	pos := 0
	for pos < len(data) {
		kind, payload, n, ok := parseRecord(data[pos:])
		if !ok {
			break
		}
		switch kind {
		case kindHeader:
			as := &podiumv1.Assign{}
			if err := proto.Unmarshal(payload, as); err != nil {
				return nil, nil, 0, fmt.Errorf("header: %w", err)
			}
			a.Assign = as
			a.Key = attempt.Of(as)
			known = true
		case kindEvent:
			if len(payload) < 4 {
				return nil, nil, 0, errors.New("short event record")
			}
			cl := int(binary.BigEndian.Uint32(payload))
			if 4+cl > len(payload) {
				return nil, nil, 0, errors.New("event record with a cursor longer than itself")
			}
			ev := &podiumv1.TaskEvent{}
			if err := proto.Unmarshal(payload[4+cl:], ev); err != nil {
				return nil, nil, 0, fmt.Errorf("event: %w", err)
			}
			if !known {
				a.Key = attempt.Of(ev)
				known = true
			}
			if ev.GetSeq() <= a.Acked {
				// Only after a checkpoint written in place over older
				// records (see resetLocked): the checkpoint says all.
				break
			}
			if cl > 0 {
				a.Cursor = append([]byte(nil), payload[4:4+cl]...)
			}
			if ev.GetSeq() > a.Acked {
				events[ev.GetSeq()] = ev
				sizes[ev.GetSeq()] = int64(n)
			}
			a.LastSeq = max(a.LastSeq, ev.GetSeq())
			if ev.GetStatus() != nil {
				// A note after the terminal status leaves the attempt
				// ended.
				a.Final, a.Ended = attempt.IsFinal(ev)
			}
		case kindAck:
			if len(payload) != 8 {
				return nil, nil, 0, errors.New("spool: bad ack record")
			}
			seq := binary.BigEndian.Uint64(payload)
			if seq > a.Acked {
				a.Acked = seq
				for s := range events {
					if s <= seq {
						delete(events, s)
						delete(sizes, s)
					}
				}
			}
		case kindCheckpoint:
			if len(payload) < 8+8+1+4 {
				return nil, nil, 0, errors.New("spool: bad checkpoint record")
			}
			a.LastSeq = binary.BigEndian.Uint64(payload)
			a.Acked = binary.BigEndian.Uint64(payload[8:])
			flags := payload[16]
			a.Final, a.Ended = flags&flagFinal != 0, flags&flagEnded != 0
			cl := int(binary.BigEndian.Uint32(payload[17:]))
			if 21+cl > len(payload) {
				return nil, nil, 0, errors.New("spool: bad checkpoint cursor")
			}
			if cl > 0 {
				a.Cursor = append([]byte(nil), payload[21:21+cl]...)
			}
		default:
			return nil, nil, 0, fmt.Errorf("unknown record kind %q", kind)
		}
		pos += n
	}
	if !known {
		return nil, nil, pos, nil
	}
	a.LastSeq = max(a.LastSeq, a.Acked)
	for seq := a.Acked + 1; seq <= a.LastSeq; seq++ {
		ev, ok := events[seq]
		if !ok {
			return nil, nil, 0, fmt.Errorf("event %d of %s is missing", seq, a.Key)
		}
		a.Events = append(a.Events, ev)
	}
	return a, sizes, pos, nil
}

func parseRecord(b []byte) (kind byte, payload []byte, n int, ok bool) {
	if len(b) < 9 {
		return 0, nil, 0, false
	}
	l := binary.BigEndian.Uint32(b[1:5])
	if l > maxRecord || len(b) < 9+int(l) {
		return 0, nil, 0, false
	}
	n = 5 + int(l) + 4
	if crc32.Checksum(b[:5+int(l)], castagnoli) != binary.BigEndian.Uint32(b[5+int(l):n]) {
		return 0, nil, 0, false
	}
	return b[0], b[5 : 5+int(l)], n, true
}

func appendRecord(b []byte, kind byte, payload ...[]byte) []byte {
	start := len(b)
	total := 0
	for _, p := range payload {
		total += len(p)
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint32(b, uint32(total))
	for _, p := range payload {
		b = append(b, p...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// checkpoint is the payload of a C record.
func checkpoint(lastSeq, acked uint64, flags byte, cursor []byte) [][]byte {
	var h [21]byte
	binary.BigEndian.PutUint64(h[0:], lastSeq)
	binary.BigEndian.PutUint64(h[8:], acked)
	h[16] = flags
	binary.BigEndian.PutUint32(h[17:], uint32(len(cursor)))
	return [][]byte{h[:], cursor}
}

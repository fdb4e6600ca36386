package nodes

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The bounds on what a node may say about its GPUs. The list is stored on
// the node's row and read by every placement pass, so one node's message must
// not grow it without bound; no machine holds more than a few dozen GPUs,
// and nvidia-smi's names and UUIDs are far shorter than these.
const (
	maxNodeGPUs        = 256
	maxGPUModelBytes   = 256
	maxGPUUUIDBytes    = 128
	maxGPUMemoryMBNode = 1 << 40
)

// nodeGPUs is the GPU list a node's capacity reports, as the store keeps it:
// at most maxNodeGPUs of them, each name and UUID cut to its bound, valid
// UTF-8 and without control characters (Postgres's jsonb refuses a NUL), and
// a memory that is never negative. Like nodeLimits it trims rather than
// refuses: a node with an odd GPU still runs the tasks that need none.
func nodeGPUs(gpus []*podiumv1.Gpu) []store.NodeGPU {
	if len(gpus) == 0 {
		return nil
	}
	out := make([]store.NodeGPU, 0, min(len(gpus), maxNodeGPUs))
	for _, g := range gpus {
		if len(out) == maxNodeGPUs {
			break
		}
		out = append(out, store.NodeGPU{
			Index: max(g.GetIndex(), 0), UUID: cleanText(g.GetUuid(), maxGPUUUIDBytes),
			Model: cleanText(g.GetModel(), maxGPUModelBytes), MemoryMB: min(max(g.GetMemoryMb(), 0), maxGPUMemoryMBNode),
		})
	}
	return out
}

// cleanText is s as valid UTF-8 without control characters, cut to at most
// limit bytes on a character boundary.
func cleanText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// gpusChanged says whether a heartbeat's capacity reports other GPUs than
// the session last recorded (the Hello's, or an earlier heartbeat's). A
// heartbeat without a capacity changes nothing. It is asked before seen
// records the new capacity.
func (s *Session) gpusChanged(c *podiumv1.Capacity) bool {
	if c == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.capacity.GetGpus()
	now := c.GetGpus()
	if len(old) != len(now) {
		return true
	}
	for i := range old {
		if !proto.Equal(old[i], now[i]) {
			return true
		}
	}
	return false
}

// mergeBeat is the heartbeat to keep when newer arrives while older is still
// buffered: newer, carrying older's GPU change if newer has none of its own.
// Without it a change reported in one heartbeat and followed by another
// before the flush (or a flush that failed) would never be written: the
// later heartbeat reports the same list and so does not count as a change.
func mergeBeat(older, newer store.Heartbeat) store.Heartbeat {
	if older.GPUsChanged && !newer.GPUsChanged {
		newer.GPUsChanged, newer.GPUs = true, older.GPUs
	}
	return newer
}

package server

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Load shedding. A replica flooded by clients (large submits, big lists,
// thousands of followers) must not take on more than it can hold: past a
// bound it answers at once, before reading a body, with Unavailable (HTTP
// 503) and a Retry-After, and what it already serves goes on. Nodes are
// never shed: their streams carry the running tasks' output and heartbeats,
// and a node refused would be declared unreachable.

// Defaults of ShedConfig.
const (
	// DefaultMaxRequests bounds the people's API calls (not streams) served
	// at once. Each holds up to about a megabyte of body and its decoded
	// copies while it runs.
	DefaultMaxRequests = 256
	// DefaultMaxStreams bounds the people's streaming calls (followers,
	// downloads) served at once; each holds a goroutine and small buffers
	// for as long as it follows.
	DefaultMaxStreams = 4096
	// shedAtFraction is the share of the memory limit past which new
	// people's calls are shed.
	shedAtFraction = 0.85
	// goLimitFraction is the share of a control group's memory limit the Go
	// runtime's soft limit (GOMEMLIMIT) is set to: the rest is for what the
	// runtime does not count (thread stacks in the kernel, page tables).
	goLimitFraction = 0.9
	// callReserve is the memory each people's call in flight (not a stream)
	// is counted at against the memory limit, on top of what the runtime
	// holds: a call's memory is only seen once it has been allocated, and a
	// burst of calls arriving together would otherwise all be admitted at
	// the same low reading. A submit near the spec bound or a page of large
	// tasks holds about this much while it is decoded, stored and encoded.
	callReserve = 16 << 20
	// memorySampleEvery bounds how often the runtime's memory is read.
	memorySampleEvery = 20 * time.Millisecond
	// shedLogEvery bounds how often shedding is logged.
	shedLogEvery = 10 * time.Second
)

// ShedConfig bounds what a replica takes on from people's clients.
type ShedConfig struct {
	// MaxRequests is how many people's API calls other than streams are
	// served at once (DefaultMaxRequests when 0); -1: no bound.
	MaxRequests int
	// MaxStreams is how many people's streaming calls are served at once
	// (DefaultMaxStreams when 0); -1: no bound.
	MaxStreams int
	// MemoryLimit is the process's memory limit in bytes: new people's calls
	// are shed while the Go runtime holds more than 85% of it. 0: none.
	// MemoryLimitFor works it out from --memory-limit.
	MemoryLimit int64
}

// MemoryLimitFor is the memory limit for --memory-limit's value: "auto"
// takes the control group's limit (cgroup v2 or v1) if there is one, else
// GOMEMLIMIT's if it is set, else none; "off" is none; anything else is a
// size (taskspec.ParseSize: 2GiB, 512MiB). With a limit and no GOMEMLIMIT of the operator's own it
// sets the Go runtime's soft limit to 90% of it, so that the collector works
// harder before the kernel's OOM killer would. It says in words where the
// limit came from.
func MemoryLimitFor(value string) (limit int64, from string, err error) {
	switch value {
	case "off":
		return 0, "off", nil
	case "", "auto":
		if l, path := cgroupMemoryLimit(); l > 0 {
			limit, from = l, "the control group's limit ("+path+")"
		} else if os.Getenv("GOMEMLIMIT") != "" {
			if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
				return l, "GOMEMLIMIT", nil
			}
		}
		if limit == 0 {
			return 0, "none found (no control group limit, no GOMEMLIMIT)", nil
		}
	default:
		limit, err = taskspec.ParseSize(value)
		if err != nil || limit <= 0 {
			return 0, "", fmt.Errorf("--memory-limit %q: want auto, off or a size such as 2GiB", value)
		}
		from = "--memory-limit"
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(float64(limit) * goLimitFraction))
	}
	return limit, from, nil
}

// cgroupMemoryLimit is the memory limit of the control group this process
// is in, and the file it came from; 0 when there is none (or it is the
// kernel's "no limit").
func cgroupMemoryLimit() (int64, string) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "hierarchy-ID:controllers:path"
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		// In a container without a cgroup namespace the group's path names
		// the host's hierarchy, and the container sees its own group at the
		// mount's root: try both.
		var files []string
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = []string{filepath.Join("/sys/fs/cgroup", parts[2], "memory.max"), "/sys/fs/cgroup/memory.max"}
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = []string{filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"), "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
		default:
			continue
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			// v2 says "max"; v1 says a page-rounded huge number.
			if err != nil || n <= 0 || n >= 1<<60 {
				continue
			}
			return n, file
		}
	}
	return 0, ""
}

// shedder admits or sheds the people's calls.
type shedder struct {
	next             http.Handler
	requests         chan struct{} // nil: no bound
	streams          chan struct{} // nil: no bound
	maxReq, maxStrm  int
	memLimit, shedAt int64
	streaming        map[string]bool // path → the call streams its answer
	log              *slog.Logger

	sampleMu  sync.Mutex
	sampledAt atomic.Int64 // unix nanoseconds
	inUse     atomic.Int64 // bytes the runtime held at the last sample

	calls    atomic.Int64 // people's calls (not streams) in flight
	shed     atomic.Int64 // calls shed since the last log line
	loggedAt atomic.Int64
}

func newShedder(cfg ShedConfig, next http.Handler, log *slog.Logger) *shedder {
	s := &shedder{next: next, streaming: streamingCalls(), log: log, memLimit: cfg.MemoryLimit}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	s.maxReq, s.maxStrm = cfg.MaxRequests, cfg.MaxStreams
	if cfg.MaxRequests > 0 {
		s.requests = make(chan struct{}, cfg.MaxRequests)
	}
	if cfg.MaxStreams > 0 {
		s.streams = make(chan struct{}, cfg.MaxStreams)
	}
	if cfg.MemoryLimit > 0 {
		s.shedAt = int64(float64(cfg.MemoryLimit) * shedAtFraction)
	}
	return s
}

// streamingCalls are the people's calls whose answer is a stream.
func streamingCalls() map[string]bool {
	m := map[string]bool{}
	for _, fd := range []protoreflect.FileDescriptor{podiumv1.File_podium_v1_task_proto, podiumv1.File_podium_v1_admin_proto} {
		svcs := fd.Services()
		for i := range svcs.Len() {
			svc := svcs.Get(i)
			methods := svc.Methods()
			for j := range methods.Len() {
				if md := methods.Get(j); md.IsStreamingServer() || md.IsStreamingClient() {
					m["/"+string(svc.FullName())+"/"+string(md.Name())] = true
				}
			}
		}
	}
	return m
}

func (s *shedder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isPeopleAPI(r.URL.Path) {
		s.next.ServeHTTP(w, r)
		return
	}
	stream := s.streaming[r.URL.Path]
	if !stream {
		n := s.calls.Add(1)
		defer s.calls.Add(-1)
		if s.shedAt > 0 {
			// The calls in flight, this one included, are counted at their
			// reserve on top of what the runtime holds.
			if used := s.memoryInUse(); used+n*callReserve > s.shedAt {
				s.refuse(w, r, 2*time.Second, fmt.Sprintf("its memory use (%d MiB, and %d MiB held for the %d API calls in flight) is near its limit (%d MiB, --memory-limit)",
					used>>20, n*callReserve>>20, n, s.memLimit>>20))
				return
			}
		}
	} else if s.shedAt > 0 {
		if used := s.memoryInUse(); used > s.shedAt {
			s.refuse(w, r, 2*time.Second, fmt.Sprintf("its memory use (%d MiB) is near its limit (%d MiB, --memory-limit)", used>>20, s.memLimit>>20))
			return
		}
	}
	slots, max, what, flag := s.requests, s.maxReq, "API calls", "--max-requests"
	if stream {
		slots, max, what, flag = s.streams, s.maxStrm, "streaming API calls (followers, downloads)", "--max-streams"
	}
	if slots != nil {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			s.refuse(w, r, time.Second, fmt.Sprintf("it is serving %d %s at once, its bound (%s)", max, what, flag))
			return
		}
	}
	s.next.ServeHTTP(w, r)
}

// memoryInUse is the memory the Go runtime holds from the system (what it
// mapped less what it gave back), read at most every memorySampleEvery.
func (s *shedder) memoryInUse() int64 {
	now := time.Now().UnixNano()
	if now-s.sampledAt.Load() < int64(memorySampleEvery) || !s.sampleMu.TryLock() {
		return s.inUse.Load()
	}
	defer s.sampleMu.Unlock()
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(sample)
	used := int64(sample[0].Value.Uint64()) - int64(sample[1].Value.Uint64())
	s.inUse.Store(used)
	s.sampledAt.Store(now)
	return used
}

// refuse answers Unavailable (HTTP 503 on Connect's protocol) with a
// Retry-After, in the caller's protocol, before its body is read; the podium
// CLI then asks another replica, and a follower retries.
func (s *shedder) refuse(w http.ResponseWriter, r *http.Request, after time.Duration, why string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(after.Seconds())))
	err := connect.NewError(connect.CodeUnavailable, errors.New("podium-coordinator is shedding load: "+why+"; retry in "+after.String()+
		" (an operator can raise the bound, or add a replica)"))
	if ew := connect.NewErrorWriter(); ew.IsSupported(r) {
		_ = ew.Write(w, r, err)
	} else {
		http.Error(w, err.Message(), http.StatusServiceUnavailable)
	}
	n := s.shed.Add(1)
	now := time.Now().UnixNano()
	last := s.loggedAt.Load()
	if now-last >= int64(shedLogEvery) && s.loggedAt.CompareAndSwap(last, now) {
		s.shed.Add(-n)
		s.log.Warn("shedding load: refused people's API calls with 503 and Retry-After", "refused", n, "why", why)
	}
}

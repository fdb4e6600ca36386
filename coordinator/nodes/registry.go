// Package nodes owns node identity and the node stream: enrollment, the live
// sessions this replica holds, heartbeat bookkeeping, delivery of the commands
// stored for a node, and the events nodes push back.
//
// The sessions are in memory because a node's stream terminates on exactly one
// replica, which is the only one that can write to it. Everything another
// replica needs to know about them is in Postgres: the session row names the
// replica and its epoch, commands are rows, and a NOTIFY tells the holder to
// look.
package nodes

import (
	"sync"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Session is one live node stream on this replica.
type Session struct {
	NodeID  string
	Epoch   int64
	Started time.Time

	out       chan *podiumv1.StreamResponse
	done      chan struct{}
	closeOnce sync.Once
	// ended is closed after the stream handler has released the node's lease,
	// so a replacement can take it.
	ended chan struct{}
}

func newSession(nodeID string, epoch int64) *Session {
	return &Session{
		NodeID: nodeID, Epoch: epoch, Started: time.Now(),
		out:   make(chan *podiumv1.StreamResponse, 256),
		done:  make(chan struct{}),
		ended: make(chan struct{}),
	}
}

// Done is closed when the session ends, whatever ended it.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close ends the session; the stream handler returns and the node reconnects.
func (s *Session) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// send queues a message for the node. It never blocks on a slow node for long:
// a node that cannot take 256 messages is not reading, and the session ends.
func (s *Session) send(m *podiumv1.StreamResponse) error {
	select {
	case <-s.done:
		return ErrSessionClosed
	case s.out <- m:
		return nil
	case <-time.After(10 * time.Second):
		s.Close()
		return ErrSessionClosed
	}
}

// Registry holds this replica's live sessions.
type Registry struct {
	mu       sync.Mutex
	sessions map[string]*Session
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{sessions: map[string]*Session{}} }

// Get returns the node's live session on this replica.
func (r *Registry) Get(nodeID string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[nodeID]
	return s, ok
}

func (r *Registry) put(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sessions[s.NodeID] = s
}

func (r *Registry) remove(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.NodeID] == s {
		delete(r.sessions, s.NodeID)
	}
}

// Len is how many sessions this replica holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// CloseAll ends every session. Graceful shutdown calls it so the stream
// handlers return before the HTTP server waits on them, and a lost lease calls
// it because this replica can no longer prove it holds any node.
func (r *Registry) CloseAll() {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.Close()
	}
}

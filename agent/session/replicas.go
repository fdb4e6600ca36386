package session

// Which coordinator to dial: the enrolled URL first, then each replica the
// last HelloAck named; and the HTTP clients that reach them.

import (
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/transport"
)

// candidate is the coordinator address to dial next: the enrolled URL first,
// then each replica the last HelloAck listed, in turn.
func (s *Session) candidate() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.candidatesLocked()
	return all[s.candidateIx%len(all)]
}

func (s *Session) nextCandidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.candidateIx = (s.candidateIx + 1) % len(s.candidatesLocked())
}

func (s *Session) candidatesLocked() []string {
	all := []string{s.base.String()}
	for _, r := range s.replicas {
		if r != "" && !slices.Contains(all, r) {
			all = append(all, r)
		}
	}
	return all
}

// replicaURL turns an address from HelloAck into a URL. A bare host:port
// takes the scheme of the enrolled URL, because a replica serves the same way
// its peers do.
func (s *Session) replicaURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = s.base.Scheme + "://" + addr
	}
	u, err := transport.NormalizeURL(addr)
	if err != nil {
		s.log.Warn("ignoring a replica address the coordinator sent", "address", addr, "err", err)
		return ""
	}
	return u
}

func (s *Session) httpClient(target string) (connect.HTTPClient, error) {
	u, err := transport.ParseURL(target)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[u.Scheme]; ok {
		return c, nil
	}
	c, err := transport.NewClient(target)
	if err != nil {
		return nil, err
	}
	s.clients[u.Scheme] = c
	return c, nil
}

// Coordinator returns the HTTP client and URL of the coordinator the session
// is connected to, or tries next: what other calls on the node's behalf (an
// artifact upload) use, so they dial the way the stream does. Requests made
// with it must use the agent's context (see transport.ContextWithDialer).
func (s *Session) Coordinator() (connect.HTTPClient, string, error) {
	target := s.candidate()
	hc, err := s.httpClient(target)
	if err != nil {
		return nil, "", err
	}
	return hc, target, nil
}

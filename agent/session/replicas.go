package session

// Which coordinator to dial: the enrolled URL first, then those given with
// --coordinator, then each replica the coordinator last named (in HelloAck,
// or pushed when a replica joined or left, and kept on disk by the agent);
// and the HTTP clients that reach them.

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
	for _, r := range slices.Concat(s.configured, s.replicas) {
		if r != "" && !slices.Contains(all, r) {
			all = append(all, r)
		}
	}
	return all
}

// setReplicas takes the coordinator's list of replicas. An empty list (the
// coordinator could not read it) keeps the one the node has. A changed list
// is handed to Config.OnReplicas to keep.
func (s *Session) setReplicas(addrs []string) {
	urls := s.replicaURLs(addrs)
	if len(urls) == 0 {
		return
	}
	s.mu.Lock()
	changed := !slices.Equal(s.replicas, urls)
	s.replicas = urls
	s.mu.Unlock()
	if changed {
		s.log.Info("coordinator replicas", "replicas", urls)
		if s.cfg.OnReplicas != nil {
			s.cfg.OnReplicas(slices.Clone(urls))
		}
	}
}

// replicaURLs turns addresses into URLs (see replicaURL), dropping repeats
// and keeping at most maxReplicas.
func (s *Session) replicaURLs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if len(out) == maxReplicas {
			s.log.Warn("the coordinator listed more replicas than a node keeps; ignoring the rest", "max", maxReplicas)
			break
		}
		if len(a) > maxReplicaAddress {
			continue
		}
		if u := s.replicaURL(a); u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// maxReplicas and maxReplicaAddress bound the list a coordinator can make a
// node keep and dial (identity.MaxReplicas and MaxReplicaAddress agree).
const (
	maxReplicas       = 64
	maxReplicaAddress = 2048
)

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

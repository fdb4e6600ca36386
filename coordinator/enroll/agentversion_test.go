package enroll

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

func TestAgentVersionPolicy(t *testing.T) {
	for _, c := range []struct {
		agent, coordinator string
		refused            bool
	}{
		{"v1.4.0", "v1.4.0", false},
		{"v1.4.2", "v1.4.0", false},
		{"v1.3.9", "v1.4.0", false},            // N-1
		{"v1.3.0-rc1", "v1.4.0", false},        // a pre-release of N-1 is N-1
		{"v1.3.0-7-gabcdef0", "v1.4.0", false}, // a build past N-1
		{"v1.2.9", "v1.4.0", true},             // N-2
		{"v1.2.0-12-gabcdef0", "v1.4.0", true},
		{"v0.9.0", "v1.4.0", true},
		{"v0.9.0", "v1.0.0", false}, // X.0 takes every X-1 agent
		{"v0.2.0", "v1.0.0", false},
		{"v0.9.0", "v2.0.0", true},
		{"v1.5.0", "v1.4.0", false}, // newer agents are taken
		{"v2.0.0", "v1.4.0", false},
		{"dev", "v1.4.0", false}, // no release version: no order
		{"4967e66", "v1.4.0", false},
		{"", "v1.4.0", false},
		{"v0.1.0", "dev", false},
		{"v0.1.0", "4967e66", false},
	} {
		err := agentVersionPolicy(c.agent, c.coordinator)
		if (err != nil) != c.refused {
			t.Errorf("agent %q, coordinator %q: %v; want refused %v", c.agent, c.coordinator, err, c.refused)
			continue
		}
		if err == nil {
			continue
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
			t.Errorf("agent %q, coordinator %q: %v; want failed_precondition", c.agent, c.coordinator, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "upgrade podium-agent") || !strings.Contains(msg, c.agent) || !strings.Contains(msg, c.coordinator) {
			t.Errorf("the refusal says %q; want it to name both versions and say to upgrade podium-agent", msg)
		}
	}
}

package nodes

import (
	"fmt"
	"slices"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// What a node's Hello says it allows is kept as placement can use it: ranges
// masked, what is not a range dropped, a bounded number of them, and a
// negative bound read as none.
func TestNodeLimitsFromHello(t *testing.T) {
	t.Parallel()
	many := make([]string, 0, maxPermitEgress+10)
	for i := range maxPermitEgress + 10 {
		many = append(many, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	got := nodeLimits(&podiumv1.TaskLimits{MaxCpu: -1, MaxMemoryMb: 4096, MaxPids: -5, MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 30,
		PermitEgress: append([]string{"10.1.2.3/8", "not a range", "fd00::1/64"}, many...)})
	if got.MaxCPU != 0 || got.MaxMemoryMB != 4096 || got.MaxPids != 0 || got.MaxTimeoutSeconds != 60 || got.MaxOutputBytes != 1<<30 {
		t.Fatalf("limits %+v", got)
	}
	if len(got.PermitEgress) != maxPermitEgress || !slices.Equal(got.PermitEgress[:2], []string{"10.0.0.0/8", "fd00::/64"}) {
		t.Fatalf("kept %d ranges starting %v, want %d starting 10.0.0.0/8, fd00::/64", len(got.PermitEgress), got.PermitEgress[:2], maxPermitEgress)
	}
	if l := nodeLimits(nil); l.MaxMemoryMB != 0 || l.PermitEgress != nil {
		t.Fatalf("a Hello without limits gave %+v", l)
	}
}

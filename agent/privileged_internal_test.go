package agent

import (
	"slices"
	"testing"
)

// The capabilities a machine's bounding set lacks are named, so that an
// operator who allows privileged sidecars where the engine cannot start
// them is told at once which ones are missing (this CI's own machine lacks
// CAP_SYS_RESOURCE).
func TestMissingCapabilities(t *testing.T) {
	const status = "Name:\tpodium-agent\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\n" +
		"CapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n"
	got, err := missingCapabilities(status, 40)
	if err != nil || !slices.Equal(got, []string{"CAP_SYS_RESOURCE"}) {
		t.Fatalf("missingCapabilities = %v, %v; want CAP_SYS_RESOURCE", got, err)
	}
	full := "CapBnd:\t000001ffffffffff\n"
	if got, err := missingCapabilities(full, 40); err != nil || len(got) != 0 {
		t.Fatalf("a full set: %v, %v; want nothing missing", got, err)
	}
	// A kernel newer than the names known here.
	if got, _ := missingCapabilities("CapBnd:\t000001ffffffffff\n", 42); !slices.Equal(got, []string{"capability 41", "capability 42"}) {
		t.Fatalf("capabilities past the known names: %v", got)
	}
	if _, err := missingCapabilities("Name:\tx\n", 40); err == nil {
		t.Fatal("a status without CapBnd gave no error")
	}
}

package nodes

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// nodeDisk is the free-space floor and state a node's capacity reports, as
// the store keeps them.
func nodeDisk(c *podiumv1.Capacity) store.NodeDisk {
	return store.NodeDisk{MinFreeMB: c.GetMinFreeDiskMb(), LowSince: reportedSince(c.GetDiskLowSince())}
}

// reportedSince is a "since" a node's capacity reports (its data disk below
// its floor, its engine not answering) as the store keeps it: nil when
// unset.
func reportedSince(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	at := ts.AsTime()
	if at.IsZero() || at.After(time.Now()) {
		// A node's clock ahead of ours must not make "since" a time that
		// has not come; the condition holds now.
		at = time.Now()
	}
	return &at
}

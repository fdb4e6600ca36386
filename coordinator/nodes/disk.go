package nodes

import (
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// nodeDisk is the free-space floor and state a node's capacity reports, as
// the store keeps them.
func nodeDisk(c *podiumv1.Capacity) store.NodeDisk {
	d := store.NodeDisk{MinFreeMB: c.GetMinFreeDiskMb()}
	if c.GetDiskLowSince() != nil {
		at := c.GetDiskLowSince().AsTime()
		if at.IsZero() || at.After(time.Now()) {
			// A node's clock ahead of ours must not make "since" a time
			// that has not come; the node is low now.
			at = time.Now()
		}
		d.LowSince = &at
	}
	return d
}

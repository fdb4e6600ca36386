package store

import "time"

// NodeDisk is a node's data disk as its agent last reported it: its
// free-space floor (podium-agent --min-free-disk-mb, 0: none) and since
// when the disk has been below it (nil while above). A node below its floor
// takes no new task (placement.Candidate.DiskLowSince).
type NodeDisk struct {
	MinFreeMB int64
	LowSince  *time.Time
}

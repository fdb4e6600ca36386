package identity

// The coordinator replicas the node last heard of, kept beside the identity
// so an agent that starts while the replica it enrolled with is down still
// finds the others.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ReplicasFileName is the replica list's file name inside the data directory.
const ReplicasFileName = "replicas.json"

// MaxReplicas and MaxReplicaAddress bound the list: a coordinator (or a file
// someone wrote) cannot make the agent keep or dial more than this.
const (
	MaxReplicas       = 64
	MaxReplicaAddress = 2048
	maxReplicasFile   = MaxReplicas*(MaxReplicaAddress+8) + 64
)

type replicasFile struct {
	Replicas []string `json:"replicas"`
}

// BoundReplicas drops empty and overlong addresses and repeats, and keeps
// at most MaxReplicas, in order.
func BoundReplicas(addrs []string) []string {
	out := make([]string, 0, min(len(addrs), MaxReplicas))
	seen := map[string]bool{}
	for _, a := range addrs {
		if a == "" || len(a) > MaxReplicaAddress || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
		if len(out) == MaxReplicas {
			break
		}
	}
	return out
}

// SaveReplicas writes the replica list to dataDir atomically (see Save),
// bounded by BoundReplicas.
func SaveReplicas(dataDir string, addrs []string) error {
	b, err := json.Marshal(replicasFile{Replicas: BoundReplicas(addrs)})
	if err != nil {
		return fmt.Errorf("encode replica list: %w", err)
	}
	if err := writeAtomic(dataDir, ReplicasFileName, append(b, '\n')); err != nil {
		return fmt.Errorf("write replica list: %w", err)
	}
	return nil
}

// LoadReplicas reads the replica list SaveReplicas wrote. A missing file is
// an empty list. The file is opened without following a symbolic link and
// read up to a bound; a link, an oversized or a corrupt file is an error
// (the agent goes on without the list).
func LoadReplicas(dataDir string) ([]string, error) {
	path := filepath.Join(dataDir, ReplicasFileName)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replica list %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("replica list %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxReplicasFile+1))
	if err != nil {
		return nil, fmt.Errorf("read replica list %s: %w", path, err)
	}
	if len(b) > maxReplicasFile {
		return nil, fmt.Errorf("replica list %s is larger than %d bytes", path, maxReplicasFile)
	}
	var rf replicasFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("replica list %s is corrupt: %w", path, err)
	}
	return BoundReplicas(rf.Replicas), nil
}

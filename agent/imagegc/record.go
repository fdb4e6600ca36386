package imagegc

// The record of uses: when each image in the engine was last used by a task
// or sidecar on this node, or, for one Podium never used, when the agent
// first saw it. It is kept in the data directory so that a restarted agent
// does not take every image for new (which would keep them all for another
// --image-gc-unused) nor for unused (which would remove them at once).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// RecordFile is the record's name in the data directory.
const RecordFile = "images.json"

// MaxRecorded bounds the record: past it, the images used longest ago are
// forgotten. A forgotten image that is still in the engine is seen again as
// new on the next pass, which keeps it longer, never shorter: the bound can
// only make the collector more careful. An engine with more images than this
// is far beyond what one node's tasks use.
const MaxRecorded = 10000

// maxRecordBytes bounds what is read back: a record of MaxRecorded entries
// is well under a megabyte.
const maxRecordBytes = 4 << 20

// recordData is RecordFile's content.
type recordData struct {
	// Images maps an image id (sha256:…) to when it was last used, or
	// first seen.
	Images map[string]time.Time `json:"images"`
}

// loadRecord reads the record in dir. A missing one is empty; one that
// cannot be read is reported with an empty record, which makes every image
// new again (the careful choice).
func loadRecord(dir string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	f, err := os.Open(filepath.Join(dir, RecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return out, err
	}
	if len(b) > maxRecordBytes {
		return out, fmt.Errorf("%s is larger than %d bytes, which no record the agent writes is", RecordFile, maxRecordBytes)
	}
	var d recordData
	if err := json.Unmarshal(b, &d); err != nil {
		return out, fmt.Errorf("%s is not a record of image uses: %w", RecordFile, err)
	}
	for id, t := range d.Images {
		if id != "" && !t.IsZero() {
			out[id] = t
		}
	}
	trim(out, MaxRecorded)
	return out, nil
}

// trim forgets the entries used longest ago until at most n are left.
func trim(m map[string]time.Time, n int) {
	if len(m) <= n {
		return
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return m[ids[i]].Before(m[ids[j]]) })
	for _, id := range ids[:len(ids)-n] {
		delete(m, id)
	}
}

// saveRecord writes the record atomically: a temporary file, synced, renamed
// into place, and the directory synced, so a crash leaves the old record or
// the new one, never a mix.
func saveRecord(dir string, m map[string]time.Time) error {
	b, err := json.Marshal(recordData{Images: m})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+RecordFile+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, RecordFile))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

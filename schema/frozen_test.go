package schema_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/podiumhq/podium/schema"
)

// checksumsFile records the sha256 of every released migration, in
// sha256sum's format (`cd schema/migrations && sha256sum -c checksums.txt`
// checks it too). A database that applied a migration never applies it
// again, so a change to a released one reaches only fresh databases: the
// schema would differ by where it was installed.
const checksumsFile = "migrations/checksums.txt"

var addChecksums = flag.Bool("add-migration-checksums", false,
	"record the checksum of each migration "+checksumsFile+" does not list yet (released ones are never rewritten)")

// TestReleasedMigrationsAreFrozen fails when a migration differs from the
// checksum recorded for it, when a recorded one is gone, and when one has
// no checksum yet. 0001_init.sql was edited after it first shipped; the
// recorded checksum is its content when the file was frozen, the baseline
// from then on.
func TestReleasedMigrationsAreFrozen(t *testing.T) {
	t.Parallel()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	recorded, order, err := readChecksums(checksumsFile)
	if err != nil {
		t.Fatalf("read %s: %v", checksumsFile, err)
	}
	shipped := map[string]bool{}
	var missing []string
	for _, m := range ms {
		name := m.Version + ".sql"
		shipped[name] = true
		sum := sha256.Sum256([]byte(m.SQL))
		got := hex.EncodeToString(sum[:])
		want, ok := recorded[name]
		switch {
		case !ok:
			missing = append(missing, name)
			recorded[name] = got
			order = append(order, name)
		case want != got:
			t.Errorf("schema/migrations/%s changed after it was released (sha256 %s, recorded %s in schema/%s): "+
				"a database that applied it never applies it again; put the change in a new migration instead and restore this file",
				name, got, want, checksumsFile)
		}
	}
	for _, name := range order {
		if !shipped[name] {
			t.Errorf("schema/migrations/%s is recorded in schema/%s but no longer ships: databases applied it; restore it and add a new migration instead",
				name, checksumsFile)
		}
	}
	if len(missing) == 0 {
		return
	}
	if !*addChecksums {
		t.Errorf("no checksum is recorded for %s; once the migration is final, record it with\n"+
			"\tgo test ./schema -run 'TestReleasedMigrationsAreFrozen$' -add-migration-checksums\n"+
			"and commit schema/%s (from then on the migration is frozen)", strings.Join(missing, ", "), checksumsFile)
		return
	}
	if err := writeChecksums(checksumsFile, recorded, order); err != nil {
		t.Fatalf("write %s: %v", checksumsFile, err)
	}
	t.Logf("recorded the checksums of %s in schema/%s", strings.Join(missing, ", "), checksumsFile)
}

// readChecksums reads "HEX  NAME" lines, in file order.
func readChecksums(path string) (sums map[string]string, order []string, err error) {
	sums = map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if _, herr := hex.DecodeString(sum); !ok || len(sum) != 64 || herr != nil || name != filepath.Base(name) {
			return nil, nil, fmt.Errorf("line %d %q is not \"SHA256  NAME.sql\"", n, line)
		}
		if _, dup := sums[name]; dup {
			return nil, nil, fmt.Errorf("line %d records %s a second time", n, name)
		}
		sums[name] = sum
		order = append(order, name)
	}
	return sums, order, sc.Err()
}

// writeChecksums writes the recorded checksums sorted by name, which is the
// order migrations apply in.
func writeChecksums(path string, sums map[string]string, order []string) error {
	names := append([]string(nil), order...)
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[name], name)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

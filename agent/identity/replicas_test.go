package identity_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/identity"
)

func TestReplicasRoundTripBoundedAndPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "agent")
	if got, err := identity.LoadReplicas(dir); err != nil || len(got) != 0 {
		t.Fatalf("no file: %v, %v; want an empty list", got, err)
	}
	want := []string{"http://a:8080", "http://b:8080"}
	if err := identity.SaveReplicas(dir, append(want, "", "http://a:8080", strings.Repeat("x", identity.MaxReplicaAddress+1))); err != nil {
		t.Fatal(err)
	}
	got, err := identity.LoadReplicas(dir)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("loaded %v, %v; want %v", got, err, want)
	}
	st, err := os.Stat(filepath.Join(dir, identity.ReplicasFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("replica list file: %v, %v; want mode 0600", st, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data dir holds %v; want the list alone (no temporary file left)", entries)
	}

	var many []string
	for i := range identity.MaxReplicas + 10 {
		many = append(many, fmt.Sprintf("http://r%d:8080", i))
	}
	if err := identity.SaveReplicas(dir, many); err != nil {
		t.Fatal(err)
	}
	if got, err := identity.LoadReplicas(dir); err != nil || len(got) != identity.MaxReplicas {
		t.Fatalf("loaded %d replicas, %v; want at most %d", len(got), err, identity.MaxReplicas)
	}
}

func TestReplicasRefusesLinksAndOversizedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.WriteFile(target, []byte(`{"replicas":["http://evil:1"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, identity.ReplicasFileName)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if got, err := identity.LoadReplicas(dir); err == nil {
		t.Fatalf("a symbolic link was followed: %v", got)
	}
	// Saving replaces the link with a file of its own; the target is untouched.
	if err := identity.SaveReplicas(dir, []string{"http://a:1"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "evil") {
		t.Fatalf("the link's target was written: %s", b)
	}

	if err := os.WriteFile(path, []byte(`{"replicas":["`+strings.Repeat("x", 1<<20)+`"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadReplicas(dir); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("oversized file: %v; want it refused", err)
	}
	if err := os.WriteFile(path, []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadReplicas(dir); err == nil {
		t.Fatal("a corrupt file loaded")
	}
}

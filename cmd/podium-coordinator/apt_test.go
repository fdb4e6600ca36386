package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// `podium-coordinator apt key` prints the fingerprint of the key the
// repository is signed with (the one in Postgres, or the operator's key
// file) alone on stdout, and how to pin it with install.sh on stderr; with
// no key yet it says what makes one.
func TestAptKeyPrintsTheFingerprint(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var stdout, stderr bytes.Buffer
	if code := aptCmd([]string{"key", "--database", db.URL}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no signing key in Postgres yet") {
		t.Errorf("apt key before any key: exit %d\n%s", code, stderr.String())
	}
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	signer, err := aptrepo.StoredSigner(context.Background(), st, secrets.NewVault(loadKey(t, coordtest.KeyFile(t)), st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := aptCmd([]string{"key", "--database", db.URL}, &stdout, &stderr); code != 0 {
		t.Fatalf("apt key: exit %d\n%s", code, stderr.String())
	}
	if got := stdout.String(); got != signer.Fingerprint()+"\n" {
		t.Errorf("apt key printed %q, want the fingerprint %s alone", got, signer.Fingerprint())
	}
	if !strings.Contains(stderr.String(), "sudo FINGERPRINT="+signer.Fingerprint()+" sh") {
		t.Errorf("apt key does not say how to pin the key:\n%s", stderr.String())
	}

	raw, err := aptrepo.GenerateKey("operator's key")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "key.gpg")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	own, err := aptrepo.NewSigner(raw)
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := aptCmd([]string{"key", "--apt-signing-key-file", file}, &stdout, &stderr); code != 0 || stdout.String() != own.Fingerprint()+"\n" {
		t.Errorf("apt key --apt-signing-key-file: exit %d, printed %q, want %s", code, stdout.String(), own.Fingerprint())
	}
	for _, args := range [][]string{{}, {"nope"}, {"key", "--database", ""}} {
		if code := aptCmd(args, &stdout, &stderr); code != 2 {
			t.Errorf("apt %v: exit %d, want 2 (usage)", args, code)
		}
	}
}

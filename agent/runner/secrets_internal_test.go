package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteSecrets: what the agent encodes is written file by file, mode
// 0400, byte for byte.
func TestWriteSecrets(t *testing.T) {
	dir := t.TempDir()
	in := EncodeSecrets([]SecretFile{{File: "a.pem", Value: []byte("one\x00two\n")}, {File: "b", Value: []byte("x")}})
	if err := writeSecrets(bytes.NewReader(in), dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.pem": "one\x00two\n", "b": "x"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v", name, got, err)
		}
		fi, _ := os.Stat(filepath.Join(dir, name))
		if fi.Mode().Perm() != 0o400 {
			t.Fatalf("%s has mode %v", name, fi.Mode())
		}
	}
}

// TestWriteSecretsRefusesWhatIsNotWhole: input cut short (the agent's write
// failed) and names that are not a file name are refused, and nothing is
// written outside the directory.
func TestWriteSecretsRefusesWhatIsNotWhole(t *testing.T) {
	dir := t.TempDir()
	in := EncodeSecrets([]SecretFile{{File: "a", Value: []byte("value")}})
	if err := writeSecrets(bytes.NewReader(in[:len(in)-3]), dir); err == nil || !strings.Contains(err.Error(), "did not arrive whole") {
		t.Fatalf("cut short: %v", err)
	}
	for _, name := range []string{"../escape", "", "..", "a/b"} {
		in := EncodeSecrets([]SecretFile{{File: name, Value: []byte("value")}})
		if err := writeSecrets(bytes.NewReader(in), dir); err == nil {
			t.Fatalf("name %q was accepted", name)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("a secret was written outside the directory")
	}
}

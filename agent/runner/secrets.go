package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// SecretsDir is where a task's file secrets are, in its container: a tmpfs
// the engine mounts, so they are never on the node's disk and go with the
// container.
const SecretsDir = "/run/secrets"

// maxSecretsInput bounds what the runner reads of its secrets from stdin.
const maxSecretsInput = 16 << 20

// SecretFile is one file secret as the agent hands it to the runner.
type SecretFile struct {
	File  string `json:"file"`
	Value []byte `json:"value"`
}

// EncodeSecrets is what the agent writes to a task container's stdin for
// --secrets-stdin.
func EncodeSecrets(files []SecretFile) []byte {
	b, _ := json.Marshal(files) // strings and bytes always encode
	return b
}

// writeSecrets reads the file secrets from r (the container's stdin, which
// the agent writes once and closes: neither the container's configuration
// nor the node's disk ever holds them) and writes each into dir, mode 0400,
// owned by the runner's user, which is the task's.
func writeSecrets(r io.Reader, dir string) error {
	b, err := io.ReadAll(io.LimitReader(r, maxSecretsInput+1))
	if err != nil {
		return fmt.Errorf("read the task's file secrets from stdin: %w", err)
	}
	if len(b) > maxSecretsInput {
		return fmt.Errorf("the task's file secrets are more than %d bytes", maxSecretsInput)
	}
	var files []SecretFile
	if err := json.Unmarshal(b, &files); err != nil {
		return fmt.Errorf("the task's file secrets did not arrive whole (%d bytes read): %w", len(b), err)
	}
	for _, f := range files {
		if f.File == "" || f.File == "." || f.File == ".." || strings.ContainsAny(f.File, "/\x00") {
			return fmt.Errorf("a file secret's name %q is not a file name", f.File)
		}
		path := filepath.Join(dir, f.File)
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
		if err != nil {
			return fmt.Errorf("create the file secret %s: %w", path, err)
		}
		_, werr := fh.Write(f.Value)
		cerr := fh.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return fmt.Errorf("write the file secret %s: %w", path, err)
		}
		// The umask may have taken bits; 0400 is what is promised.
		if err := os.Chmod(path, 0o400); err != nil {
			return fmt.Errorf("chmod the file secret %s: %w", path, err)
		}
	}
	return nil
}

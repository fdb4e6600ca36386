package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// maxSecretBytes is the coordinator's bound on a secret's value
// (coordinator/secrets.MaxValueBytes), checked here so that stdin or a file
// is never read past it.
const maxSecretBytes = 64 << 10

var secretSetCommand = &command{
	name:     "secret set",
	synopsis: "NAME [--from-file FILE]",
	summary:  "Store a secret for tasks to use (admin).",
	detail: `
Reads the value from stdin, or from FILE with --from-file, and never from the
command line, where it would show in ps and in shell history:

  podium secret set db-password < pw.txt
  printf %s "$TOKEN" | podium secret set api-token
  podium secret set deploy-key --from-file deploy.pem

One final newline read from stdin is dropped (so that "echo pw |" stores
"pw"); a file is stored byte for byte. NAME is DNS-style: lower-case
letters, digits and '-', at most 63 bytes. The value is at most 64 KiB.
Setting an existing NAME replaces its value. The coordinator stores the value
encrypted and never shows it again; tasks name it with --secret NAME or a
spec's secrets.`,
	usageExit: exitUsage,
	run:       runSecretSet,
}

func runSecretSet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fromFile := fs.String("from-file", "", "read the value from `FILE` instead of stdin")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	switch {
	case len(rest) == 0:
		return c.usageFailure(cmd, fs, errors.New("want the secret's NAME"))
	case len(rest) > 1:
		return c.usageFailure(cmd, fs, errors.New("a secret's value is never taken from the command line (it would show in ps and shell history): pipe it on stdin or use --from-file"))
	}
	name := rest[0]
	if p := taskspec.SecretNameProblem(name); p != "" {
		return c.usageFailure(cmd, fs, errors.New(p))
	}
	var value []byte
	var err error
	if *fromFile != "" {
		value, err = readSecretFile(*fromFile)
	} else {
		value, err = readBounded(c.stdin, "stdin")
		value = trimNewline(value)
	}
	if err != nil {
		return c.usageFailure(cmd, fs, err)
	}
	if len(value) == 0 {
		return c.usageFailure(cmd, fs, errors.New("the value is empty: pipe it on stdin or use --from-file"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetSecretResponse], error) {
		return e.admin.SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: name, Value: value}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	what := "replaced"
	if resp.Msg.GetCreated() {
		what = "created"
	}
	fmt.Fprintf(c.stderr, "→ secret %s %s (%d bytes)\n", name, what, len(value))
	return exitOK
}

func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--from-file: %w", err)
	}
	defer f.Close()
	return readBounded(f, path)
}

// readBounded reads all of r, refusing more than maxSecretBytes without
// reading further.
func readBounded(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSecretBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if len(b) > maxSecretBytes {
		return nil, fmt.Errorf("%s holds more than %d bytes, the most a secret may be: keep large files in an image or artifact, and their key here", what, maxSecretBytes)
	}
	return b, nil
}

func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

var secretLsCommand = &command{
	name:     "secret ls",
	synopsis: "[--json]",
	summary:  "List stored secrets: names, who set them, when; never values (admin).",
	detail: `
Values cannot be read back through the API at all; tasks receive them.`,
	usageExit: exitUsage,
	run:       runSecretLs,
}

func runSecretLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.Secret, error) {
		resp, err := e.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetSecrets(), nil
	}, []string{"NAME", "VERSION", "SET BY", "SET AT"}, func(s *podiumv1.Secret) []string {
		return []string{s.GetName(), strconv.FormatInt(s.GetVersion(), 10), s.GetSetBy(), s.GetSetAt().AsTime().Local().Format(time.RFC3339)}
	})
}

var secretRmCommand = &command{
	name:     "secret rm",
	synopsis: "NAME",
	summary:  "Delete a stored secret (admin).",
	detail: `
Tasks already on a node keep the value they were given; a task submitted
afterwards that names the secret is refused, and a queued one fails when it
would be assigned.`,
	usageExit: exitUsage,
	run:       runSecretRm,
}

func runSecretRm(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want exactly one secret NAME"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	if _, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.DeleteSecretResponse], error) {
		return e.admin.DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: rest[0]}))
	}); err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ secret %s deleted\n", rest[0])
	return exitOK
}

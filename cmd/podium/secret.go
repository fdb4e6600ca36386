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
	"strings"
	"text/tabwriter"
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
	synopsis: "NAME [--from-file FILE] [--allow PRINCIPAL]...",
	summary:  "Store a secret for tasks to use (admin).",
	detail: `
Reads the value from stdin, or from FILE with --from-file, and never from the
command line, where it would show in ps and in shell history:

  podium secret set db-password < pw.txt
  printf %s "$TOKEN" | podium secret set api-token --allow alice --allow group:ml
  podium secret set deploy-key --from-file deploy.pem

One final newline read from stdin is dropped (so that "echo pw |" stores
"pw"); a file is stored byte for byte. NAME is DNS-style: lower-case
letters, digits and '-', at most 63 bytes. The value is at most 64 KiB.
Setting an existing NAME replaces its value. The coordinator stores the value
encrypted and never shows it again; tasks name it with --secret NAME or a
spec's secrets.

Only admins may use a secret until it is granted: --allow grants it (added
to the grants it has) in the same call, as ` + "`podium secret grant`" + ` does.

` + principalHelp,
	usageExit: exitUsage,
	run:       runSecretSet,
}

func runSecretSet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fromFile := fs.String("from-file", "", "read the value from `FILE` instead of stdin")
	var allow stringList
	fs.Var(&allow, "allow", "let `PRINCIPAL` use the secret: a user, group:NAME or role:member (repeatable)")
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
		return e.admin.SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: name, Value: value, Allow: allow}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	what := "replaced"
	if resp.Msg.GetCreated() {
		what = "created"
	}
	fmt.Fprintf(c.stderr, "→ secret %s %s (%d bytes)\n", name, what, len(value))
	if len(allow) > 0 {
		fmt.Fprintf(c.stderr, "→ granted to %s\n", strings.Join(allow, ", "))
	}
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

// principalHelp says what a secret is granted to.
const principalHelp = `A PRINCIPAL is a user's name (alice, or a tailnet login
alice@example.com), group:NAME (the users in that group, see
` + "`podium user set-groups`" + `) or role:member (every member). Admins use
every secret; viewers none.`

var secretLsCommand = &command{
	name:     "secret ls",
	synopsis: "[--json]",
	summary:  "List the secrets you may use: names, who set them, when; never values.",
	detail: `
An admin sees every secret, with ALLOW: whom it is granted to besides admins
("admins only" when nobody). A member sees only the secrets they may use,
without their grants. Values cannot be read back through the API at all;
tasks receive them.`,
	usageExit: exitUsage,
	run:       runSecretLs,
}

func runSecretLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListSecretsResponse], error) {
		return e.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	items := resp.Msg.GetSecrets()
	if *asJSON {
		return writeJSONList(c, items)
	}
	// Whom a secret is granted to is shown to admins only: ask who is
	// calling rather than guess from the answer.
	who, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WhoAmIResponse], error) {
		return e.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	admin := who.Msg.GetRole() == "admin"
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	header := "NAME\tVERSION\tSET BY\tSET AT"
	if admin {
		header += "\tALLOW"
	}
	fmt.Fprintln(tw, header)
	for _, s := range items {
		row := []string{s.GetName(), strconv.FormatInt(s.GetVersion(), 10), s.GetSetBy(), s.GetSetAt().AsTime().Local().Format(time.RFC3339)}
		if admin {
			allow := strings.Join(s.GetAllow(), ",")
			if allow == "" {
				allow = "admins only"
			}
			row = append(row, allow)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	if len(items) == 0 && !admin {
		fmt.Fprintln(c.stderr, "→ no secret is granted to you; an admin grants one with `podium secret grant NAME "+who.Msg.GetLogin()+"`")
	}
	return exitOK
}

var secretGrantCommand = &command{
	name:     "secret grant",
	synopsis: "NAME PRINCIPAL...",
	summary:  "Let people, a group or every member use a secret (admin).",
	detail: `
Only admins use a secret nobody was granted. A grant lets others use it:

  podium secret grant prod-deploy-key alice
  podium secret grant prod-deploy-key group:ml
  podium secret grant ci-token role:member

` + principalHelp + `

A grant applies from the next submit on, and to tasks already queued when
they are assigned. Granting one that has it changes nothing. Every grant is
in the audit log.`,
	usageExit: exitUsage,
	run: func(ctx context.Context, c *cli, cmd *command, args []string) int {
		return runSecretGrant(ctx, c, cmd, args, true)
	},
}

var secretRevokeCommand = &command{
	name:     "secret revoke",
	synopsis: "NAME PRINCIPAL...",
	summary:  "Stop people, a group or every member using a secret (admin).",
	detail: `
Takes principals off a secret's grants:

  podium secret revoke prod-deploy-key alice

Each PRINCIPAL must be one the secret is granted to (see ` + "`podium secret ls`" + `);
otherwise nothing is revoked. A queued task whose owner may no longer use
the secret fails when it would be assigned, and never receives the value;
a task already on a node keeps what it was given. Every revoke is in the
audit log.`,
	usageExit: exitUsage,
	run: func(ctx context.Context, c *cli, cmd *command, args []string) int {
		return runSecretGrant(ctx, c, cmd, args, false)
	},
}

func runSecretGrant(ctx context.Context, c *cli, cmd *command, args []string, grant bool) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) < 2 {
		return c.usageFailure(cmd, fs, errors.New("want the secret's NAME and at least one PRINCIPAL (a user, group:NAME or role:member)"))
	}
	name, principals := rest[0], rest[1:]
	if p := taskspec.SecretNameProblem(name); p != "" {
		return c.usageFailure(cmd, fs, errors.New(p))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	var s *podiumv1.Secret
	var err error
	if grant {
		var resp *connect.Response[podiumv1.GrantSecretResponse]
		resp, err = unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GrantSecretResponse], error) {
			return e.admin.GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: name, Principals: principals}))
		})
		if err == nil {
			s = resp.Msg.GetSecret()
		}
	} else {
		var resp *connect.Response[podiumv1.RevokeSecretResponse]
		resp, err = unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RevokeSecretResponse], error) {
			return e.admin.RevokeSecret(ctx, connect.NewRequest(&podiumv1.RevokeSecretRequest{Name: name, Principals: principals}))
		})
		if err == nil {
			s = resp.Msg.GetSecret()
		}
	}
	if err != nil {
		return c.failed(cl, err, "")
	}
	who := "admins only"
	if len(s.GetAllow()) > 0 {
		who = "admins and " + strings.Join(s.GetAllow(), ", ")
	}
	fmt.Fprintf(c.stderr, "→ secret %s may be used by %s\n", name, who)
	return exitOK
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

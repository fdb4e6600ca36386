package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// maxRegistryPasswordBytes is the coordinator's bound on a registry password
// (coordinator/secrets.MaxRegistryPasswordBytes), checked here so that stdin
// is never read past it.
const maxRegistryPasswordBytes = 4 << 10

var registryLoginCommand = &command{
	name:     "registry login",
	synopsis: "HOST --username USER --password-stdin",
	summary:  "Store a login for a private image registry (admin).",
	detail: `
Reads the password (or access token) from stdin, never from the command line,
where it would show in ps and in shell history:

  printf %s "$TOKEN" | podium registry login ghcr.io --username me --password-stdin

HOST is the registry as image references name it: host[:port], e.g.
registry.example.com, localhost:5000, or docker.io for Docker Hub. One final
newline read from stdin is dropped. The password is at most 4 KiB. Logging in
to a HOST again replaces its login. The coordinator stores the password
encrypted, like a secret, and never shows it again; a node receives it only in
the assignment of a task whose image, or a sidecar's image, is on HOST.`,
	usageExit: exitUsage,
	run:       runRegistryLogin,
}

func runRegistryLogin(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	user := fs.String("username", "", "the registry `USER` name")
	fromStdin := fs.Bool("password-stdin", false, "read the password from stdin (the only way to give it)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	switch {
	case len(rest) == 0:
		return c.usageFailure(cmd, fs, errors.New("want the registry HOST"))
	case len(rest) > 1:
		return c.usageFailure(cmd, fs, errors.New("a password is never taken from the command line (it would show in ps and shell history): pipe it on stdin with --password-stdin"))
	case *user == "":
		return c.usageFailure(cmd, fs, errors.New("want --username USER"))
	case !*fromStdin:
		return c.usageFailure(cmd, fs, errors.New("want --password-stdin, with the password piped on stdin"))
	}
	host := rest[0]
	b, err := io.ReadAll(io.LimitReader(c.stdin, maxRegistryPasswordBytes+1))
	if err != nil {
		return c.usageFailure(cmd, fs, fmt.Errorf("reading stdin: %w", err))
	}
	if len(b) > maxRegistryPasswordBytes {
		return c.usageFailure(cmd, fs, fmt.Errorf("stdin holds more than %d bytes, the most a registry password may be", maxRegistryPasswordBytes))
	}
	pw := trimNewline(b)
	if len(pw) == 0 {
		return c.usageFailure(cmd, fs, errors.New("the password is empty: pipe it on stdin"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RegistryLoginResponse], error) {
		return e.admin.RegistryLogin(ctx, connect.NewRequest(&podiumv1.RegistryLoginRequest{Host: host, Username: *user, Password: pw}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	what := "replaced"
	if resp.Msg.GetCreated() {
		what = "stored"
	}
	fmt.Fprintf(c.stderr, "→ login for %s as %s %s\n", host, *user, what)
	return exitOK
}

var registryLsCommand = &command{
	name:     "registry ls",
	synopsis: "[--json]",
	summary:  "List registry logins: hosts, user names, who set them, when; never passwords (admin).",
	detail: `
Passwords cannot be read back through the API at all; nodes receive them for
the pulls that need them.`,
	usageExit: exitUsage,
	run:       runRegistryLs,
}

func runRegistryLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.Registry, error) {
		resp, err := e.admin.ListRegistries(ctx, connect.NewRequest(&podiumv1.ListRegistriesRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetRegistries(), nil
	}, []string{"HOST", "USERNAME", "SET BY", "SET AT"}, func(r *podiumv1.Registry) []string {
		return []string{r.GetHost(), r.GetUsername(), r.GetSetBy(), r.GetSetAt().AsTime().Local().Format(time.RFC3339)}
	})
}

var registryRmCommand = &command{
	name:     "registry rm",
	synopsis: "HOST",
	summary:  "Forget the login for a registry (admin).",
	detail: `
Tasks already on a node keep the login they were given; later tasks pull from
HOST without one.`,
	usageExit: exitUsage,
	run:       runRegistryRm,
}

func runRegistryRm(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want exactly one registry HOST"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	if _, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RemoveRegistryResponse], error) {
		return e.admin.RemoveRegistry(ctx, connect.NewRequest(&podiumv1.RemoveRegistryRequest{Host: rest[0]}))
	}); err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ login for %s removed\n", rest[0])
	return exitOK
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"gopkg.in/yaml.v3"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fileConfig is ~/.config/podium/config.yaml: where "podium login" keeps the
// coordinator's URL and the person's token, so that they need not be in the
// environment of every shell. Flags and environment variables win over it.
type fileConfig struct {
	Server string `yaml:"server,omitempty"`
	Token  string `yaml:"token,omitempty"`
	CAFile string `yaml:"ca_file,omitempty"`
}

// configPath is $XDG_CONFIG_HOME/podium/config.yaml, or
// $HOME/.config/podium/config.yaml; "" when neither is set.
func (c *cli) configPath() string {
	if d := c.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "podium", "config.yaml")
	}
	if h := c.getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "podium", "config.yaml")
	}
	return ""
}

// loadConfig reads the config file; a missing one is empty.
func (c *cli) loadConfig() (fileConfig, error) {
	var fc fileConfig
	path := c.configPath()
	if path == "" {
		return fc, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fc, nil
	}
	if err != nil {
		return fc, fmt.Errorf("read %s: %w", path, err)
	}
	if err := yaml.Unmarshal(b, &fc); err != nil {
		return fc, fmt.Errorf("%s is not valid: %w (fix it, or run podium login again)", path, err)
	}
	return fc, nil
}

var loginCommand = &command{
	name:     "login",
	synopsis: "[--server URL] [--ca-file FILE]",
	summary:  "Store the coordinator's URL and your token in ~/.config/podium/config.yaml.",
	detail: `
Reads your token (from "podium user add", or the coordinator's bootstrap
token) from stdin — it is never taken from the command line, where the
process list would show it — checks it with the coordinator, and writes the
server, the token and --ca-file to $XDG_CONFIG_HOME/podium/config.yaml
(~/.config/podium/config.yaml), readable by you only (0600). Every command
then uses them; --server, --token, --ca-file and PODIUM_SERVER, PODIUM_TOKEN,
PODIUM_CA_FILE still win. On a tailnet, give an empty line: no token is
needed.`,
	usageExit: exitUsage,
	run:       runLogin,
}

func runLogin(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q: the token is read from stdin", rest[0]))
	}
	path := c.configPath()
	if path == "" {
		fmt.Fprintln(c.stderr, "podium: neither HOME nor XDG_CONFIG_HOME is set: there is nowhere to store the login")
		return exitPodium
	}
	fmt.Fprintf(c.stderr, "Token for %s (from podium user add; empty on a tailnet): ", c.server)
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && line == "" && !errors.Is(err, io.EOF) {
		fmt.Fprintf(c.stderr, "\npodium: read the token: %v\n", err)
		return exitPodium
	}
	fmt.Fprintln(c.stderr)
	c.token = strings.TrimSpace(line)
	c.file = fileConfig{} // the token just given, even an empty one, not a stored one
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WhoAmIResponse], error) {
		return e.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fc := fileConfig{Server: c.server, Token: c.token, CAFile: c.caFile}
	if err := writeConfig(path, fc); err != nil {
		fmt.Fprintf(c.stderr, "podium: %v\n", err)
		return exitPodium
	}
	who := resp.Msg.GetLogin()
	if who == "" {
		who = callerKindName(resp.Msg.GetKind())
	}
	role := resp.Msg.GetRole()
	if role == "" {
		role = "no role yet"
	}
	fmt.Fprintf(c.stderr, "→ logged in to %s as %s (%s); saved in %s\n", c.server, who, role, path)
	return exitOK
}

// writeConfig replaces the file whole, created 0600 in a 0700 directory
// before anything is written to it, so that the token is never readable by
// anyone else, not even for a moment.
func writeConfig(path string, fc fileConfig) error {
	b, err := yaml.Marshal(fc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

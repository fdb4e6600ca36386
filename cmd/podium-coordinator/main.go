// Command podium-coordinator is Podium's control plane: a thin server whose
// every piece of state is in Postgres, so any number of replicas can run side
// by side.
//
//	podium-coordinator serve    serve the API and node streams
//	podium-coordinator migrate  apply the schema and exit
//
// Every flag has an environment variable, so a container is configured with
// environment alone.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/internal/flagsdoc"
	"github.com/podiumhq/podium/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: podium-coordinator <command> [flags]

commands:
  serve     serve the Podium API and node streams
  migrate   apply the database schema and exit
  secrets rotate --new-key-file F   reseal every stored secret under a new key
  apt key   print the apt signing key's fingerprint, for install.sh's FINGERPRINT
  healthcheck  exit 0 if a coordinator's /readyz answers 200 (for container HEALTHCHECKs)
  version   print the version

Run 'podium-coordinator <command> -h' for a command's flags.
`)
}

// secret is a string flag whose value is never printed, so that -h does not
// show a secret taken from the environment as the flag's default.
type secret struct{ p *string }

func (s secret) String() string { return "" }

func (s secret) Set(v string) error {
	*s.p = v
	return nil
}

// hostsFlag is a repeatable flag of host names.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, ",") }

func (h *hostsFlag) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// sizeFlag is a byte count written as a number with an optional binary unit:
// 1073741824, 1GiB, 512MiB, 64KiB (K, M, G, T alone mean the same units).
type sizeFlag struct{ n int64 }

func (f *sizeFlag) String() string {
	if f == nil {
		return ""
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if f.n > 0 && f.n%(1<<u.shift) == 0 {
			return strconv.FormatInt(f.n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(f.n, 10)
}

func (f *sizeFlag) Set(v string) error {
	num := strings.TrimRight(v, "KMGTiB")
	unit := v[len(num):]
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30, "T": 40, "TiB": 40}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<62)>>shift {
		return fmt.Errorf("%q: want a positive size such as 1GiB, 200MiB or 1048576", v)
	}
	f.n = n << shift
	return nil
}

func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "migrate":
		return migrate(args[1:], stderr)
	case "secrets":
		return secretsCmd(args[1:], stderr)
	case "apt":
		return aptCmd(args[1:], os.Stdout, stderr)
	case "healthcheck":
		return healthcheck(args[1:], stderr)
	case "version", "--version":
		fmt.Println(version.Version)
		return 0
	case "help", "-h", "--help":
		// help COMMAND is COMMAND --help, as in the other two binaries.
		if len(args) > 1 && args[1] != "help" && !strings.HasPrefix(args[1], "-") {
			return run(append(args[1:2:2], "--help"), stderr)
		}
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(stderr, "podium-coordinator: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// parseFlags parses a subcommand's flags. --help lists them on stdout, in
// the layout all three binaries share (package flagsdoc), and exits 0; a bad
// flag says what was wrong and where the flags are listed, and exits 2. It
// returns -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string, synopsis string, stderr io.Writer) int {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stdout, "Usage: podium-coordinator %s %s\n\nFlags (each one's environment variable in its description):\n", fs.Name(), synopsis)
		flagsdoc.Print(os.Stdout, fs, nil)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "podium-coordinator %s: %v\nRun 'podium-coordinator help %s' for its flags.\n", fs.Name(), err, fs.Name())
		return 2
	}
	return -1
}

func migrate(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := env("PODIUM_DATABASE_URL", "")
	fs.Var(secret{&db}, "database", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps)")
	if code := parseFlags(fs, args, "[--database URL]", stderr); code >= 0 {
		return code
	}
	if db == "" {
		fmt.Fprintln(stderr, "podium-coordinator migrate: set PODIUM_DATABASE_URL (or --database) to a Postgres URL")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Migrate(ctx, db, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator migrate:", err)
		return 1
	}
	fmt.Fprintln(stderr, "schema is up to date")
	return 0
}

// healthcheck is what a container's HEALTHCHECK runs: the image is FROM
// scratch, so there is no curl to do it. It asks /readyz on this machine,
// at the port PODIUM_LISTEN names and over HTTPS when PODIUM_TLS_CERT is set,
// unless --url says otherwise.
func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scheme, port := "http", "7070"
	if os.Getenv("PODIUM_TLS_CERT") != "" {
		scheme = "https"
	}
	if l := os.Getenv("PODIUM_LISTEN"); l != "" {
		if _, p, err := net.SplitHostPort(l); err == nil && p != "" {
			port = p
		}
	}
	url := fs.String("url", scheme+"://127.0.0.1:"+port+"/readyz", "readiness URL to ask")
	timeout := fs.Duration("timeout", 4*time.Second, "give up after this long")
	if code := parseFlags(fs, args, "[--url URL] [--timeout DURATION]", stderr); code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator healthcheck:", err)
		return 2
	}
	client := http.DefaultClient
	if ip := net.ParseIP(req.URL.Hostname()); req.URL.Scheme == "https" && ip != nil && ip.IsLoopback() {
		// The certificate names the coordinator's public host, not
		// 127.0.0.1, and this probe sends nothing secret and reads one
		// word from the process beside it: it does not verify.
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	res, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator healthcheck: not healthy:", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "podium-coordinator healthcheck: not healthy: %s: %s\n", res.Status, strings.TrimSpace(string(body)))
		return 1
	}
	return 0
}

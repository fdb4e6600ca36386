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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/podiumhq/podium/coordinator/server"
)

var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: podium-coordinator <command> [flags]

commands:
  serve     serve the Podium API and node streams
  migrate   apply the database schema and exit
  version   print the version

Run 'podium-coordinator <command> -h' for a command's flags.
`)
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envBool(key string) bool {
	b, _ := strconv.ParseBool(os.Getenv(key))
	return b
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
	case "version", "--version":
		fmt.Println(version)
		return 0
	case "help", "-h", "--help":
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(stderr, "podium-coordinator: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("database", env("PODIUM_DATABASE_URL", ""), "Postgres URL (PODIUM_DATABASE_URL); a direct connection, not through PgBouncer in transaction mode")
	listen := fs.String("listen", env("PODIUM_LISTEN", "127.0.0.1:7070"), "address to serve on (PODIUM_LISTEN)")
	allow := fs.Bool("allow-non-loopback", envBool("PODIUM_ALLOW_NON_LOOPBACK"), "allow a non-loopback --listen, e.g. in a container (PODIUM_ALLOW_NON_LOOPBACK)")
	token := fs.String("token", env("PODIUM_TOKEN", ""), "bearer token API callers must present (PODIUM_TOKEN)")
	advertise := fs.String("advertise", env("PODIUM_ADVERTISE", ""), "URL nodes reach this replica at (PODIUM_ADVERTISE); default http://<listen>")
	replica := fs.String("replica-id", env("PODIUM_REPLICA_ID", ""), "name of this replica (PODIUM_REPLICA_ID); a fresh id by default")
	logFormat := fs.String("log-format", env("PODIUM_LOG_FORMAT", "text"), "text or json (PODIUM_LOG_FORMAT)")
	hb := fs.Duration("heartbeat-interval", 10*time.Second, "how often nodes heartbeat")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := newLogger(*logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := server.Config{
		DatabaseURL: *db, Listen: *listen, AllowNonLoopback: *allow, Token: *token,
		Advertise: *advertise, ReplicaID: *replica, Logger: log,
	}
	cfg.Nodes.HeartbeatInterval = *hb
	srv, err := server.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 1
	}
	if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 1
	}
	return 0
}

func migrate(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("database", env("PODIUM_DATABASE_URL", ""), "Postgres URL (PODIUM_DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *db == "" {
		fmt.Fprintln(stderr, "podium-coordinator migrate: set PODIUM_DATABASE_URL (or --database) to a Postgres URL")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Migrate(ctx, *db, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator migrate:", err)
		return 1
	}
	fmt.Fprintln(stderr, "schema is up to date")
	return 0
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/store"
)

// secretsCmd is `podium-coordinator secrets rotate`: reseal every stored
// secret under a new key in one transaction. It is run with every replica
// stopped (a replica still on the old key could not open the resealed
// secrets), and the replicas are then started with the new key.
func secretsCmd(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(stderr, "usage: podium-coordinator secrets rotate --new-key-file FILE [--key-file OLD] [--database URL]")
		return 2
	}
	fs := flag.NewFlagSet("secrets rotate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := env("PODIUM_DATABASE_URL", "")
	fs.Var(secret{&db}, "database", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps)")
	oldFile := fs.String("key-file", env("PODIUM_SECRETS_KEY_FILE", ""), "the key the secrets are sealed under now (PODIUM_SECRETS_KEY_FILE)")
	newFile := fs.String("new-key-file", "", "the key to reseal them under: 32 random bytes, mode 0600 (`head -c 32 /dev/urandom > new.key`)")
	if code := parseFlags(fs, args[1:], "--new-key-file FILE [--key-file OLD] [--database URL]", stderr); code >= 0 {
		return code
	}
	switch {
	case db == "":
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate: set PODIUM_DATABASE_URL (or --database) to a Postgres URL")
		return 2
	case *oldFile == "" || *newFile == "":
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate: give the current key (--key-file or PODIUM_SECRETS_KEY_FILE) and the new one (--new-key-file)")
		return 2
	}
	oldKey, err := secrets.LoadKeyFile(*oldFile)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate: current key:", err)
		return 2
	}
	newKey, err := secrets.LoadKeyFile(*newFile)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate: new key:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Migrate(ctx, db, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate:", err)
		return 1
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate:", err)
		return 1
	}
	defer st.Close()
	n, err := secrets.Rotate(ctx, st, oldKey, newKey)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator secrets rotate: nothing was changed:", err)
		return 1
	}
	fmt.Fprintf(stderr, "resealed %d secret(s) and registry password(s) under key id %s: start every replica with PODIUM_SECRETS_KEY_FILE=%s\n", n, newKey.ID(), *newFile)
	return 0
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/coordinator/store"
)

// aptCmd is `podium-coordinator apt key`: print the fingerprint of the key
// the apt repository is signed with, for install.sh to pin
// (curl … | sudo FINGERPRINT=… sh). It reads what the coordinator signs
// with: the operator's key file when one is set, else the key kept in
// Postgres, whose fingerprint is stored beside it (no secrets key needed to
// read it). The fingerprint alone goes to stdout, so a script can take it;
// how to use it goes to stderr.
func aptCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "key" {
		fmt.Fprintln(stderr, "usage: podium-coordinator apt key [--database URL] [--apt-signing-key-file FILE]")
		return 2
	}
	fs := flag.NewFlagSet("apt key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := env("PODIUM_DATABASE_URL", "")
	fs.Var(secret{&db}, "database", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps)")
	keyFile := fs.String("apt-signing-key-file", env("PODIUM_APT_SIGNING_KEY_FILE", ""), "the operator's signing key, if the coordinator is given one (PODIUM_APT_SIGNING_KEY_FILE)")
	if code := parseFlags(fs, args[1:], "[--database URL] [--apt-signing-key-file FILE]", stderr); code >= 0 {
		return code
	}
	var fp string
	switch {
	case *keyFile != "":
		s, err := aptrepo.LoadKeyFile(*keyFile)
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator apt key:", err)
			return 1
		}
		fp = s.Fingerprint()
	case db == "":
		fmt.Fprintln(stderr, "podium-coordinator apt key: set PODIUM_DATABASE_URL (or --database) to the coordinator's Postgres URL, "+
			"or --apt-signing-key-file to the key it is given")
		return 2
	default:
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		st, err := store.Open(ctx, db)
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator apt key: connect to Postgres:", err)
			return 1
		}
		defer st.Close()
		row, err := st.AptSigningKey(ctx)
		if errors.Is(err, store.ErrNotFound) {
			fmt.Fprintln(stderr, "podium-coordinator apt key: there is no signing key in Postgres yet: the coordinator makes one when it "+
				"first starts with a secrets key (PODIUM_SECRETS_KEY_FILE) and .debs to serve; start it, then ask again")
			return 1
		}
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator apt key: read the signing key's fingerprint from Postgres:", err)
			return 1
		}
		fp = row.Fingerprint
	}
	fmt.Fprintln(stdout, fp)
	fmt.Fprintf(stderr, "\nThe apt repository's signing key has fingerprint %s.\n"+
		"Pin it when installing an agent, so install.sh refuses any other key:\n\n"+
		"  curl -fsSL https://COORDINATOR/install.sh | sudo FINGERPRINT=%s sh\n", fp, fp)
	return 0
}

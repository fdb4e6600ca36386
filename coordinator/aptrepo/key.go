package aptrepo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
)

// ErrNoSigningKey means there is no key to sign the repository with: the
// operator gave none and the coordinator, having no secrets key to seal one
// under, made none. Without it no repository is served; a repository apt
// would have to be told to trust unsigned is not an option.
var ErrNoSigningKey = errors.New("no apt signing key: set PODIUM_APT_SIGNING_KEY_FILE to an armored private key, " +
	"or give the coordinator a secrets key (PODIUM_SECRETS_KEY_FILE) so that it makes one and keeps it in Postgres " +
	"(docs/operations.md, \"The apt repository\")")

// StoredSigner returns the signing key kept in Postgres, sealed by the
// vault under the secrets key, generating and storing it first if there is
// none. Replicas that start together each generate one, but only the first
// stored is kept and every replica signs with that one. Without a secrets
// key (vault nil or keyless) it is ErrNoSigningKey: the private key is never
// stored in the clear, as no secret is (the secrets issue's rule: without a
// key, secrets cannot be set).
func StoredSigner(ctx context.Context, st *store.Store, vault *secrets.Vault, log *slog.Logger) (*Signer, error) {
	if !vault.HasKey() {
		return nil, ErrNoSigningKey
	}
	row, err := st.AptSigningKey(ctx)
	if errors.Is(err, store.ErrNotFound) {
		raw, gerr := GenerateKey("Podium apt repository")
		if gerr != nil {
			return nil, gerr
		}
		s, gerr := NewSigner(raw)
		if gerr != nil {
			return nil, gerr
		}
		sealed, gerr := vault.SealAptKey(raw)
		if gerr != nil {
			return nil, gerr
		}
		sealed.Fingerprint = s.Fingerprint()
		row, err = st.PutAptSigningKeyIfAbsent(ctx, sealed)
		if err == nil && row.Fingerprint == s.Fingerprint() {
			log.Info("apt: generated the repository's signing key and stored it, sealed under the secrets key", "fingerprint", s.Fingerprint())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read the apt signing key from Postgres: %w", err)
	}
	raw, err := vault.OpenAptKey(row)
	if err != nil {
		return nil, fmt.Errorf("the stored apt signing key: %w", err)
	}
	s, err := NewSigner(raw)
	if err != nil {
		return nil, fmt.Errorf("the stored apt signing key: %w", err)
	}
	return s, nil
}

// Config is where the repository's packages and key come from.
type Config struct {
	// Dir holds the .deb files to serve; no repository when it has none.
	Dir string
	// KeyFile is the operator's armored private key; when empty, the key
	// is the one kept in Postgres (StoredSigner).
	KeyFile string
}

// Load builds the repository a coordinator serves, or returns nil and why it
// serves none (no package directory, no packages in it, or no key), which it
// also logs once; Unserved answers /apt/ and /install.sh with it. A key file
// or a package that cannot be read is an error: the operator asked for
// something that does not work.
// vault seals and opens the key kept in Postgres; it may be nil, or have no
// key, when cfg.KeyFile is set or no repository is to be served.
func Load(ctx context.Context, cfg Config, st *store.Store, vault *secrets.Vault, log *slog.Logger) (*Repo, string, error) {
	if cfg.Dir == "" {
		why := "no package directory is set (--apt-dir, PODIUM_APT_DIR)"
		log.Info("apt: no apt repository is served: " + why)
		return nil, why, nil
	}
	// The packages first: a coordinator without them needs no key, and
	// must not make one.
	if n, err := countDebs(cfg.Dir); err != nil || n == 0 {
		log.Info("apt: no .deb files in the package directory: no apt repository is served", "dir", cfg.Dir)
		return nil, "the package directory (--apt-dir, PODIUM_APT_DIR) holds no podium-agent .deb files: put them there " +
			"(the coordinator's image carries its own version's; make deb builds them)", nil
	}
	var signer *Signer
	var err error
	if cfg.KeyFile != "" {
		signer, err = LoadKeyFile(cfg.KeyFile)
	} else {
		signer, err = StoredSigner(ctx, st, vault, log)
	}
	if errors.Is(err, ErrNoSigningKey) {
		log.Warn("apt: no apt repository is served: "+err.Error(), "dir", cfg.Dir)
		return nil, err.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	repo, err := Build(cfg.Dir, signer, time.Time{})
	if err != nil {
		return nil, "", fmt.Errorf("apt repository: %w", err)
	}
	names := make([]string, len(repo.Packages))
	for i, p := range repo.Packages {
		names[i] = p.String()
	}
	log.Info("apt: serving the apt repository at "+Prefix+" and the install script at "+InstallPath,
		"packages", names, "key", signer.Fingerprint())
	return repo, "", nil
}

// Unserved answers the repository's paths on a coordinator that serves
// none, saying why and what to configure, instead of a bare 404 that sends
// an operator to the logs. /install.sh is still a shell script, one that
// prints the reason and fails, for whoever pipes it to sh without curl -f.
// The reasons name settings, never paths or hosts: these paths answer
// without a token.
func Unserved(why string) http.Handler {
	msg := "This Podium coordinator serves no apt repository: " + why + ". " +
		"See docs/operations.md, \"The apt repository\"."
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == InstallPath {
			w.Header().Set("Content-Type", "text/x-shellscript; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "#!/bin/sh\necho %s >&2\nexit 1\n", shellQuote(msg))
			return
		}
		http.Error(w, msg, http.StatusNotFound)
	})
}

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// countDebs counts the .deb files in dir.
func countDebs(dir string) (int, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	return len(m), err
}

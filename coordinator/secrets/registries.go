package secrets

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Bounds on a registry login. A host name is at most 253 bytes (plus a
// port); user names are short; a password or token of more than 4 KiB is not
// a registry password.
const (
	MaxRegistryHostBytes     = 253
	MaxRegistryUsernameBytes = 256
	MaxRegistryPasswordBytes = 4 << 10
)

// registryHost is host[:port] as an image reference names a registry: DNS
// labels (or an IPv4 address) and an optional port.
var registryHost = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?$`)

// CheckRegistryHost says what is wrong with a registry host, or nil.
func CheckRegistryHost(host string) error {
	if host == "" || len(host) > MaxRegistryHostBytes || !registryHost.MatchString(host) {
		return fmt.Errorf("registry host %q is not host[:port] (e.g. registry.example.com or localhost:5000, at most %d bytes): give the host as the image names it, without https:// or a path", clipHost(host), MaxRegistryHostBytes)
	}
	// Image references name Docker Hub docker.io whichever alias they were
	// written with, so a login stored under an alias would never be sent.
	if host == "index.docker.io" || host == "registry-1.docker.io" {
		return fmt.Errorf("registry host %s is Docker Hub, which images name docker.io: log in to docker.io", host)
	}
	return nil
}

func clipHost(h string) string {
	if len(h) > 64 {
		return h[:64] + "…"
	}
	return h
}

// CheckRegistryLogin says what is wrong with a registry login, or nil.
func CheckRegistryLogin(host, username string, password []byte) error {
	if err := CheckRegistryHost(host); err != nil {
		return err
	}
	if username == "" || len(username) > MaxRegistryUsernameBytes {
		return fmt.Errorf("registry %s: the user name must be 1 to %d bytes", host, MaxRegistryUsernameBytes)
	}
	if len(password) == 0 {
		return fmt.Errorf("registry %s: the password is empty: pipe it on stdin with --password-stdin", host)
	}
	if len(password) > MaxRegistryPasswordBytes {
		return fmt.Errorf("registry %s: the password is %d bytes, more than %d", host, len(password), MaxRegistryPasswordBytes)
	}
	return nil
}

// SetRegistry seals password and stores the login for host, replacing any
// login it had. It reports whether the host was new.
func (v *Vault) SetRegistry(ctx context.Context, host, username string, password []byte, setBy string) (bool, error) {
	if err := CheckRegistryLogin(host, username, password); err != nil {
		return false, err
	}
	if v.key == nil {
		return false, ErrNoKey
	}
	s, err := v.key.Seal(store.RegistryAAD(host), password)
	if err != nil {
		return false, err
	}
	return v.store.PutRegistry(ctx, store.RegistryRow{Host: host, Username: username,
		Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID, SetBy: setBy})
}

// ImageHosts lists the registry hosts of a task's image and its sidecars'
// images, sorted and without repeats. An image that is not a reference names
// no host (the node refuses it when it pulls).
func ImageHosts(spec *podiumv1.TaskSpec) []string {
	seen := map[string]bool{}
	add := func(image string) {
		if image == "" {
			return
		}
		if h, err := taskspec.RegistryHost(image); err == nil {
			seen[h] = true
		}
	}
	add(spec.GetImage())
	for _, sc := range spec.GetSidecars() {
		add(sc.GetImage())
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// RegistryAuths opens the stored logins for exactly the registry hosts of
// spec's images, for one assignment. Hosts with no login get none (the image
// may be public). With logins stored for those hosts and no key it fails
// with ErrNoKey.
func (v *Vault) RegistryAuths(ctx context.Context, spec *podiumv1.TaskSpec) ([]*podiumv1.RegistryAuth, error) {
	hosts := ImageHosts(spec)
	rows, err := v.store.SealedRegistries(ctx, hosts)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	if v.key == nil {
		return nil, ErrNoKey
	}
	out := make([]*podiumv1.RegistryAuth, 0, len(rows))
	for _, r := range rows {
		pw, err := v.key.Open(store.RegistryAAD(r.Host), Sealed{Ciphertext: r.Ciphertext, Nonce: r.Nonce, KeyID: r.KeyID})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("registry login for %s cannot be opened: run `podium registry login %s` again", r.Host, r.Host), err)
		}
		out = append(out, &podiumv1.RegistryAuth{Host: r.Host, Username: r.Username, Password: string(pw)})
	}
	return out, nil
}

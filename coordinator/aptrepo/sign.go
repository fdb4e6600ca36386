package aptrepo

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// maxKeyFileBytes bounds an operator's armored key file; a signing key with
// its identities is a few kilobytes.
const maxKeyFileBytes = 1 << 20

// Signer signs the repository's Release file with one OpenPGP key.
type Signer struct {
	entity *openpgp.Entity
	// public is the public key (primary key, identities, subkeys), binary,
	// as apt's Signed-By reads it from /etc/apt/keyrings.
	public []byte
}

// config is what every signature and key of this package is made with: a
// SHA-512 hash (apt's sqv and gpgv refuse SHA-1 signatures) and, for a new
// key, Ed25519 in the v4 form (EdDSA) that Debian 12's gpgv reads.
func config() *packet.Config {
	return &packet.Config{DefaultHash: crypto.SHA512, Algorithm: packet.PubKeyAlgoEdDSA}
}

// GenerateKey makes a new signing key and returns it serialized (private
// parts included, unprotected: the caller seals it).
func GenerateKey(name string) ([]byte, error) {
	e, err := openpgp.NewEntity(name, "apt repository signing key", "", config())
	if err != nil {
		return nil, fmt.Errorf("generate the apt signing key: %w", err)
	}
	var b bytes.Buffer
	if err := e.SerializePrivateWithoutSigning(&b, nil); err != nil {
		return nil, fmt.Errorf("serialize the apt signing key: %w", err)
	}
	return b.Bytes(), nil
}

// NewSigner reads a private key, binary or armored, and checks it can sign.
func NewSigner(key []byte) (*Signer, error) {
	var list openpgp.EntityList
	var err error
	if bytes.HasPrefix(bytes.TrimSpace(key), []byte("-----BEGIN")) {
		list, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(key))
	} else {
		list, err = openpgp.ReadKeyRing(bytes.NewReader(key))
	}
	if err != nil {
		return nil, fmt.Errorf("not an OpenPGP key: %w", err)
	}
	var e *openpgp.Entity
	for _, c := range list {
		if c.PrivateKey != nil {
			e = c
			break
		}
	}
	switch {
	case e == nil:
		return nil, errors.New("it holds no private key: export one with `gpg --armor --export-secret-keys KEYID`")
	case e.PrivateKey.Encrypted:
		return nil, errors.New("the private key is protected by a passphrase, which the coordinator cannot type: " +
			"export it without one (gpg --armor --export-secret-keys after `gpg --passwd KEYID` to an empty passphrase) and keep the file mode 0600")
	}
	k, ok := e.SigningKey(time.Now())
	if !ok {
		return nil, errors.New("it has no key valid for signing now (expired, revoked, or without the signing flag)")
	}
	if k.PrivateKey == nil || k.PrivateKey.Encrypted {
		return nil, errors.New("its signing key's private part is missing or protected by a passphrase")
	}
	var pub bytes.Buffer
	if err := e.Serialize(&pub); err != nil {
		return nil, fmt.Errorf("serialize the public key: %w", err)
	}
	return &Signer{entity: e, public: pub.Bytes()}, nil
}

// LoadKeyFile reads an operator's armored private key from path. Like the
// secrets key, it must not be readable by the file's group or by others.
func LoadKeyFile(path string) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("apt signing key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("apt signing key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("apt signing key file %s has mode %04o, readable by others than its owner: run `chmod 600 %s`", path, perm, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("apt signing key file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("apt signing key file: %w", err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("apt signing key file %s is more than %d bytes: it should hold one armored private key", path, maxKeyFileBytes)
	}
	s, err := NewSigner(b)
	if err != nil {
		return nil, fmt.Errorf("apt signing key file %s: %w", path, err)
	}
	return s, nil
}

// Fingerprint is the key's fingerprint in hex, as gpg prints it.
func (s *Signer) Fingerprint() string { return fmt.Sprintf("%X", s.entity.PrimaryKey.Fingerprint) }

// PublicKey is the public key, binary (what /etc/apt/keyrings holds).
func (s *Signer) PublicKey() []byte { return s.public }

// ArmoredPublicKey is the public key, ASCII-armored.
func (s *Signer) ArmoredPublicKey() ([]byte, error) {
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(s.public); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// clearsign is the InRelease form of release: the text with its signature
// around it (RFC 4880, section 7). It is put together here rather than by
// go-crypto's clearsign package, whose armor has no CRC-24 line: Debian 12's
// gpgv then reads the end marker as more base64 and fails the file even
// though the signature is good.
func (s *Signer) clearsign(release []byte) ([]byte, error) {
	var sig bytes.Buffer
	// A text signature: lines end in CRLF for the hash, as the cleartext
	// framework wants. The line break before the signature's armor is the
	// framework's, not the text's, so the text is signed without its last
	// newline, as Debian's own InRelease files are.
	if err := openpgp.DetachSignText(&sig, s.entity, bytes.NewReader(bytes.TrimSuffix(release, []byte("\n"))), config()); err != nil {
		return nil, err
	}
	p, err := packet.Read(bytes.NewReader(sig.Bytes()))
	if err != nil {
		return nil, err
	}
	ps, ok := p.(*packet.Signature)
	if !ok {
		return nil, errors.New("the signature is not a signature packet")
	}
	name, ok := hashNames[ps.Hash]
	if !ok {
		return nil, fmt.Errorf("the signature's hash %v has no name for the Hash header", ps.Hash)
	}
	var b bytes.Buffer
	b.WriteString("-----BEGIN PGP SIGNED MESSAGE-----\nHash: " + name + "\n\n")
	for _, line := range bytes.SplitAfter(release, []byte("\n")) {
		// Dash-escaping; a Release file has no such line, but a line
		// starting with "-" would otherwise end the text early.
		if bytes.HasPrefix(line, []byte("-")) {
			b.WriteString("- ")
		}
		b.Write(line)
	}
	if !bytes.HasSuffix(release, []byte("\n")) {
		b.WriteString("\n")
	}
	w, err := armor.Encode(&b, "PGP SIGNATURE", nil)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(sig.Bytes()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// hashNames are the Hash header's names of the hashes a signature may use.
var hashNames = map[crypto.Hash]string{crypto.SHA256: "SHA256", crypto.SHA384: "SHA384", crypto.SHA512: "SHA512",
	crypto.SHA224: "SHA224", crypto.SHA3_256: "SHA3-256", crypto.SHA3_512: "SHA3-512"}

// detach is Release.gpg: an armored detached signature of release.
func (s *Signer) detach(release []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, bytes.NewReader(release), config()); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

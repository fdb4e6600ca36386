package benchkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are a throwaway certificate for a benchmark's coordinator
// (--tls-cert, --tls-key) and the client configuration that trusts it. A
// fleet that crosses a network speaks TLS to its coordinator (the local
// transport refuses plain HTTP off loopback), so a fleet measured without it
// leaves out the handshakes and the per-connection buffers that production
// pays for.
type TLSFiles struct {
	CertFile, KeyFile string
	Client            *tls.Config
}

// NewTLSFiles writes a self-signed ECDSA P-256 certificate for 127.0.0.1 and
// localhost into dir, valid for a day: what the simulated nodes trust, and
// nothing else does.
func NewTLSFiles(dir string) (*TLSFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "podium benchmark coordinator"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make the benchmark's TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	t := &TLSFiles{CertFile: filepath.Join(dir, "coordinator.crt"), KeyFile: filepath.Join(dir, "coordinator.key")}
	if err := os.WriteFile(t.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(t.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	t.Client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	return t, nil
}

// Args are the coordinator's flags that serve this certificate.
func (t *TLSFiles) Args() []string { return []string{"--tls-cert", t.CertFile, "--tls-key", t.KeyFile} }

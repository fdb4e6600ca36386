package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certFiles serves the local transport's certificate from its files, and
// reads them again when either changes, so that a renewed certificate (one
// from an ACME client every few weeks, say) is served without a restart. A
// pair that fails to load keeps the last good one in service and is logged.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time // the later of the two files' when cert was loaded
}

func loadCertFiles(certFile, keyFile string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, log: log}
	mod, err := c.modified()
	if err == nil {
		err = c.load(mod)
	}
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w", certFile, keyFile, err)
	}
	return c, nil
}

func (c *certFiles) modified() (time.Time, error) {
	var latest time.Time
	for _, f := range []string{c.certFile, c.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return time.Time{}, err
		}
		if st.ModTime().After(latest) {
			latest = st.ModTime()
		}
	}
	return latest, nil
}

func (c *certFiles) load(mod time.Time) error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.cert, c.modTime = &cert, mod
	return nil
}

// get is tls.Config.GetCertificate. A stat of two files per handshake is
// cheap next to the handshake, and handshakes are few: a node holds one
// connection for hours.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if mod, err := c.modified(); err == nil && !mod.Equal(c.modTime) {
		if err := c.load(mod); err != nil {
			// Half-written during a renewal, most likely: keep serving the
			// old pair, and try again when the files next change (as they
			// will when the writing ends), logging this once.
			c.modTime = mod
			c.log.Warn("TLS certificate changed but does not load; still serving the previous one",
				"cert", c.certFile, "key", c.keyFile, "err", err)
		} else {
			c.log.Info("TLS certificate reloaded", "cert", c.certFile)
		}
	}
	return c.cert, nil
}

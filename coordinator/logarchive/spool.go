package logarchive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"os"
)

// spoolMemory is how much of an archive a spool keeps in memory before it
// moves it to a temporary file: most archives are a few KiB, and a 100 MB log
// of incompressible output must not sit in a replica's memory.
const spoolMemory = 4 << 20

// spool holds a compressed archive on its way to or from the object store,
// hashing and counting it as it is written, so that an archive's size and
// SHA-256 are known before it is stored, and checked before a byte of it is
// decoded when it is read.
type spool struct {
	mem bytes.Buffer
	f   *os.File
	n   int64
	h   hash.Hash
}

func newSpool() *spool { return &spool{h: sha256.New()} }

func (s *spool) Write(p []byte) (int, error) {
	s.h.Write(p)
	s.n += int64(len(p))
	if s.f == nil && s.mem.Len()+len(p) > spoolMemory {
		f, err := os.CreateTemp("", "podium-log-archive-*")
		if err != nil {
			return 0, err
		}
		s.f = f
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			return 0, err
		}
		s.mem = bytes.Buffer{}
	}
	if s.f != nil {
		return s.f.Write(p)
	}
	return s.mem.Write(p)
}

// Size and SHA256 are those of everything written.
func (s *spool) Size() int64    { return s.n }
func (s *spool) SHA256() string { return hex.EncodeToString(s.h.Sum(nil)) }

// Reader reads back everything written, from the start.
func (s *spool) Reader() (io.Reader, error) {
	if s.f == nil {
		return bytes.NewReader(s.mem.Bytes()), nil
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.f, nil
}

// Bytes is everything written, in memory: for an archive kept in Postgres,
// which takes it as one value anyway.
func (s *spool) Bytes() ([]byte, error) {
	if s.f == nil {
		return s.mem.Bytes(), nil
	}
	r, err := s.Reader()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// Close removes the temporary file, if any.
func (s *spool) Close() error {
	if s.f == nil {
		return nil
	}
	name := s.f.Name()
	return errors.Join(s.f.Close(), os.Remove(name))
}

package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	// HeaderSignature is "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
	HeaderSignature = "Podium-Signature"
	// HeaderEventID is the event's id: the same on every retry, so a
	// receiver that keeps the ids it handled handles each event once.
	HeaderEventID   = "Podium-Event-Id"
	HeaderEventType = "Podium-Event-Type"
)

// DefaultTolerance is how old a signature's timestamp Verify accepts by
// default: older ones are replays.
const DefaultTolerance = 5 * time.Minute

// Sign returns the Podium-Signature header of body posted at t under secret.
// The timestamp is inside what is signed, so a receiver that refuses old
// timestamps refuses a captured request replayed later.
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors Verify returns.
var (
	ErrNoSignature  = errors.New("notify: no Podium-Signature header, or one without t= and v1=")
	ErrStale        = errors.New("notify: the signature's timestamp is outside the tolerance (a replay, or a clock far off)")
	ErrBadSignature = errors.New("notify: no v1 signature matches the body under this secret")
)

// Verify checks a delivery as a receiver written in Go would: header is the
// Podium-Signature header, body the request body exactly as received, now
// the receiver's clock. It fails if the timestamp is more than tolerance
// from now (0 means DefaultTolerance) or no v1 signature matches. Several
// v1= values are allowed, any one matching, so a sender may sign with an
// old and a new secret while a receiver changes over.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrNoSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now", ErrStale, time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrBadSignature
}

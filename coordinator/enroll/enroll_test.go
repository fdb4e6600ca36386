package enroll

import (
	"bytes"
	"strings"
	"testing"
)

// A secret is recognisable by its prefix, unguessable (two are never equal)
// and what is stored of it is its SHA-256, which Hash recomputes.
func TestSecrets(t *testing.T) {
	a, ha := NewSecret(KeyPrefix)
	b, hb := NewSecret(KeyPrefix)
	if !strings.HasPrefix(a, KeyPrefix) || len(a) != len(KeyPrefix)+43 {
		t.Fatalf("secret %q, want %s and 32 bytes of base64url", a, KeyPrefix)
	}
	if a == b || bytes.Equal(ha, hb) {
		t.Fatal("two secrets are equal")
	}
	if !bytes.Equal(Hash(a), ha) || len(ha) != 32 {
		t.Fatalf("Hash(secret) = %x, want the hash NewSecret returned (%x)", Hash(a), ha)
	}
	if bytes.Contains(ha, []byte(a)) {
		t.Fatal("the hash contains the secret")
	}
}

func TestValidLabel(t *testing.T) {
	for _, ok := range []string{"gpu", "zone=eu-1", "team/ml", "A.b_c-d", strings.Repeat("x", 128)} {
		if err := validLabel(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, says := range map[string]string{
		"":                       "1 to 128 characters",
		strings.Repeat("x", 129): "1 to 128 characters",
		"has space":              `character ' '`,
		"ünïcode":                `character 'ü'`,
		"semi;colon":             `character ';'`,
	} {
		err := validLabel(bad)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want a refusal saying %q", bad, err, says)
		}
	}
}

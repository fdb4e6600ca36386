package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/podiumhq/podium/coordinator/store"
)

// A set racing a delete of the same secret either replaces it or makes it
// anew; it never fails for want of the row it meant to replace (its grants
// then named a secret that was gone) nor reports success having stored
// nothing.
func TestSetRacingDeleteStoresTheSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openStore(t)
	row := store.SecretRow{Name: "raced", Ciphertext: []byte("sealed"), Nonce: []byte("nonce"), KeyID: "k1", SetBy: "token",
		Allow: []string{"role:member"}}
	if _, err := st.PutSecret(ctx, row); err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			if err := st.DeleteSecret(ctx, "raced"); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Errorf("delete: %v", err)
				return
			}
		}
	}()
	for i := range rounds {
		if _, err := st.PutSecret(ctx, row); err != nil {
			t.Fatalf("set %d, racing deletes: %v", i, err)
		}
	}
	wg.Wait()
	if _, err := st.PutSecret(ctx, row); err != nil {
		t.Fatal(err)
	}
	rows, err := st.ListSecrets(ctx)
	if err != nil || len(rows) != 1 || rows[0].Name != "raced" || len(rows[0].Allow) != 1 {
		t.Fatalf("after the race and one more set: %+v, %v; want the secret with its grant", rows, err)
	}
}

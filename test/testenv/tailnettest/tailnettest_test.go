package tailnettest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/tailnettest"
)

// Devices on the in-process tailnet reach each other over WireGuard, and
// WhoIs tells a tagged device from a person's: the two facts the coordinator's
// identity rests on.
func TestDevicesReachEachOtherAndWhoIsKnowsThem(t *testing.T) {
	tn := tailnettest.New(t)
	server := tn.Join(t, "server", "tag:server")
	person := tn.Join(t, "laptop")
	node := tn.Join(t, "worker", "tag:podium-node")

	ln, err := server.Listen("tcp", ":80")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := server.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := lc.WhoIs(r.Context(), r.RemoteAddr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s tags=%s login=%s", who.Node.Hostinfo.Hostname(), strings.Join(who.Node.Tags, ","), who.UserProfile.LoginName)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func(d *tailnettest.Device) string {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DialContext: d.Dial}}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+server.IP.String()+"/", nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if got := get(person); !strings.HasPrefix(got, "laptop tags= login=user-") || !strings.HasSuffix(got, "@"+tailnettest.LoginDomain) {
		t.Errorf("the person's device is seen as %q, want laptop, untagged, with a login", got)
	}
	if got := get(node); !strings.HasPrefix(got, "worker tags=tag:podium-node") {
		t.Errorf("the tagged device is seen as %q, want worker with tag:podium-node", got)
	}
}

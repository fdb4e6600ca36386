package tailnet

import (
	"errors"
	"strings"
	"testing"

	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
)

func who(tags []string, login string) *apitype.WhoIsResponse {
	return &apitype.WhoIsResponse{
		Node:        &tailcfg.Node{Name: "box.tail1234.ts.net.", StableID: "nSTABLE", Tags: tags},
		UserProfile: &tailcfg.UserProfile{LoginName: login},
	}
}

// The decision rests on tags first: a tagged device's user profile (on
// Tailscale the placeholder "tagged-devices", here a real-looking login) never
// makes it a person.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name    string
		who     *apitype.WhoIsResponse
		kind    Kind
		login   string
		wantErr error
	}{
		{"node", who([]string{"tag:podium-node"}, "tagged-devices"), KindNode, "", nil},
		{"node with another tag too", who([]string{"tag:gpu", "tag:podium-node"}, ""), KindNode, "", nil},
		{"tagged with a login is still not a person", who([]string{"tag:ci"}, "alice@example.com"), "", "", ErrForeignTag},
		{"person", who(nil, "alice@example.com"), KindPerson, "alice@example.com", nil},
		{"untagged without a login", who(nil, ""), "", "", ErrNoLogin},
		{"no node", &apitype.WhoIsResponse{}, "", "", ErrNotPeer},
		{"nothing", nil, "", "", ErrNotPeer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Classify(tc.who, DefaultNodeTag)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if c.Kind != tc.kind || c.Login != tc.login || c.Device != "box.tail1234.ts.net" || c.DeviceID != "nSTABLE" {
				t.Errorf("got %+v, want kind %s, login %q on box.tail1234.ts.net (nSTABLE)", c, tc.kind, tc.login)
			}
		})
	}
	_, err := Classify(who([]string{"tag:ci", "tag:db"}, ""), DefaultNodeTag)
	if err == nil || err.Error() == "" || !strings.Contains(err.Error(), "tag:ci, tag:db") || !strings.Contains(err.Error(), DefaultNodeTag) {
		t.Errorf("a foreign tag's refusal %q should name its tags and the node tag", err)
	}
}

package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/podiumhq/podium/agent/transport"
)

// tsnetOptions are the flags for joining the tailnet with an embedded
// Tailscale device instead of using the host's tailscaled.
type tsnetOptions struct {
	enabled                                 *bool
	authKey, stateDir, controlURL, hostname *string
	tags                                    stringList
}

func tsnetFlags(fs *flag.FlagSet) *tsnetOptions {
	o := &tsnetOptions{}
	o.enabled = fs.Bool("tsnet", false, "reach the coordinator through an embedded Tailscale device instead of this host's tailscaled "+
		"(implied by --tsnet-auth-key)")
	o.authKey = fs.String("tsnet-auth-key", "", "auth key for the embedded device's first start; use one tagged tag:podium-node "+
		"(or set PODIUM_TSNET_AUTHKEY, which keeps it out of the process list)")
	o.stateDir = fs.String("tsnet-state-dir", "", "where the embedded device keeps its keys (default: DATA-DIR/tsnet); "+
		"keep it: the coordinator binds the node to this device")
	o.controlURL = fs.String("tsnet-control-url", "", "coordination server for the embedded device, e.g. Headscale (default: Tailscale's)")
	o.hostname = fs.String("tsnet-hostname", "", "the embedded device's name (default: the node's hostname)")
	fs.Var(&o.tags, "tsnet-tag", "tag the embedded device asks for, repeatable (default: tag:podium-node)")
	return o
}

// authKey is the embedded device's auth key, from the flag or the
// environment.
func (o *tsnetOptions) authKeyValue() string {
	if *o.authKey != "" {
		return *o.authKey
	}
	return os.Getenv("PODIUM_TSNET_AUTHKEY")
}

// embedded reports whether the agent reaches the coordinator through an
// embedded device of its own.
func (o *tsnetOptions) embedded() bool { return *o.enabled || o.authKeyValue() != "" }

// join brings up the embedded device when asked for, and returns ctx carrying
// its dialer, so that every connection the agent makes to the coordinator
// goes through it, and the function that leaves the tailnet. Without
// --tsnet it returns ctx as it is: the host's tailscaled routes.
func (o *tsnetOptions) join(ctx context.Context, dataDir, hostname string, log *slog.Logger) (context.Context, func(), error) {
	key := o.authKeyValue()
	if !o.embedded() {
		return ctx, func() {}, nil
	}
	dir := *o.stateDir
	if dir == "" {
		dir = filepath.Join(dataDir, "tsnet")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ctx, nil, err
	}
	name := *o.hostname
	if name == "" {
		name = hostname
	}
	if name == "" {
		name, _ = os.Hostname()
	}
	tags := []string(o.tags)
	if len(tags) == 0 {
		tags = []string{"tag:podium-node"}
	}
	tn, err := transport.JoinTailnet(ctx, transport.TailnetConfig{
		StateDir: dir, Hostname: name, AuthKey: key, ControlURL: *o.controlURL, Tags: tags, Logger: log})
	if err != nil {
		return ctx, nil, err
	}
	return transport.ContextWithDialer(ctx, tn.Dial), func() { _ = tn.Close() }, nil
}

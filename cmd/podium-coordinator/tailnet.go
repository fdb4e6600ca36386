package main

import (
	"flag"
	"os"

	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tailnet/join"
)

// tailnetOptions are serve's flags for the transports.
type tailnetOptions struct {
	transport, stateDir, hostname, controlURL, nodeTag, defaultRole *string
	allowUntagged                                                   *bool
	authKey                                                         string
}

func tailnetFlags(fs *flag.FlagSet) *tailnetOptions {
	o := &tailnetOptions{}
	o.transport = fs.String("transport", env("PODIUM_TRANSPORT", server.TransportLocal),
		"local (loopback, API token), tailnet (join the tailnet as the coordinator's own device) or host (serve on this machine's tailscaled) (PODIUM_TRANSPORT)")
	o.stateDir = fs.String("ts-state-dir", env("PODIUM_TS_STATE_DIR", ""),
		"tailnet: where the coordinator's Tailscale device keeps its keys; must survive restarts (PODIUM_TS_STATE_DIR)")
	o.hostname = fs.String("ts-hostname", env("PODIUM_TS_HOSTNAME", join.DefaultHostname),
		"tailnet: the coordinator's device name (PODIUM_TS_HOSTNAME)")
	o.controlURL = fs.String("ts-control-url", env("PODIUM_TS_CONTROL_URL", ""),
		"tailnet: coordination server, e.g. a Headscale URL; empty: Tailscale's (PODIUM_TS_CONTROL_URL)")
	o.nodeTag = fs.String("node-tag", env("PODIUM_NODE_TAG", tailnet.DefaultNodeTag),
		"tailnet, host: the ACL tag that makes a device a node (PODIUM_NODE_TAG)")
	o.allowUntagged = fs.Bool("allow-untagged-nodes", envBool("PODIUM_ALLOW_UNTAGGED_NODES"),
		"tailnet, host: let untagged devices (people's) enroll and connect as nodes, with a warning each time (PODIUM_ALLOW_UNTAGGED_NODES)")
	o.defaultRole = fs.String("default-role", env("PODIUM_DEFAULT_ROLE", ""),
		"tailnet, host: the role (viewer, member or admin) of a signed-in person with neither a grant in the tailnet policy "+
			"(app capability "+tailnet.CapName+") nor a user (podium user add LOGIN); empty refuses them (PODIUM_DEFAULT_ROLE)")
	// The auth key is taken from the environment only: a flag would show it
	// in the process list. tsnet's own variable is honoured too.
	o.authKey = env("PODIUM_TS_AUTHKEY", os.Getenv("TS_AUTHKEY"))
	return o
}

func (o *tailnetOptions) config() server.TailnetConfig {
	return server.TailnetConfig{
		StateDir: *o.stateDir, Hostname: *o.hostname, AuthKey: o.authKey, ControlURL: *o.controlURL,
		NodeTag: *o.nodeTag, AllowUntaggedNodes: *o.allowUntagged, DefaultRole: *o.defaultRole,
	}
}

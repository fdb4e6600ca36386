package main

import (
	"os"

	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tailnet/join"
)

// tailnetOptions are serve's flags for the transports.
type tailnetOptions struct {
	transport, stateDir, hostname, controlURL, nodeTag, defaultRole string
	allowUntagged                                                   bool
	authKey                                                         string
}

// flags are the rows of serve's flag table for the transports.
func (o *tailnetOptions) flags() []envFlag {
	return []envFlag{
		stringFlag(&o.transport, "transport", "PODIUM_TRANSPORT", server.TransportLocal,
			"local (loopback, API token), tailnet (join the tailnet as the coordinator's own device) or host (serve on this machine's tailscaled) (PODIUM_TRANSPORT)"),
		stringFlag(&o.stateDir, "ts-state-dir", "PODIUM_TS_STATE_DIR", "",
			"tailnet: where the coordinator's Tailscale device keeps its keys; must survive restarts (PODIUM_TS_STATE_DIR)"),
		stringFlag(&o.hostname, "ts-hostname", "PODIUM_TS_HOSTNAME", join.DefaultHostname,
			"tailnet: the coordinator's device name (PODIUM_TS_HOSTNAME)"),
		stringFlag(&o.controlURL, "ts-control-url", "PODIUM_TS_CONTROL_URL", "",
			"tailnet: coordination server, e.g. a Headscale URL; empty: Tailscale's (PODIUM_TS_CONTROL_URL)"),
		stringFlag(&o.nodeTag, "node-tag", "PODIUM_NODE_TAG", tailnet.DefaultNodeTag,
			"tailnet, host: the ACL tag that makes a device a node (PODIUM_NODE_TAG)"),
		laxBoolFlag(&o.allowUntagged, "allow-untagged-nodes", "PODIUM_ALLOW_UNTAGGED_NODES",
			"tailnet, host: let untagged devices (people's) enroll and connect as nodes, with a warning each time (PODIUM_ALLOW_UNTAGGED_NODES)"),
		stringFlag(&o.defaultRole, "default-role", "PODIUM_DEFAULT_ROLE", "",
			"tailnet, host: the role (viewer, member or admin) of a signed-in person with neither a grant in the tailnet policy "+
				"(app capability "+tailnet.CapName+") nor a user (podium user add LOGIN); empty refuses them (PODIUM_DEFAULT_ROLE)"),
	}
}

// readAuthKey takes the auth key from the environment only: a flag would
// show it in the process list. tsnet's own variable is honoured too.
func (o *tailnetOptions) readAuthKey() {
	o.authKey = env("PODIUM_TS_AUTHKEY", os.Getenv("TS_AUTHKEY"))
}

func (o *tailnetOptions) config() server.TailnetConfig {
	return server.TailnetConfig{
		StateDir: o.stateDir, Hostname: o.hostname, AuthKey: o.authKey, ControlURL: o.controlURL,
		NodeTag: o.nodeTag, AllowUntaggedNodes: o.allowUntagged, DefaultRole: o.defaultRole,
	}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/podiumhq/podium/agent/transport"
)

// securityOptions are the flags for how the agent's connections to the
// coordinator are protected: the CA of a coordinator's private certificate,
// the operator's leave to speak plain HTTP across a network, and which
// interface is the tailnet's.
type securityOptions struct {
	caFile   *string
	insecure *bool
	tailnet  *string
}

func securityFlags(fs *flag.FlagSet) *securityOptions {
	insecure, _ := strconv.ParseBool(os.Getenv("PODIUM_INSECURE_PLAINTEXT"))
	return &securityOptions{
		caFile: fs.String("ca-file", os.Getenv("PODIUM_CA_FILE"),
			"PEM file of the CA that signed an https:// coordinator's certificate, for a private CA (PODIUM_CA_FILE); "+
				"SSL_CERT_FILE instead replaces the system's CAs"),
		insecure: fs.Bool("insecure-plaintext", insecure,
			"allow http:// to a coordinator that is neither on this machine nor on the tailnet, when something else "+
				"encrypts the path; otherwise the node key would cross the network in clear text (PODIUM_INSECURE_PLAINTEXT)"),
		tailnet: fs.String("tailnet-interface", envOr("PODIUM_TAILNET_INTERFACE", transport.DefaultTailnetInterface),
			"the interface tailscaled encrypts through (its --tun); plain http:// to a tailnet address is allowed only when "+
				"the route to it goes out this interface, since carrier-grade NAT networks share 100.64.0.0/10 (PODIUM_TAILNET_INTERFACE)"),
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// checkInterfaceName refuses what Linux would not take as an interface name
// (at most 15 bytes, no '/', ':' or white space), so a typo is caught at
// start rather than as a refusal of every tailnet address.
func checkInterfaceName(name string) error {
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/: \t\n") || name == "." || name == ".." {
		return fmt.Errorf("--tailnet-interface %q is not an interface name: at most 15 characters, without '/', ':' "+
			"or spaces (`ip link` lists them; tailscaled's is tailscale0 unless its --tun says otherwise)", name)
	}
	return nil
}

// security reads the CA file, if any.
func (o *securityOptions) security() (transport.Security, error) {
	sec := transport.Security{InsecurePlaintext: *o.insecure, TailnetInterface: *o.tailnet}
	if err := checkInterfaceName(*o.tailnet); err != nil {
		return sec, err
	}
	if *o.caFile != "" {
		pool, err := transport.LoadCAFile(*o.caFile)
		if err != nil {
			return sec, err
		}
		sec.RootCAs = pool
	}
	return sec, nil
}

// check refuses, at start, a coordinator URL the agent would only speak to in
// clear text across a network. Through the agent's own tailnet device
// (embedded) everything is encrypted, and nothing is checked.
func (o *securityOptions) check(sec transport.Security, ts *tsnetOptions, coordinatorURL string) error {
	if ts.embedded() {
		return nil
	}
	return transport.CheckPlaintext(transport.ContextWithSecurity(context.Background(), sec), coordinatorURL)
}

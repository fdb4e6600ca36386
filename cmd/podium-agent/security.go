package main

import (
	"context"
	"flag"
	"os"
	"strconv"

	"github.com/podiumhq/podium/agent/transport"
)

// securityOptions are the flags for how the agent's connections to the
// coordinator are protected: the CA of a coordinator's private certificate,
// and the operator's leave to speak plain HTTP across a network.
type securityOptions struct {
	caFile   *string
	insecure *bool
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
	}
}

// security reads the CA file, if any.
func (o *securityOptions) security() (transport.Security, error) {
	sec := transport.Security{InsecurePlaintext: *o.insecure}
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

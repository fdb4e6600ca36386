// Package version holds the one version string every Podium binary reports.
//
// A release build stamps it once, for all of them, with
//
//	-ldflags "-X github.com/podiumhq/podium/internal/version.Version=1.2.3"
//
// (the Makefile's VERSION_LDFLAGS; scripts/build-deb.sh and
// scripts/build-coordinator-image.sh pass the same flag). One variable rather
// than one per binary because a missed -X fails silently: the binary just says
// "dev", and an agent that reports "dev" in its Hello is indistinguishable
// from one built by hand. With one variable there is nothing to miss.
package version

// Version is what the binaries print for --version and what the agent and
// runner report about themselves; "dev" for a build that was not stamped.
var Version = "dev"

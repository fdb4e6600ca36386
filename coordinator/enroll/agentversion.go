package enroll

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/version"
)

// The version policy between agents and the control plane: a coordinator of
// release N (a major.minor; patch releases are the same release) takes
// agents of releases N and N-1, which is what a rolling upgrade needs
// (replicas first, then agents); an agent older than that is refused, at
// enrollment and at each stream's Hello, with a message that says to
// upgrade it. An agent newer than the coordinator is taken: the protocol
// grows by fields an older peer ignores. A version that is no release
// (a development build, "dev", a bare commit hash) on either side cannot be
// placed in that order, and is taken.

// release is a version's major and minor numbers, and false when the
// version is no release version.
func release(v string) (major, minor int, ok bool) {
	deb, ok := version.Debian(v)
	if !ok {
		return 0, 0, false
	}
	fields := strings.SplitN(deb, ".", 3)
	if len(fields) < 2 {
		return 0, 0, false
	}
	major, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0, 0, false
	}
	// The minor number ends where the patch, a pre-release (~rc1) or git's
	// count (+git4) starts.
	m := fields[1]
	if i := strings.IndexAny(m, "~+"); i >= 0 {
		m = m[:i]
	}
	minor, err = strconv.Atoi(m)
	if err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// oldestAgent is the oldest release a coordinator of release major.minor
// takes agents of: the release before its own. Which minor ended the
// previous major is not known here, so a coordinator of X.0 takes every
// agent of X-1.
func oldestAgent(major, minor int) (int, int) {
	if minor > 0 {
		return major, minor - 1
	}
	return major - 1, 0
}

// CheckAgentVersion refuses an agent more than one release older than this
// coordinator's binary (see the policy above), saying to upgrade it. It is
// asked at enrollment and again at each stream's Hello (coordinator/nodes).
func CheckAgentVersion(agent string) error { return agentVersionPolicy(agent, version.Version) }

// agentVersionPolicy refuses an agent more than one release older than the
// coordinator, saying to upgrade it.
func agentVersionPolicy(agent, coordinator string) error {
	am, an, ok := release(agent)
	if !ok {
		return nil
	}
	cm, cn, ok := release(coordinator)
	if !ok {
		return nil
	}
	om, on := oldestAgent(cm, cn)
	if am > om || am == om && an >= on {
		return nil
	}
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
		"podium-agent %s is too old for this coordinator (%s), which takes agents of release %d.%d and later: "+
			"upgrade podium-agent on this node to %s (apt-get update && apt-get upgrade), then start it again",
		agent, coordinator, om, on, coordinator))
}

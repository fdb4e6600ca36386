// Package packaging is the acceptance test of how Podium is shipped: the
// podium-agent .deb (nfpm.yaml, systemd/, packaging/deb/) installed with apt
// in Debian bookworm booted with systemd as PID 1, next to a coordinator
// started from its container image (packaging/coordinator/), running a task
// submitted with the CLI. Everything in it is real: systemd, dpkg and apt,
// the Docker engine, Postgres. The one fake is an empty package that stands in
// for docker.io inside the Debian container (testdata/fake-docker.nfpm.yaml
// says why). The agent is installed the way README says, from the
// coordinator's signed apt repository (/install.sh), and upgraded with apt to
// the next version's coordinator.
//
// It has no code of its own outside the test; `make test` and
// `make packaging-test` run it. It needs root, Docker, lintian and, the first
// time, debootstrap and the Debian mirror: scripts/ensure-packaging.sh
// installs them.
package packaging

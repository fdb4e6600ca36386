#!/usr/bin/env bash
# Makes sure this machine has what building and testing Podium's packages
# needs, on top of scripts/ensure-docker.sh: nfpm (the version pinned in the
# Makefile, with `go install`), lintian (the .deb must be lintian clean),
# debootstrap (the acceptance test boots a Debian rootfs it builds once and
# caches in ~/.cache/podium) and the CA bundle the coordinator image copies.
# With PODIUM_CHECK_ONLY=1 it installs nothing: it exits 3 when it would
# have to (scripts/test-deps.sh asks so before telling a non-root user to run
# `sudo make test-deps`).
# With PODIUM_SKIP_GO_TOOLS=1 (root's run under `sudo make test-deps`) it
# leaves nfpm to the user's own make, which installs it into their GOPATH.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
[ -r /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ -n "${PODIUM_CHECK_ONLY:-}" ]; then
  [ ${#need[@]} -eq 0 ] || exit 3
  exit 0
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "podium: missing ${need[*]}; install them with: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "→ installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# `make nfpm` installs the pinned nfpm unless that version is already there.
[ -n "${PODIUM_SKIP_GO_TOOLS:-}" ] || make --no-print-directory nfpm

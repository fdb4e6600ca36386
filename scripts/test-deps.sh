#!/usr/bin/env bash
# `make test-deps` (and so the start of `make test`): installs and starts
# every part the tests need, each step idempotent, printing what it did and
# how long it took. On a machine that has everything, each step only looks
# and the whole takes a second or two.
#
# The system parts (the Docker engine and its tools, Postgres 15's binaries,
# gcc for the race detector, Chromium, lintian, debootstrap, the Debian
# image the packaging test boots) need root to install. A user who is not
# root is told, before anything is built, the one command that installs
# them: `sudo make test-deps`. Run so (SUDO_USER set), only the system parts
# are installed; the Go tools (versitygw, nfpm, golangci-lint) belong in the
# user's own GOPATH, so the user's `make test` installs those itself.
#
# .ci/run calls the same scripts first, overlapping downloads with compiles;
# then this finds everything there.
set -euo pipefail
cd "$(dirname "$0")/.."

start_all=$SECONDS
step() {
  local name=$1
  shift
  local start=$SECONDS
  echo "test-deps: $name ..." >&2
  "$@" >&2
  echo "test-deps: $name: done in $((SECONDS - start)) s" >&2
}


# A non-root user first asks every system step whether it would need to
# install something; if any would, nothing is started and the one command
# that fixes it is named.
if [ "$(id -u)" -ne 0 ]; then
  missing=()
  PODIUM_CHECK_ONLY=1 scripts/ensure-docker.sh >/dev/null 2>&1 || missing+=("the Docker engine, iptables, iproute2, busybox-static or Postgres 15")
  PODIUM_CHECK_ONLY=1 scripts/ensure-cc.sh >/dev/null 2>&1 || missing+=("gcc and libc6-dev (the race detector)")
  PODIUM_CHECK_ONLY=1 scripts/ensure-packaging.sh >/dev/null 2>&1 || missing+=("lintian, debootstrap or ca-certificates")
  PODIUM_CHECK_ONLY=1 scripts/ensure-browser.sh >/dev/null 2>&1 || missing+=("chromium")
  PODIUM_CHECK_ONLY=1 scripts/bookworm-systemd-image.sh >/dev/null 2>&1 || missing+=("the Debian bookworm image the packaging test boots (debootstrap)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "test-deps: the tests need parts only root can install:" >&2
    for m in "${missing[@]}"; do echo "  - $m" >&2; done
    echo "test-deps: run this once, then make test again:" >&2
    echo "" >&2
    echo "    sudo make test-deps" >&2
    echo "" >&2
    exit 1
  fi
fi

step "Docker engine, iptables, iproute2, busybox-static, Postgres 15" scripts/ensure-docker.sh
step "gcc for the race detector" scripts/ensure-cc.sh
step "lintian, debootstrap, CA bundle" env PODIUM_SKIP_GO_TOOLS=${SUDO_USER:+1} scripts/ensure-packaging.sh
step "chromium" scripts/ensure-browser.sh
step "Debian bookworm image with systemd" scripts/bookworm-systemd-image.sh
if [ -n "${SUDO_USER:-}" ]; then
  echo "test-deps: the system parts are in; $SUDO_USER's make test installs the Go tools (versitygw, nfpm, golangci-lint) into their GOPATH" >&2
else
  step "versitygw (S3 server)" scripts/ensure-s3.sh
  step "golangci-lint" make --no-print-directory golangci-lint
fi
echo "test-deps: all parts in place in $((SECONDS - start_all)) s" >&2

#!/usr/bin/env bash
# `make test-deps` (and so the start of `make test`): installs and starts
# every part the tests need, each step idempotent, printing what it did and
# how long it took. On a machine that has everything, each step only looks
# and the whole takes a second or two.
#
# The tests run as root: some need it themselves (the packaging test boots
# Debian with systemd in Docker and debootstraps its image, the agent's
# transport test makes network namespaces and a TUN device, install.sh's
# test mounts a tmpfs over /etc/apt), and the parts they need (the Docker
# engine and its tools, Postgres 15, gcc, Chromium, lintian, debootstrap)
# are installed with apt. So a user who is not root is told, before
# anything is built, the one command that runs it all: `sudo make test`.
#
# .ci/run calls the same scripts first, overlapping downloads with compiles;
# then this finds everything there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  cat >&2 <<MSG
test-deps: the tests run as root (the packaging test boots systemd in Docker,
test-deps: others make network namespaces and mounts), and their parts are
test-deps: installed with apt. Run them so:

    sudo make test

MSG
  exit 1
fi

start_all=$SECONDS
step() {
  local name=$1
  shift
  local start=$SECONDS
  echo "test-deps: $name ..." >&2
  "$@" >&2
  echo "test-deps: $name: done in $((SECONDS - start)) s" >&2
}

step "Docker engine, iptables, iproute2, busybox-static, Postgres 15" scripts/ensure-docker.sh
step "gcc for the race detector" scripts/ensure-cc.sh
step "lintian, debootstrap, CA bundle, nfpm" scripts/ensure-packaging.sh
step "chromium" scripts/ensure-browser.sh
step "Debian bookworm image with systemd" scripts/bookworm-systemd-image.sh
step "versitygw (S3 server)" scripts/ensure-s3.sh
echo "test-deps: all parts in place in $((SECONDS - start_all)) s" >&2

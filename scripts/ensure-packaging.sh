#!/usr/bin/env bash
# Makes sure this machine has what building and testing Podium's packages
# needs, on top of scripts/ensure-docker.sh: nfpm (the version pinned in the
# Makefile, with `go install`), lintian (the .deb must be lintian clean),
# debootstrap (the acceptance test boots a Debian rootfs it builds once and
# caches in ~/.cache/podium) and the CA bundle the coordinator image copies.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
[ -r /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
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
make --no-print-directory nfpm

#!/usr/bin/env bash
# Makes sure this machine has a C compiler: `make test` runs the tests under
# Go's race detector, which needs cgo, and cgo needs gcc and the C library's
# headers. The binaries Podium ships are still built with CGO_ENABLED=0.
set -euo pipefail

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/stdlib.h ] || need+=(libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "podium: the race detector needs ${need[*]}; install them with: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
echo "→ installing ${need[*]} (the race detector needs cgo)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null

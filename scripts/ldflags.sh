#!/usr/bin/env bash
# Prints the -ldflags every Podium binary is built with: stripped, and the
# version stamped into internal/version, the one variable all the binaries
# read. `make build`, scripts/build-deb.sh and scripts/build-coordinator-image.sh
# all take their flags from here, so no build can stamp one binary and miss
# another (a missed -X is silent: that binary just says "dev").
#
# Environment: VERSION (git describe; dev outside a git checkout).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
echo "-s -w -X github.com/podiumhq/podium/internal/version.Version=$version"

#!/usr/bin/env bash
# Builds the podium-coordinator container image (packaging/coordinator/
# Dockerfile) for the Docker engine's architecture, from local files only: no
# base image is pulled, so it builds where no registry is reachable.
# The image also carries the podium-agent and podium (CLI) packages of the
# same version, for amd64 and arm64 (scripts/build-deb.sh), in
# /usr/share/podium/apt: the coordinator serves them as its signed apt
# repository; and the CLI's static binaries for the same architectures in
# /usr/share/podium/download, which it serves with their SHA-256 at
# /download/.
# Usage: scripts/build-coordinator-image.sh NAME:TAG
# Environment: GO (go), VERSION (git describe), DEB_VERSION
# (scripts/deb-version.sh), NFPM (nfpm), DEB_ARCHES ("amd64 arm64").
set -euo pipefail
cd "$(dirname "$0")/.."

image=${1:?usage: scripts/build-coordinator-image.sh NAME:TAG}
go=${GO:-go}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
deb_version=${DEB_VERSION:-$(scripts/deb-version.sh)}
deb_arches=${DEB_ARCHES:-amd64 arm64}
# The binary is built for the engine's architecture, which is the one the
# image is labelled with (FROM scratch has no platform of its own).
arch=$(docker version -f '{{.Server.Arch}}')
cacerts=/etc/ssl/certs/ca-certificates.crt

if [ ! -r "$cacerts" ]; then
  echo "build-coordinator-image: $cacerts is missing; install it with: apt-get install ca-certificates" >&2
  exit 1
fi

# The build context holds exactly what the image holds, so nothing else of
# this tree is sent to the engine.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
echo "→ building podium-coordinator for linux/$arch ($version)" >&2
CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$go" build -trimpath \
  -ldflags "$(VERSION=$version scripts/ldflags.sh)" -o "$ctx/podium-coordinator" ./cmd/podium-coordinator
cp "$cacerts" "$ctx/ca-certificates.crt"
# The packages of this very version, which the coordinator serves, and the
# CLI's binaries for download.
mkdir "$ctx/apt" "$ctx/download"
for deb_arch in $deb_arches; do
  for pkg in podium-agent podium; do
    GO=$go VERSION=$version DEB_VERSION=$deb_version DIST="$ctx/apt" scripts/build-deb.sh "$deb_arch" "$pkg" >/dev/null
  done
  CGO_ENABLED=0 GOOS=linux GOARCH=$deb_arch "$go" build -trimpath \
    -ldflags "$(VERSION=$version scripts/ldflags.sh)" -o "$ctx/download/podium-linux-$deb_arch" ./cmd/podium
done
chmod 0755 "$ctx/apt" "$ctx/download" "$ctx"/download/*
chmod 0644 "$ctx"/apt/*.deb
mkdir "$ctx/state"
# Readable by the image's non-root user whatever the umask was.
chmod 0755 "$ctx/podium-coordinator" "$ctx/state"
chmod 0644 "$ctx/ca-certificates.crt"

echo "→ docker build $image" >&2
docker build -q --build-arg "VERSION=$version" -f packaging/coordinator/Dockerfile -t "$image" "$ctx" >/dev/null
echo "$image"

#!/usr/bin/env bash
# Builds podium-agent_<version>_<arch>.deb for one architecture into $DIST
# (default dist/): cross-compiles the agent-side binaries static (no C
# library, so one build runs on any Debian or Ubuntu of that architecture),
# gzips the man page and runs nfpm with nfpm.yaml. `make deb` calls it once
# per architecture; so can you: scripts/build-deb.sh arm64
#
# Environment: GO (go), NFPM (nfpm on PATH), DIST (dist), VERSION (what the
# binaries report; git describe), DEB_VERSION (scripts/deb-version.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:?usage: scripts/build-deb.sh amd64|arm64}
go=${GO:-go}
nfpm=${NFPM:-nfpm}
dist=${DIST:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
deb_version=${DEB_VERSION:-$(scripts/deb-version.sh)}

# The binaries a node needs. podium-runner is bind-mounted into every task
# container from next to podium-agent, so it ships in the same package; it is
# built whenever its command exists in this tree.
cmds=(./cmd/podium-agent)
if [ -f cmd/podium-runner/main.go ]; then
  cmds+=(./cmd/podium-runner)
fi

mkdir -p "$dist"
stage=$(mktemp -d "$dist/.stage-$arch.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"

echo "→ building ${cmds[*]} for linux/$arch ($version)" >&2
CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$go" build -trimpath \
  -ldflags "$(VERSION=$version scripts/ldflags.sh)" \
  -o "$stage/bin/" "${cmds[@]}"

# Every command shipped has its man page. -n: no name or time stamp in the
# gzip header, so the same page gives the same bytes (and lintian wants man
# pages compressed at level 9).
mkdir -p "$stage/man"
for cmd in "${cmds[@]}"; do
  name=$(basename "$cmd")
  page=packaging/deb/$name.8
  if [ ! -f "$page" ]; then
    echo "build-deb: $name has no man page; write $page" >&2
    exit 1
  fi
  gzip -9n <"$page" >"$stage/man/$name.8.gz"
done

echo "→ packaging podium-agent $deb_version-1 for $arch" >&2
# nfpm resolves the paths in nfpm.yaml from the current directory.
GOARCH=$arch PODIUM_DEB_STAGE=$stage PODIUM_DEB_VERSION=$deb_version \
  "$nfpm" package --config nfpm.yaml --packager deb --target "$dist/" >&2
ls "$dist"/podium-agent_"$deb_version"-1_"$arch".deb

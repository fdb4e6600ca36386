#!/usr/bin/env bash
# Builds PACKAGE_<version>_<arch>.deb for one architecture into $DIST
# (default dist/): cross-compiles the package's binaries static (no C
# library, so one build runs on any Debian or Ubuntu of that architecture),
# gzips their man pages and runs nfpm. PACKAGE is podium-agent (the default:
# the agent and the runner, nfpm.yaml) or podium (the CLI, nfpm-podium.yaml).
# `make deb` calls it for each package and architecture; so can you:
#   scripts/build-deb.sh arm64 podium
#
# Environment: GO (go), NFPM (nfpm on PATH), DIST (dist), VERSION (what the
# binaries report; git describe), DEB_VERSION (scripts/deb-version.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:?usage: scripts/build-deb.sh amd64|arm64 [podium-agent|podium]}
package=${2:-podium-agent}
go=${GO:-go}
nfpm=${NFPM:-nfpm}
dist=${DIST:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
deb_version=${DEB_VERSION:-$(scripts/deb-version.sh)}

case $package in
podium-agent)
  # The binaries a node needs. podium-runner is bind-mounted into every task
  # container from next to podium-agent, so it ships in the same package; it
  # is built whenever its command exists in this tree.
  cmds=(./cmd/podium-agent)
  if [ -f cmd/podium-runner/main.go ]; then
    cmds+=(./cmd/podium-runner)
  fi
  config=nfpm.yaml section=8 ;;
podium)
  cmds=(./cmd/podium)
  config=nfpm-podium.yaml section=1 ;;
*)
  echo "build-deb: no package $package: want podium-agent or podium" >&2
  exit 2 ;;
esac

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
  page=packaging/deb/$name.$section
  if [ ! -f "$page" ]; then
    echo "build-deb: $name has no man page; write $page" >&2
    exit 1
  fi
  gzip -9n <"$page" >"$stage/man/$name.$section.gz"
done

echo "→ packaging $package $deb_version-1 for $arch" >&2
# nfpm resolves the paths in its config from the current directory.
GOARCH=$arch PODIUM_DEB_STAGE=$stage PODIUM_DEB_VERSION=$deb_version \
  "$nfpm" package --config "$config" --packager deb --target "$dist/" >&2
ls "$dist"/"$package"_"$deb_version"-1_"$arch".deb

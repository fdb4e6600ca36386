#!/usr/bin/env bash
# Prints the Debian version of this source tree, for nfpm (without the
# Debian revision, which nfpm.yaml adds). Debian versions must start with a
# digit and must sort in release order, which `git describe` alone does not
# give:
#   on tag v1.2.3                  1.2.3
#   4 commits after v1.2.3         1.2.3+git4.gabcdef0   (after 1.2.3, before 1.2.4)
#   no release tag yet             0.0.0+git20260508T120000.gabcdef0 (commit time, UTC)
#   uncommitted changes            ...+dirty             (never to be published)
# A release build can set it outright: make deb DEB_VERSION=1.2.3
set -euo pipefail
cd "$(dirname "$0")/.."

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo 0.0.0+unknown
  exit 0
fi

dirty=
if ! git diff --quiet HEAD -- 2>/dev/null; then
  dirty=+dirty
fi

if desc=$(git describe --tags --match 'v[0-9]*' --long 2>/dev/null); then
  # v1.2.3-4-gabcdef0 (v1.2.3-rc1-4-gabcdef0 for a pre-release tag)
  tag=${desc%-*-g*}
  rest=${desc#"$tag"-}
  count=${rest%%-*}
  hash=${rest#*-}
  version=${tag#v}
  # A pre-release sorts before its release in Debian only with "~".
  version=${version/-/\~}
  if [ "$count" != 0 ]; then
    version=$version+git$count.$hash
  fi
else
  when=$(TZ=UTC git log -1 --date=format-local:%Y%m%dT%H%M%S --format=%cd)
  version=0.0.0+git$when.g$(git rev-parse --short=7 HEAD)
fi
echo "$version$dirty"

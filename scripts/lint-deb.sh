#!/usr/bin/env bash
# Runs lintian on .deb files and fails on any hint it shows: errors, warnings,
# and the informational and pedantic ones too. What is accepted on purpose is
# in packaging/deb/lintian-overrides, each with its reason, which lintian
# prints beside the overridden hint with --show-overrides.
# Usage: scripts/lint-deb.sh dist/podium-agent_*.deb
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: scripts/lint-deb.sh FILE.deb..." >&2
  exit 2
fi
if ! command -v lintian >/dev/null 2>&1; then
  echo "lint-deb: lintian is missing; install it with: apt-get install lintian (or scripts/ensure-packaging.sh)" >&2
  exit 1
fi
# lintian warns when it runs as root, which CI does; the warning is not a hint.
lintian --fail-on error,warning,info,pedantic --display-info --pedantic "$@" \
  2> >(grep -v '^running with root privileges is not recommended!$' >&2)

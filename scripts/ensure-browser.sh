#!/usr/bin/env bash
# Makes sure this machine has Chromium: the web console's tests
# (internal/browsertest) drive a real headless browser with chromedp against a
# real coordinator, and they fail rather than skip when it is missing. Debian's
# `chromium` package is the one they look for (`chromium` on the PATH).
# With PODIUM_CHECK_ONLY=1 it installs nothing: it exits 3 when it would
# have to (scripts/test-deps.sh asks so before telling a non-root user to run
# `sudo make test-deps`).
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
  [ -n "${PODIUM_CHECK_ONLY:-}" ] && exit 3
  if [ "$(id -u)" -ne 0 ]; then
    echo "podium: the browser tests need chromium; install it with: sudo apt-get install chromium" >&2
    exit 1
  fi
  echo "→ installing chromium (the web console's browser tests drive it)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
[ -n "${PODIUM_CHECK_ONLY:-}" ] || chromium --version

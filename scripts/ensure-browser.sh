#!/usr/bin/env bash
# Makes sure this machine has Chromium: the web console's tests
# (test/browser) drive a real headless browser with chromedp against a
# real coordinator, and they fail rather than skip when it is missing. Debian's
# `chromium` package is the one they look for (`chromium` on the PATH).
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "podium: the browser tests need chromium; install it with: sudo apt-get install chromium" >&2
    exit 1
  fi
  echo "→ installing chromium (the web console's browser tests drive it)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
chromium --version

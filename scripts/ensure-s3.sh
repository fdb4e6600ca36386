#!/usr/bin/env bash
# Makes sure this machine has versitygw, the S3-compatible server the artifact
# tests run against (test/testenv/s3test; MinIO itself is AGPL and not used here).
# It is installed with `go install` from the Go module proxy, pinned; a cold
# build takes about 90 s, and an installed one is kept.
set -euo pipefail

version=v1.8.0
gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"

if command -v versitygw >/dev/null 2>&1 || [ -x "$gobin/versitygw" ]; then
  exit 0
fi
echo "→ installing versitygw $version into $gobin (about 90 s)" >&2
# With `make build`'s flags (static, -trimpath), so the standard library and
# whatever else it shares with Podium is compiled once on a fresh machine.
CGO_ENABLED=0 go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$version"

#!/bin/sh
# Fails on any tracked file over 1 MiB that is not a documented asset: a
# compiled binary or a dump committed by mistake stays in every clone's
# history for good. A large file that belongs here goes in allowed below,
# with its reason in a comment beside it. `make lint` runs this.
set -eu
cd "$(dirname "$0")/.."
limit=1048576
# One path a line; none today.
allowed=""
found=$(git ls-files | while IFS= read -r f; do
	[ -f "$f" ] || continue
	size=$(stat -c %s "$f")
	[ "$size" -gt "$limit" ] || continue
	printf '%s\n' "$allowed" | grep -qxF "$f" && continue
	echo "check-large-files: $f is $size bytes, over 1 MiB: remove it (git rm --cached '$f', and add it to .gitignore if it is a build output), or list it in scripts/check-large-files.sh with its reason"
done)
[ -z "$found" ] || { echo "$found" >&2; exit 1; }

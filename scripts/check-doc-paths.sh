#!/bin/sh
# Fails when docs/architecture.md or README.md names a path in the tree
# (in backquotes: `coordinator/store/dispatch.go`, `agent/session`) that is
# not there: the map of where things live is kept true by the change that
# moves a thing, and this catches the change that forgot. `make lint` runs it.
set -eu
cd "$(dirname "$0")/.."
status=0
for doc in docs/architecture.md README.md; do
	for p in $(grep -o '`[a-z][a-z0-9_./-]*`' "$doc" | tr -d '`' | grep -E '^(agent|coordinator|cmd|internal|test|bench|schema|proto|scripts|docs|packaging|systemd)/' | sort -u); do
		p=${p%/}
		# agent/executor/secrets.go or coordinator/placement.Place: the path is
		# what comes before a Go identifier.
		case "$p" in
		*.go | *.md | *.sh | *.sql | *.yml | *.yaml | *.png | *.proto) path=$p ;;
		*) path=${p%%.*} ;;
		esac
		if [ ! -e "$path" ]; then
			echo "check-doc-paths: $doc names $p, but $path is not in the tree: point the doc at where it moved" >&2
			status=1
		fi
	done
done
exit $status

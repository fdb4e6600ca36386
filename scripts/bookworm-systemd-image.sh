#!/usr/bin/env bash
# Prints the name of a local Docker image of Debian bookworm that boots
# systemd as PID 1, building it first if needed. The packaging acceptance
# test (test/packaging) installs the podium-agent .deb in it; you can
# boot one by hand the same way (section 7 of the design notes):
#
#   docker run -d --cap-add SYS_ADMIN --cgroupns=host \
#     -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock \
#     -e container=docker --stop-signal SIGRTMIN+3 "$(scripts/bookworm-systemd-image.sh)" /sbin/init
#
# No registry is reachable on the machines Podium is built on, so the image
# is made from Debian's own packages with debootstrap, then `docker import`ed.
# debootstrap takes over a minute, so its result is cached as a gzip tarball
# (Docker 20.10 cannot import zstd) under ~/.cache/podium/, named by a hash of
# what went into it; later runs only import it, and only when the image is
# not already there.
#
# Needs root (debootstrap), debootstrap and network access to the Debian
# mirror on the first run (scripts/ensure-packaging.sh installs debootstrap).
# PODIUM_DEBIAN_MIRROR overrides the mirror.
set -euo pipefail

suite=bookworm
mirror=${PODIUM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# systemd as init, dbus for systemctl, apt to install the .deb, man-db so that
# `systemd-analyze verify` can check the unit's Documentation=man: page.
include=systemd,systemd-sysv,dbus,ca-certificates,apt,man-db
# Change this when the way the rootfs is made changes, so caches are rebuilt.
recipe="v1 $suite minbase $include"

cache=${PODIUM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/podium}
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-12)
tarball=$cache/$suite-systemd-rootfs-$key.tar.gz
image=podium-test/$suite-systemd:$key

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi

mkdir -p "$cache"
# Two test runs starting cold at once build it once: the second waits here.
exec 9>"$cache/.$suite-systemd.lock"
flock 9

if [ ! -s "$tarball" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bookworm-systemd-image: building the rootfs needs root (debootstrap)" >&2
    exit 1
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "bookworm-systemd-image: debootstrap is missing; install it with: apt-get install debootstrap (or scripts/ensure-packaging.sh)" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "→ debootstrap $suite into $work (about a minute, once; cached in $tarball)" >&2
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    echo "bookworm-systemd-image: debootstrap failed (log above)" >&2
    exit 1
  fi
  # Downloaded packages and indexes are not needed to boot (the test installs
  # local .deb files whose dependencies are met), and a fresh machine id is
  # generated at every boot when the file is empty, as a container wants.
  rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/*
  : >"$work/root/etc/machine-id"
  tar -C "$work/root" --numeric-owner -czf "$work/rootfs.tar.gz" .
  mv "$work/rootfs.tar.gz" "$tarball"
fi

echo "→ docker import $tarball" >&2
docker import "$tarball" "$image" >/dev/null
echo "$image"

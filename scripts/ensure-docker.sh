#!/usr/bin/env bash
# Makes sure this machine has what Podium's demo and tests run on: a Docker
# engine (Debian's docker.io, started if it is not running), iptables and
# iproute2, Debian's busybox-static (the local test image is built from it,
# since no registry is reachable) and the Postgres 15 binaries.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
# docker.io depends on iptables, but a machine whose engine came from
# elsewhere may lack it; the agent's egress filter and its tests need it, and
# the tests need ip (iproute2) for the network namespace they route through.
PATH="$PATH:/usr/sbin:/sbin"
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "podium: missing ${need[*]}; install them with: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "→ installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ] && pgrep -x dockerd >/dev/null 2>&1; then
    echo "podium: the Docker engine runs but $(id -un) may not use it; add yourself to the docker group (sudo usermod -aG docker $(id -un), then log in again)" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "podium: the Docker engine is not running; start it with: sudo systemctl start docker" >&2
    exit 1
  fi
  echo "→ starting the Docker engine" >&2
  if [ -d /run/systemd/system ] && systemctl start docker >/dev/null 2>&1; then
    :
  else
    nohup dockerd >/var/log/podium-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    echo "podium: the Docker engine did not come up; see /var/log/podium-dockerd.log" >&2
    exit 1
  fi
fi

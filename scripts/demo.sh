#!/usr/bin/env bash
# The demo: a coordinator on a throwaway Postgres, one agent on the local Docker
# engine, and a task run through them with the CLI. Everything lives in .demo/
# and keeps running afterwards so you can try more commands; `make demo-stop`
# (this script with "stop") ends it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
demo=$root/.demo
pgbin=/usr/lib/postgresql/15/bin
port=${PODIUM_DEMO_PORT:-7070}
export PODIUM_SERVER=http://127.0.0.1:$port
# The coordinator wants a token of at least 32 bytes. This one is no secret:
# the demo serves on loopback only.
export PODIUM_TOKEN=demo-token-on-loopback-0123456789abcdef
image=podium-demo/busybox:local

stop() {
  for p in agent coordinator; do
    if [ -f "$demo/$p.pid" ]; then
      kill "$(cat "$demo/$p.pid")" 2>/dev/null || true
      rm -f "$demo/$p.pid"
    fi
  done
  if [ -d "$demo/pg/data" ]; then
    as_pg "$pgbin/pg_ctl" -D "$demo/pg/data" -m fast stop >/dev/null 2>&1 || true
  fi
}

# Postgres refuses to run as root; run it as the postgres account then.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = stop ]; then
  stop
  echo "demo stopped (its files are in .demo/; rm -rf .demo to forget them)"
  exit 0
fi

scripts/ensure-docker.sh
stop
rm -rf "$demo"
mkdir -p "$demo/pg" "$demo/agent"

echo "→ starting a throwaway Postgres in .demo/pg"
[ "$(id -u)" -eq 0 ] && chown postgres "$demo/pg"
as_pg "$pgbin/initdb" -D "$demo/pg/data" -U postgres -A trust --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$demo/pg/data" -l "$demo/pg/postgres.log" -w \
  -o "-k $demo/pg -c listen_addresses= -c fsync=off" start >/dev/null
export PODIUM_DATABASE_URL="postgres://postgres@/postgres?host=$demo/pg&sslmode=disable"

echo "→ starting the coordinator on $PODIUM_SERVER (log: .demo/coordinator.log)"
bin/podium-coordinator serve --listen "127.0.0.1:$port" >"$demo/coordinator.log" 2>&1 &
echo $! >"$demo/coordinator.pid"
for _ in $(seq 1 100); do
  curl -fsS "$PODIUM_SERVER/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$PODIUM_SERVER/readyz" >/dev/null || { cat "$demo/coordinator.log"; exit 1; }

echo "→ building $image FROM scratch with busybox (no registry is needed)"
ctx=$(mktemp -d)
cp /bin/busybox "$ctx/busybox"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\nCMD ["sh"]\n' >"$ctx/Dockerfile"
docker build -q -t "$image" "$ctx" >/dev/null 2>&1
rm -rf "$ctx"

echo "→ enrolling an agent with a single-use token, then starting it (log: .demo/agent.log)"
token=$(bin/podium token create --label demo)
bin/podium-agent enroll --coordinator "$PODIUM_SERVER" --token "$token" --data-dir "$demo/agent" >"$demo/enroll.log" 2>&1
# The agent's task egress filter changes iptables rules, which needs root;
# a demo run as another user (in the docker group) goes without it.
agent_flags=()
[ "$(id -u)" -eq 0 ] || agent_flags+=(--egress-filter=false)
bin/podium-agent run --data-dir "$demo/agent" "${agent_flags[@]}" >"$demo/agent.log" 2>&1 &
echo $! >"$demo/agent.pid"
for _ in $(seq 1 100); do
  bin/podium nodes 2>/dev/null | grep -q online && break
  sleep 0.1
done

echo "→ podium run --image $image -- sh -c 'echo hello from podium; uname -a; echo this goes to stderr >&2; exit 3'"
echo
set +e
bin/podium run --image "$image" -- sh -c 'echo hello from podium; uname -a; echo this goes to stderr >&2; exit 3'
code=$?
set -e
echo
echo "→ podium run exited $code: the task's own exit code"
echo
bin/podium tasks
echo
cat <<EOT
The coordinator and the agent are still running. Try, in this directory:
  export PODIUM_SERVER=$PODIUM_SERVER PODIUM_TOKEN=$PODIUM_TOKEN
  bin/podium run --image $image -- sh -c 'for i in 1 2 3; do echo \$i; sleep 1; done'
  bin/podium nodes
  psql "$PODIUM_DATABASE_URL" -c 'select id, state, node_id, reason from podium.tasks'
Stop everything with: make demo-stop
EOT

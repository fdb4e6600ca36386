#!/usr/bin/env bash
# The demo: a coordinator on a throwaway Postgres with every optional part on
# (a secrets key, an S3 server for artifacts and log archives, the agent's apt
# repository), one agent on the local Docker engine, and a task run through
# them with the CLI. Everything lives in .demo/ and keeps running afterwards
# so you can try more commands; `make demo-stop` (this script with "stop")
# ends it. Run again, it starts the same demo on the same data; only `make
# demo-reset` (this script with "reset") deletes .demo/.
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
s3port=${PODIUM_DEMO_S3_PORT:-7071}
image=podium-demo/busybox:local
gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
export PATH=$PATH:$gobin

stop() {
  for p in agent coordinator s3; do
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

case "${1:-}" in
stop)
  stop
  echo "demo stopped (its files are in .demo/: make demo starts it again on them, make demo-reset deletes them)"
  exit 0
  ;;
reset)
  stop
  rm -rf "$demo"
  echo "demo stopped and .demo/ deleted"
  exit 0
  ;;
esac

scripts/ensure-docker.sh
stop
fresh=true
if [ -d "$demo/pg/data" ]; then
  fresh=false
  echo "→ starting the demo again on .demo/ from before (its tasks, secrets and node are kept; make demo-reset to start afresh)"
fi
mkdir -p "$demo/pg" "$demo/agent" "$demo/s3" "$demo/apt"

echo "→ Postgres in .demo/pg"
[ "$(id -u)" -eq 0 ] && chown postgres "$demo/pg"
$fresh && as_pg "$pgbin/initdb" -D "$demo/pg/data" -U postgres -A trust --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$demo/pg/data" -l "$demo/pg/postgres.log" -w \
  -o "-k $demo/pg -c listen_addresses= -c fsync=off" start >/dev/null
export PODIUM_DATABASE_URL="postgres://postgres@/postgres?host=$demo/pg&sslmode=disable"

# The secrets key: 32 random bytes, made once and kept with the demo's data
# (the secrets stored in its Postgres are sealed under it).
if [ ! -s "$demo/secrets.key" ]; then
  (umask 077 && head -c 32 /dev/urandom >"$demo/secrets.key")
fi
export PODIUM_SECRETS_KEY_FILE=$demo/secrets.key

echo "→ an S3 server (versitygw) for artifacts and log archives on 127.0.0.1:$s3port (log: .demo/s3.log)"
scripts/ensure-s3.sh
versitygw --access demo-access-key --secret demo-secret-key-on-loopback --port "127.0.0.1:$s3port" posix "$demo/s3" >"$demo/s3.log" 2>&1 &
echo $! >"$demo/s3.pid"
export PODIUM_S3_ENDPOINT=http://127.0.0.1:$s3port PODIUM_S3_ACCESS_KEY=demo-access-key PODIUM_S3_SECRET_KEY=demo-secret-key-on-loopback
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$s3port/" && break
  sleep 0.1
done

echo "→ this tree's podium-agent package, for the apt repository the coordinator serves (.demo/apt)"
arch=$(dpkg --print-architecture 2>/dev/null || go env GOARCH)
if ! ls "$demo"/apt/podium-agent_*_"$arch".deb >/dev/null 2>&1; then
  make --no-print-directory nfpm >/dev/null
  DIST=$demo/apt NFPM=$gobin/nfpm scripts/build-deb.sh "$arch" >"$demo/deb.log" 2>&1 || { cat "$demo/deb.log"; exit 1; }
fi
export PODIUM_APT_DIR=$demo/apt

echo "→ the coordinator on $PODIUM_SERVER (log: .demo/coordinator.log)"
bin/podium-coordinator serve --listen "127.0.0.1:$port" >>"$demo/coordinator.log" 2>&1 &
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

if [ ! -s "$demo/enroll.log" ]; then
  echo "→ enrolling an agent with a single-use token (log: .demo/enroll.log)"
  token=$(bin/podium token create --label demo)
  bin/podium-agent enroll --coordinator "$PODIUM_SERVER" --token "$token" --data-dir "$demo/agent" >"$demo/enroll.log" 2>&1
fi
echo "→ starting the agent (log: .demo/agent.log)"
# The agent's task egress filter changes iptables rules, which needs root;
# a demo run as another user (in the docker group) goes without it.
agent_flags=()
[ "$(id -u)" -eq 0 ] || agent_flags+=(--egress-filter=false)
bin/podium-agent run --data-dir "$demo/agent" "${agent_flags[@]}" >>"$demo/agent.log" 2>&1 &
echo $! >"$demo/agent.pid"
for _ in $(seq 1 100); do
  bin/podium nodes 2>/dev/null | grep -q online && break
  sleep 0.1
done

echo "→ podium run --name hello --image $image -- sh -c 'echo hello from podium; uname -a; echo this goes to stderr >&2; exit 3'"
echo
set +e
bin/podium run --name hello --image "$image" -- sh -c 'echo hello from podium; uname -a; echo this goes to stderr >&2; exit 3'
code=$?
set -e
echo
echo "→ podium run exited $code: the task's own exit code"
echo
bin/podium tasks
echo
cat <<EOT
The coordinator, the agent and the S3 server are still running. Try, in this directory:
  export PODIUM_SERVER=$PODIUM_SERVER PODIUM_TOKEN=$PODIUM_TOKEN

  # a task with a name, an env variable and a working directory, as docker run takes them
  bin/podium run --name count -e N=3 -w /tmp --image $image -- sh -c 'for i in \$(seq \$N); do echo \$i; sleep 1; done'
  bin/podium tasks --name count

  # a secret, stored sealed and given to a task as a variable
  echo -n hunter2 | bin/podium secret set db-password
  bin/podium run --secret db-password --image $image -- sh -c 'echo the password has \${#DB_PASSWORD} letters'

  # an artifact, stored in the S3 server and fetched back
  id=\$(bin/podium run -d --image $image -- sh -c 'mkdir -p /workspace/.podium/artifacts; date > /workspace/.podium/artifacts/when.txt')
  bin/podium wait \$id; bin/podium artifacts \$id; bin/podium artifact get \$id when.txt -o -

  # the apt repository a new machine installs the agent from
  curl -s $PODIUM_SERVER/install.sh | head

  # the console: open $PODIUM_SERVER/console/ and sign in with the token above
  # the fleet in SQL
  psql "$PODIUM_DATABASE_URL" -c 'select id, state, node_id, reason from podium.tasks'

Stop everything with make demo-stop (make demo starts it again on the same data);
make demo-reset deletes .demo/ and everything in it.
EOT

#!/usr/bin/env bash
# gpu-check: on a GPU node, checks end to end that a task given N GPUs sees
# exactly N, and that they are the ones its attempt was given. CI has no GPU
# and no NVIDIA container runtime, so this is the check an operator runs after
# setting up a GPU node (README, "GPUs").
#
#   make gpu-check [GPUS=N]        or        scripts/gpu-check.sh [N]
#
# Run it on the GPU node itself (it compares with the node's own nvidia-smi),
# with the podium CLI pointed at the coordinator (PODIUM_SERVER, PODIUM_TOKEN),
# once `podium nodes` shows the node's GPUs. The node needs the NVIDIA driver
# and the NVIDIA container toolkit (`nvidia-ctk runtime configure
# --runtime=docker`, then restart dockerd); no other task should hold GPUs
# there meanwhile, or the check's task waits for them.
#
# Environment:
#   PODIUM           the CLI (default: bin/podium if built, else podium on PATH)
#   GPU_CHECK_IMAGE  the task's image (default ubuntu:24.04: nvidia-smi is put
#                    into the container by the NVIDIA runtime, not the image)
#   GPU_CHECK_MODEL  a --gpu-model glob to ask for, e.g. "NVIDIA H100*"
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-${GPUS:-1}}
image=${GPU_CHECK_IMAGE:-ubuntu:24.04}
podium=${PODIUM:-}
if [ -z "$podium" ]; then
  if [ -x bin/podium ]; then podium=bin/podium; else podium=podium; fi
fi

fail() { echo "gpu-check: FAIL: $*" >&2; exit 1; }
ok() { echo "gpu-check: ok: $*"; }

case $n in
  '' | *[!0-9]*) fail "GPUS=$n: give the number of GPUs to ask for, 1 or more" ;;
esac
[ "$n" -ge 1 ] || fail "GPUS=$n: give the number of GPUs to ask for, 1 or more"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi on this machine: run the check on the GPU node, with the NVIDIA driver installed"
command -v "$podium" >/dev/null || fail "no podium CLI ($podium): build it (make build) or set PODIUM"

host=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tr -d ' ' | sort)
have=$(grep -c . <<<"$host" || true)
[ "$have" -ge "$n" ] || fail "this node has $have GPU(s), fewer than the $n to ask for"
echo "gpu-check: this node's GPUs:"
sed 's/^/  /' <<<"$host"

model=()
if [ -n "${GPU_CHECK_MODEL:-}" ]; then model=(--gpu-model "$GPU_CHECK_MODEL"); fi

# 1. A task asking N GPUs: what it was given (NVIDIA_VISIBLE_DEVICES, which
# the agent sets to the attempt's GPUs) and what it sees (nvidia-smi -L).
since=$(date '+%Y-%m-%d %H:%M:%S')
echo "gpu-check: podium run --gpus $n ${model[*]} --image $image -- nvidia-smi -L"
out=$("$podium" run --gpus "$n" "${model[@]}" --image "$image" -- \
  sh -c 'echo "given=$NVIDIA_VISIBLE_DEVICES"; nvidia-smi -L') ||
  fail "the task failed (exit $?); its output:
$out"
echo "$out" | sed 's/^/  | /'
given=$(sed -n 's/^given=//p' <<<"$out" | tr ',' '\n' | grep . | sort || true)
seen=$(grep -o 'UUID: GPU-[0-9a-fA-F-]*' <<<"$out" | sed 's/^UUID: //' | sort || true)
[ "$(grep -c . <<<"$seen" || true)" -eq "$n" ] || fail "the task sees $(grep -c . <<<"$seen" || true) GPU(s), want exactly $n"
ok "the task sees exactly $n GPU(s)"
[ "$seen" = "$given" ] || fail "the task sees
$seen
but its attempt was given
$given"
ok "they are the GPUs its attempt was given"
while read -r u; do
  grep -qx "$u" <<<"$host" || fail "the task sees $u, which is not one of this node's GPUs"
done <<<"$seen"
ok "they are GPUs of this node"

# The agent logs the assignment; when its journal is readable here, the
# attempt's GPUs there must be the same.
if command -v journalctl >/dev/null && journalctl -u podium-agent -n 1 -q >/dev/null 2>&1; then
  line=$(journalctl -u podium-agent --since "$since" -o cat -q | grep 'GPUs assigned to the task' | tail -n 1 || true)
  if [ -n "$line" ]; then
    logged=$(grep -o 'GPU-[0-9a-fA-F-]*' <<<"$line" | sort)
    [ "$logged" = "$seen" ] || fail "the agent's log says it gave $logged, the task sees $seen"
    ok "the agent's log names the same GPUs"
  else
    echo "gpu-check: (no \"GPUs assigned to the task\" line in podium-agent's journal since $since; not compared)"
  fi
fi

# 2. A task asking none sees none, whatever its image says.
out=$("$podium" run --image "$image" -- \
  sh -c 'echo "given=${NVIDIA_VISIBLE_DEVICES-}"; if command -v nvidia-smi >/dev/null; then nvidia-smi -L || true; fi') ||
  fail "the task without GPUs failed (exit $?); its output:
$out"
if grep -q 'UUID: GPU-' <<<"$out"; then
  fail "a task asking no GPU sees some:
$out"
fi
ok "a task asking no GPU sees none"
echo "gpu-check: PASS"

#!/usr/bin/env bash
# DIR/run REPORT_DIR: every GPU check of feedd on a bare GPU machine, from
# a pack made by `scripts/gpu-check --pack DIR` (this file is copied there
# as DIR/run). Needs nothing but DIR, the NVIDIA driver and, for the
# end-to-end step, a python3 with CUDA torch: no apt, no network. Sets its
# own library path (DIR/lib), runs
#   1. the tests of tests/gpu: kernels against their CPU twins, the
#      client's pinned copies and conversion into device memory, device
#      slots over CUDA IPC between a real feedd and a real consumer
#      (done-gated reuse, a killed consumer, one killed behind never-run
#      work);
#   2. bench/gpu_convert: conversion throughput as a share of the device's
#      memory bandwidth; tests/gpu/check_nvjpeg_gpu.c: nvJPEG's decoded and
#      resized pixels against the CPU path's (max and mean |difference|);
#   3. tests/gpu/e2e_torch.py: Fashion-MNIST and a JPEG set through
#      Loader(device="cuda") and device slots against torchvision on the
#      GPU (within 1 bf16 ulp), mixup/cutmix on the GPU against the CPU
#      twins (bit for bit), and a small model's training step (stall %,
#      NVML utilisation);
# and writes REPORT_DIR/report.md and report.json (and one log per step).
# Exit: 0 all passed, 1 something failed, 77 no GPU seen (nothing run).
set -uo pipefail
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPORT=${1:?usage: run REPORT_DIR}
mkdir -p "$REPORT"
REPORT=$(cd "$REPORT" && pwd)

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu-check: no GPU seen (nvidia-smi -L lists none); nothing was run"
  exit 77
fi

# Our libraries first; libstdc++ and libgcc_s only where the machine has none.
export LD_LIBRARY_PATH="$DIR/lib"
if ! ldconfig -p 2>/dev/null | grep -q 'libstdc++.so.6 '; then
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$DIR/lib/fallback"
fi
export FEED_BIN="$DIR/bin" FEED_LIB="$DIR/lib" CK_DEFAULT_TIMEOUT=120 CK_VERBOSITY=verbose
export TMPDIR=${TMPDIR:-/tmp}

steps=()   # name|rc|seconds

# The pids of pid's process tree, pid first.
tree() {
  local p=$1 c
  echo "$p"
  for c in $(pgrep -P "$p" 2>/dev/null); do tree "$c"; done
}

# Where a step outlives its limit: every thread's stack of every process
# of its tree (cuda-gdb, where the image has it), into the step's log.
stacks() {
  local root=$1 log=$2 p
  command -v cuda-gdb >/dev/null || { echo "(no cuda-gdb: no stacks)" >>"$log"; return; }
  for p in $(tree "$root"); do
    echo "=== stacks of pid $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)" >>"$log"
    timeout 25 cuda-gdb -p "$p" -batch -ex "info threads" -ex "thread apply all bt 30" \
      2>&1 | grep -vE '^\[(New|Thread .* exited)|^warning|^Reading|^$' | head -400 >>"$log"
  done
}

# step NAME LIMIT CMD...: runs one check, its output in REPORT/NAME.log;
# past LIMIT seconds its stacks are taken and it is killed (exit 124).
step() {
  local name=$1 limit=$2 t0 rc pid waited=0
  shift 2
  t0=$(date +%s.%N)
  echo "== $name"
  setsid "$@" >"$REPORT/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((limit * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "=== $name: still running after ${limit}s: stacks, then killed" >>"$REPORT/$name.log"
    stacks "$pid" "$REPORT/$name.log"
    kill -KILL -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=124
  else
    wait "$pid"
    rc=$?
  fi
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  tail -n 15 "$REPORT/$name.log"
  echo "== $name: exit $rc in ${secs}s"
  steps+=("$name|$rc|$secs")
}

{
  nvidia-smi
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  uname -a
  ls "$DIR/bin"
} >"$REPORT/machine.log" 2>&1

step convert_gpu 90 "$DIR/bin/check_convert_gpu"
step ipc_event_gpu 60 "$DIR/bin/check_ipc_event_gpu"
step client_gpu_device 60 "$DIR/bin/check_client_gpu_device"
step ipc_gpu 90 "$DIR/bin/check_ipc_gpu"
step gpu_convert 60 "$DIR/bin/gpu_convert"
# hybrid JPEG decode: nvJPEG's pixels against the CPU path's on the held-out
# set (bounds in tests/gpu/check_nvjpeg_gpu.c); needs libnvjpeg on the
# machine (the toolkit, the nvidia-nvjpeg wheel or torchvision's copy)
step nvjpeg_gpu 120 "$DIR/bin/check_nvjpeg_gpu" "$DIR/data/jpeg_files"
PY=$(command -v python3)
step e2e_torch 150 env -u LD_LIBRARY_PATH PYTHONPATH="$DIR/python" FEEDCLIENT_LIB="$DIR/lib/libfeedclient.so.0" PYTHONUNBUFFERED=1 \
  "$PY" "$DIR/e2e_torch.py" --feedd "$DIR/bin/feedd" --libdir "$DIR/lib" --data "$DIR/data" \
  --out "$REPORT/e2e.json"
step e2e_resnet 300 env -u LD_LIBRARY_PATH PYTHONPATH="$DIR/python:$DIR" FEEDCLIENT_LIB="$DIR/lib/libfeedclient.so.0" PYTHONUNBUFFERED=1 \
  "$PY" "$DIR/e2e_resnet.py" --feedd "$DIR/bin/feedd" --libdir "$DIR/lib" --data "$DIR/data" \
  --out "$REPORT/e2e_resnet.json"

failed=0
{
  echo "# feedd GPU check"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), pack built from $(cat "$DIR/VERSION" 2>/dev/null)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo '```'
  echo
  echo "| step | exit | seconds |"
  echo "|---|---|---|"
  for s in "${steps[@]}"; do
    IFS='|' read -r n rc secs <<<"$s"
    verdict=passed
    [ "$rc" -eq 0 ] || { verdict="FAILED ($rc)"; failed=1; }
    echo "| $n | $verdict | $secs |"
  done
  echo
  echo "## gpu_convert"
  echo '```'
  cat "$REPORT/gpu_convert.log"
  echo '```'
  echo
  echo "## nvjpeg_gpu (hybrid decode against the CPU path)"
  echo '```'
  grep '^nvjpeg' "$REPORT/nvjpeg_gpu.log"
  echo '```'
  echo
  echo "## e2e_torch"
  echo '```'
  tail -n 80 "$REPORT/e2e_torch.log"
  echo '```'
  echo
  echo "## e2e_resnet (ResNet-50, bf16, channels_last: feedd against DataLoader)"
  echo '```'
  tail -n 60 "$REPORT/e2e_resnet.log"
  echo '```'
  for s in "${steps[@]}"; do
    IFS='|' read -r n rc secs <<<"$s"
    [ "$rc" -eq 0 ] && continue
    echo
    echo "## $n (exit $rc): last lines"
    echo '```'
    tail -n 40 "$REPORT/$n.log"
    echo '```'
  done
} >"$REPORT/report.md"

# report.json: the steps, gpu_convert's lines and e2e's object
"$PY" - "$REPORT" "${steps[@]}" <<'EOF' || true
import json, os, sys
rep, steps = sys.argv[1], sys.argv[2:]
out = {"steps": []}
for s in steps:
    n, rc, secs = s.split("|")
    out["steps"].append({"name": n, "exit": int(rc), "seconds": float(secs)})
out["gpu_convert"] = open(os.path.join(rep, "gpu_convert.log")).read().splitlines()
for key, name in (("e2e", "e2e.json"), ("e2e_resnet", "e2e_resnet.json")):
    try:
        out[key] = json.load(open(os.path.join(rep, name)))
    except (OSError, ValueError) as e:
        out[key] = {"error": str(e)}
out["ok"] = all(s["exit"] == 0 for s in out["steps"])
json.dump(out, open(os.path.join(rep, "report.json"), "w"), indent=1)
EOF
echo "== report: $REPORT/report.md"
exit $failed

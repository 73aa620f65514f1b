#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (run it whenever one is at hand, and
# record its summary line in the README with the machine it came from):
#
#   1. teardown: a real CUDA process (torch, same user, its own session) holds memory on one GPU;
#      playbooks/teardown.yml runs with the NVML backend and this process recorded as the server;
#      then every GPU must read idle, the holder must be gone and nothing else may have died
#      (a bystander process of this script, and every other GPU holder seen before).
#   2. bench (when SGLang is installed for --python and --model is given): bench.yml with
#      engine=sglang, mode baseline, C = 1, 4, 16, then the teardown; the results file is read.
#
# Prints one summary line (last line, starting "run_on_gpu:") and exits 0 when every part that
# ran passed, 1 when one failed, 2 when it cannot run here (no nvidia-smi, no GPU, bad
# arguments). Finishes in under 8 minutes (part 1 within 2, part 2 within 6).
#
#   tests/gpu/run_on_gpu.sh [--gpu 0] [--gib 4] [--python PATH] [--model PATH] [--skip-bench]
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GPU=0
GIB=4
IDLE_MIB=64
PYTHON=""
MODEL=""
SKIP_BENCH=0
ANSIBLE_PLAYBOOK=""

usage() {
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

summary() {  # summary STATUS TEXT: the one line, then exit
    echo "run_on_gpu: $2"
    exit "$1"
}

need_value() {  # need_value FLAG COUNT: a flag given without its value
    [ "$2" -ge 2 ] || summary 2 "NOT RUN: $1 needs a value (see --help)"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --gpu|--gib|--python|--model|--ansible-playbook) need_value "$1" $# ;;
    esac
    case "$1" in
        --gpu) GPU=${2:-}; shift 2 ;;
        --gib) GIB=${2:-}; shift 2 ;;
        --python) PYTHON=${2:-}; shift 2 ;;
        --model) MODEL=${2:-}; shift 2 ;;
        --ansible-playbook) ANSIBLE_PLAYBOOK=${2:-}; shift 2 ;;
        --skip-bench) SKIP_BENCH=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2
           summary 2 "NOT RUN: unknown argument $1; use --gpu N --gib G --python PATH --model PATH --skip-bench" ;;
    esac
done
case "$GPU" in ''|*[!0-9]*) summary 2 "NOT RUN: --gpu must be a GPU index (0, 1, ...), got '$GPU'" ;; esac
case "$GIB" in ''|*[!0-9.]*) summary 2 "NOT RUN: --gib must be a number of GiB, got '$GIB'" ;; esac

if ! command -v nvidia-smi >/dev/null 2>&1; then
    summary 2 "NOT RUN: nvidia-smi not found: this check needs an NVIDIA GPU machine with the driver installed (nothing was started)"
fi
if ! GPUS=$(nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader,nounits 2>&1) \
        || [ -z "$GPUS" ]; then
    summary 2 "NOT RUN: nvidia-smi lists no GPU here: ${GPUS:-no output}"
fi
if ! echo "$GPUS" | grep -q "^$GPU,"; then
    summary 2 "NOT RUN: there is no GPU $GPU here (nvidia-smi lists: $(echo "$GPUS" | cut -d, -f1 | tr '\n' ' '))"
fi
MACHINE=$(echo "$GPUS" | awk -F', ' -v g="$GPU" '$1 == g {print $2 ", " $4 " MiB, driver " $5}')
COUNT=$(echo "$GPUS" | wc -l)

[ -n "$PYTHON" ] || PYTHON=$(command -v python3)
if [ -z "$ANSIBLE_PLAYBOOK" ]; then
    if [ -x "$ROOT/.venv/bin/ansible-playbook" ]; then ANSIBLE_PLAYBOOK="$ROOT/.venv/bin/ansible-playbook"
    else ANSIBLE_PLAYBOOK=$(command -v ansible-playbook || true); fi
fi
[ -n "$ANSIBLE_PLAYBOOK" ] || summary 2 "NOT RUN: ansible-playbook not found: build the venv (see README) or pass --ansible-playbook"
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    summary 2 "NOT RUN: $PYTHON has no torch with CUDA: pass --python with one (pip install torch)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/specbench-gpu-XXXXXX")
NODE="$WORK/node"
mkdir -p "$NODE"
HOLDER=""
BYSTANDER=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    for pid in $HOLDER $BYSTANDER; do kill -9 "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

idle_all() {  # every GPU at or under IDLE_MIB
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk -v m="$IDLE_MIB" '$1 > m {bad=1} END {exit bad}'
}
if ! idle_all; then
    summary 2 "NOT RUN: a GPU is not idle before the check (over $IDLE_MIB MiB used): free the machine first ($(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | tr '\n' ' '))"
fi
OTHERS=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | sort -u | tr '\n' ' ')

# ------------------------------------------------------------------ part 1: the teardown
T0=$(date +%s)
sleep 3600 &
BYSTANDER=$!
setsid "$PYTHON" -c '
import os, sys, time, torch
torch.cuda.set_device(int(sys.argv[1]))
block = torch.empty(int(float(sys.argv[2]) * (1 << 30)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(os.getpid(), flush=True)
time.sleep(3600)
' "$GPU" "$GIB" > "$WORK/holder.out" 2> "$WORK/holder.err" &
for _ in $(seq 1 120); do
    HOLDER=$(head -n1 "$WORK/holder.out" 2>/dev/null)
    [ -n "$HOLDER" ] && break
    sleep 0.5
done
[ -n "$HOLDER" ] || summary 1 "FAILED: the torch process did not allocate $GIB GiB on GPU $GPU: $(tail -n 3 "$WORK/holder.err" | tr '\n' ' ')"
USED=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$GPU" | tr -d ' ')
START=$(awk '{print $22}' "/proc/$HOLDER/stat")
EXTRA=$(printf '{"engine":"sglang","gpu_backend":"nvml","gpu_device_glob":"/dev/nvidia*","gpu_idle_mib":%s,"specbench_node_dir":"%s","specbench_server":{"pid":%s,"pgid":%s,"starttime":%s},"gpu_term_timeout_s":10}' \
    "$IDLE_MIB" "$NODE" "$HOLDER" "$HOLDER" "$START")
(cd "$ROOT" && timeout 120 "$ANSIBLE_PLAYBOOK" playbooks/teardown.yml -e "$EXTRA") > "$WORK/teardown.log" 2>&1
TD_RC=$?
T1=$(date +%s)
PART1="teardown"
PROBLEMS=""
[ "$TD_RC" -eq 0 ] || PROBLEMS="$PROBLEMS playbook rc $TD_RC ($(grep -m1 -A2 'fatal:' "$WORK/teardown.log" | tr '\n' ' ' | cut -c1-300));"
idle_all || PROBLEMS="$PROBLEMS a GPU is not idle after it ($(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | tr '\n' ' '));"
kill -0 "$HOLDER" 2>/dev/null && PROBLEMS="$PROBLEMS the torch holder $HOLDER survived;"
kill -0 "$BYSTANDER" 2>/dev/null || PROBLEMS="$PROBLEMS the bystander process $BYSTANDER died;"
for pid in $OTHERS; do
    kill -0 "$pid" 2>/dev/null || PROBLEMS="$PROBLEMS the other GPU process $pid died;"
done
if [ -z "$PROBLEMS" ]; then
    PART1="teardown CLEAN: $USED MiB held on GPU $GPU freed, all $COUNT GPU(s) idle, bystanders alive, $((T1 - T0)) s"
    STATUS=0
else
    PART1="teardown FAILED:$PROBLEMS see $WORK/teardown.log"
    STATUS=1
fi
HOLDER=""

# ------------------------------------------------------------------ part 2: a small bench
PART2="bench skipped"
if [ "$SKIP_BENCH" -eq 1 ]; then
    PART2="bench skipped (--skip-bench)"
elif ! SGLANG=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('sglang'))" 2>/dev/null); then
    PART2="bench skipped (no SGLang for $PYTHON; vLLM runs need the vLLM launch role)"
elif [ -z "$MODEL" ]; then
    PART2="bench skipped (SGLang $SGLANG found; pass --model with a small local model, e.g. a 0.5B-1B instruct folder)"
else
    RESULTS="$WORK/results"
    BENCH=$(printf '{"mode":"baseline","engine":"sglang","run_id":"gpu-check","results_dir":"%s","specbench_node_dir":"%s","sglang_python":"%s","sglang_model_path":"%s","sglang_tp_size":1,"sglang_server_context_length":4096,"sglang_server_mem_fraction_static":0.8,"sglang_server_max_running_requests":32,"sglang_server_cuda_graph_max_bs":32,"sglang_server_expected_version":"","sglang_server_ready_timeout":240,"bench_concurrency":[1,4,16],"bench_warmup_s":5,"bench_window_s":15,"bench_input_len":128,"bench_output_len":128,"gpu_backend":"nvml","gpu_device_glob":"/dev/nvidia*"}' \
        "$RESULTS" "$NODE" "$PYTHON" "$MODEL")
    (cd "$ROOT" && timeout 330 "$ANSIBLE_PLAYBOOK" bench.yml -e "$BENCH") > "$WORK/bench.log" 2>&1
    B_RC=$?
    (cd "$ROOT" && timeout 60 "$ANSIBLE_PLAYBOOK" playbooks/teardown.yml -e "$EXTRA") >> "$WORK/bench.log" 2>&1
    FIGS=$("$PYTHON" - "$RESULTS" <<'PY' 2>/dev/null
import glob, json, sys
files = glob.glob(sys.argv[1] + "/gpu-check/*/baseline.json")
doc = json.load(open(files[0])) if files else {"levels": []}
print(" ".join(f"C={lv['concurrency']}:{lv.get('output_tok_per_s') or 0:.1f}" for lv in doc["levels"]))
PY
)
    if [ "$B_RC" -eq 0 ] && [ -n "$FIGS" ] && idle_all; then
        PART2="bench SGLang $SGLANG $(basename "$MODEL") tok/s $FIGS, GPUs idle after"
    else
        PART2="bench FAILED (rc $B_RC; $(grep -m1 -A2 'fatal:' "$WORK/bench.log" | tr '\n' ' ' | cut -c1-200)) see $WORK/bench.log"
        STATUS=1
    fi
fi
summary "$STATUS" "$PART1 | $PART2 | machine: $COUNT x $MACHINE"

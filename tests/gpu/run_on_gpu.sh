#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU and no network (run it whenever one is at
# hand, and record its summary line in docs/benchmarks.md with the machine it came from):
#
#   1. teardown: a process (same user, its own session) holds GPU memory through libcuda
#      (cuMemAlloc via ctypes: no torch needed); playbooks/teardown.yml runs with the NVML backend
#      and this process recorded as the server; then every GPU must read idle, the holder must be
#      gone and nothing else may have died (a bystander process, every other GPU holder seen before).
#   1b. telemetry: a real process loads GPU N (libcuda, memory written over and over for 12 s); the
#      collection's telemetry reader (NVML, nvidia-ml-py) finds that GPU from the process NVML lists on
#      it and samples it; the energy counter over the window must match the power samples integrated
#      (tests/gpu/telemetry_check.py; a line "telemetry: ok/FAILED ..." in the summary).
#   2. engines: for every engine installed (SGLang: --sglang-python, else .venv-sglang, else
#      python3; vLLM: --vllm-python, else .venv-vllm, else python3; each needs torch), a tiny model
#      made on the spot (tests/vllm/make_models.py, no hub), then bench.yml for each speculative
#      mode it can run on that model (SGLang: ngram, standalone; vLLM: ngram, draft) at C = 1, 4:
#      the post-launch check passed, accept length > 1 with its source, /flush_cache answered
#      (SGLang), GPUs idle after; where the client reads NVML (nvidia-ml-py), each window's energy counter
#      against its power samples integrated. EAGLE/EAGLE-3/MTP need trained heads: always skipped, and said so.
#
# Prints what it skipped and why, then one summary line (last line, starting "run_on_gpu:"); exits
# 0 when every part that ran passed, 1 when one failed, 2 when it cannot run here (no nvidia-smi,
# no GPU, bad arguments). One command, under 10 minutes (part 1 within 2, part 2 within the rest).
# --plan prints what would run (engines found, modes, skips) and starts nothing.
#
#   tests/gpu/run_on_gpu.sh [--gpu 0] [--gib 4] [--sglang-python PATH] [--vllm-python PATH]
#                           [--skip-bench] [--plan] [--ansible-playbook PATH]
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GPU=0
GIB=4
IDLE_MIB=64
SGLANG_PY=""
VLLM_PY=""
SKIP_BENCH=0
PLAN=0
ANSIBLE_PLAYBOOK=""
BUDGET_S=570          # the whole script, under 10 minutes
PART1_CAP_S=120
START_S=$(date +%s)

usage() {
    sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

summary() {  # summary STATUS TEXT: the one line, then exit
    echo "run_on_gpu: $2"
    exit "$1"
}

need_value() {  # need_value FLAG COUNT: a flag given without its value
    [ "$2" -ge 2 ] || summary 2 "NOT RUN: $1 needs a value (see --help)"
}

left_s() {  # seconds left of BUDGET_S
    echo $((BUDGET_S - ($(date +%s) - START_S)))
}

while [ $# -gt 0 ]; do
    case "$1" in
        --gpu|--gib|--sglang-python|--vllm-python|--ansible-playbook) need_value "$1" $# ;;
    esac
    case "$1" in
        --gpu) GPU=${2:-}; shift 2 ;;
        --gib) GIB=${2:-}; shift 2 ;;
        --sglang-python) SGLANG_PY=${2:-}; shift 2 ;;
        --vllm-python) VLLM_PY=${2:-}; shift 2 ;;
        --ansible-playbook) ANSIBLE_PLAYBOOK=${2:-}; shift 2 ;;
        --skip-bench) SKIP_BENCH=1; shift ;;
        --plan) PLAN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2
           summary 2 "NOT RUN: unknown argument $1; use --gpu N --gib G --sglang-python PATH --vllm-python PATH --skip-bench --plan" ;;
    esac
done
case "$GPU" in ''|*[!0-9]*) summary 2 "NOT RUN: --gpu must be a GPU index (0, 1, ...), got '$GPU'" ;; esac
case "$GIB" in ''|*[!0-9.]*) summary 2 "NOT RUN: --gib must be a number of GiB, got '$GIB'" ;; esac

# ------------------------------------------------------------------ which engines are here
SKIPPED=""
skip() {  # skip TEXT: one thing not run, said plainly now and in the summary
    echo "skipped: $1"
    SKIPPED="$SKIPPED; $1"
}

skipped_text() {  # what was skipped, or "nothing"
    if [ -n "$SKIPPED" ]; then echo "${SKIPPED#; }"; else echo nothing; fi
}

probe_engine() {  # probe_engine PACKAGE PYTHON...: "PYTHON VERSION" of the first with it and torch
    local pkg=$1 py out
    shift
    for py in "$@"; do
        if [ -z "$py" ] || [ ! -x "$py" ]; then continue; fi
        out=$("$py" -c "
import importlib.metadata as m, importlib.util as u, sys
if u.find_spec('$pkg') is None:
    sys.exit(1)
try:
    v = m.version('$pkg')
except Exception:
    v = m.version('$pkg-cpu')
try:
    t = m.version('torch')
except Exception:
    t = None
print(v, 'no-torch' if t is None else ('cpu-torch' if t.endswith('+cpu') else 'torch'))
" 2>/dev/null) || continue
        echo "$py $out"
        return 0
    done
    return 1
}

ENGINES=""
if [ "$SKIP_BENCH" -eq 1 ]; then
    skip "part 2, every engine (--skip-bench)"
else
    for engine in sglang vllm; do
        if [ "$engine" = sglang ]; then given=$SGLANG_PY; venv="$ROOT/.venv-sglang/bin/python"
        else given=$VLLM_PY; venv="$ROOT/.venv-vllm/bin/python"; fi
        if [ -n "$given" ]; then candidates=("$given"); else candidates=("$venv" "$(command -v python3 || true)"); fi
        if ! found=$(probe_engine "$engine" "${candidates[@]}"); then
            skip "$engine: not installed for ${candidates[*]} (pass --$engine-python)"
            continue
        fi
        read -r py version torch <<< "$found"
        if [ "$torch" = no-torch ]; then
            skip "$engine $version at $py: no torch there, so it cannot serve (a parser-only venv?)"
            continue
        fi
        if [ "$torch" = cpu-torch ]; then
            skip "$engine $version at $py: its torch is a CPU build, it cannot serve on the GPU"
            continue
        fi
        ENGINES="$ENGINES $engine|$py|$version"
    done
fi
modes_of() {  # the speculative modes a tiny model made on the spot can serve
    if [ "$1" = sglang ]; then echo "ngram standalone"; else echo "ngram draft"; fi
}
for entry in $ENGINES; do
    engine=${entry%%|*}
    if [ "$engine" = sglang ]; then
        skip "sglang eagle3, eagle, nextn, eagle3-adaptive: they need a trained EAGLE/MTP head, not a tiny model"
    else
        skip "vllm eagle3, mtp: they need a trained EAGLE/MTP head, not a tiny model"
    fi
done

if [ "$PLAN" -eq 1 ]; then
    echo "plan: part 1 teardown on GPU $GPU ($GIB GiB through libcuda cuMemAlloc)"
    echo "plan: part 1b telemetry on GPU $GPU (a libcuda process loads it 12 s; NVML energy counter against integrated power)"
    for entry in $ENGINES; do
        IFS="|" read -r engine py version <<< "$entry"
        echo "plan: part 2 $engine $version ($py): modes $(modes_of "$engine")"
    done
    names=""
    for entry in $ENGINES; do IFS="|" read -r engine _ version <<< "$entry"; names="$names $engine $version,"; done
    names=${names%,}
    summary 0 "PLAN ONLY (nothing started): engines:${names:- none} | skipped: $(skipped_text)"
fi

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

if [ -z "$ANSIBLE_PLAYBOOK" ]; then
    if [ -x "$ROOT/.venv/bin/ansible-playbook" ]; then ANSIBLE_PLAYBOOK="$ROOT/.venv/bin/ansible-playbook"
    else ANSIBLE_PLAYBOOK=$(command -v ansible-playbook || true); fi
fi
[ -n "$ANSIBLE_PLAYBOOK" ] || summary 2 "NOT RUN: ansible-playbook not found: build the venv (see README) or pass --ansible-playbook"
PY3=$(command -v python3) || summary 2 "NOT RUN: python3 not found"

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
# The holder: the driver API through ctypes, the primary context of GPU $GPU (nvidia-smi's order:
# CUDA_DEVICE_ORDER=PCI_BUS_ID), GIB GiB allocated and written; prints its pid, or "ERR <why>".
CUDA_DEVICE_ORDER=PCI_BUS_ID setsid "$PY3" -c '
import ctypes, os, sys, time
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print("ERR libcuda.so.1 cannot be loaded (%s): is the NVIDIA driver installed here?" % exc, flush=True)
    sys.exit(3)
def ok(rc, what):
    if rc:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        print("ERR %s failed: %s (%d)" % (what, (name.value or b"?").decode(), rc), flush=True)
        sys.exit(3)
ok(cuda.cuInit(0), "cuInit")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok(cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])), "cuDeviceGet(%s)" % sys.argv[1])
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
size = ctypes.c_size_t(int(float(sys.argv[2]) * (1 << 30)))
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), size), "cuMemAlloc(%s GiB)" % sys.argv[2])
ok(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), size), "cuMemsetD8")
ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print(os.getpid(), flush=True)
time.sleep(3600)
' "$GPU" "$GIB" > "$WORK/holder.out" 2> "$WORK/holder.err" &
HOLDER_PID=$!
for _ in $(seq 1 120); do
    HOLDER=$(head -n1 "$WORK/holder.out" 2>/dev/null)
    [ -n "$HOLDER" ] && break
    kill -0 "$HOLDER_PID" 2>/dev/null || break  # it exited without a word: its stderr says why
    sleep 0.5
done
case "$HOLDER" in
    ERR*) summary 1 "FAILED: part 1 could not hold GPU memory through libcuda: ${HOLDER#ERR }" ;;
    ''|*[!0-9]*) summary 1 "FAILED: the libcuda holder did not allocate $GIB GiB on GPU $GPU: $(tail -n 3 "$WORK/holder.err" | tr '\n' ' ')" ;;
esac
USED=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$GPU" | tr -d ' ')
START=$(awk '{print $22}' "/proc/$HOLDER/stat")
EXTRA=$(printf '{"engine":"sglang","gpu_backend":"nvml","gpu_device_glob":"/dev/nvidia*","gpu_idle_mib":%s,"specbench_node_dir":"%s","specbench_server":{"pid":%s,"pgid":%s,"starttime":%s},"gpu_term_timeout_s":10}' \
    "$IDLE_MIB" "$NODE" "$HOLDER" "$HOLDER" "$START")
(cd "$ROOT" && timeout "$PART1_CAP_S" "$ANSIBLE_PLAYBOOK" playbooks/teardown.yml -e "$EXTRA") > "$WORK/teardown.log" 2>&1
TD_RC=$?
T1=$(date +%s)
PROBLEMS=""
[ "$TD_RC" -eq 0 ] || PROBLEMS="$PROBLEMS playbook rc $TD_RC ($(grep -m1 -A2 'fatal:' "$WORK/teardown.log" | tr '\n' ' ' | cut -c1-300));"
idle_all || PROBLEMS="$PROBLEMS a GPU is not idle after it ($(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | tr '\n' ' '));"
kill -0 "$HOLDER" 2>/dev/null && PROBLEMS="$PROBLEMS the libcuda holder $HOLDER survived;"
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

# ------------------------------------------------------------------ part 1b: telemetry from a real process
TELEMETRY_PY=""
for py in "$ROOT/.venv/bin/python" "$PY3"; do
    if [ -x "$py" ] && "$py" -c "import pynvml" 2>/dev/null; then TELEMETRY_PY=$py; break; fi
done
if [ -z "$TELEMETRY_PY" ]; then
    PART1B="telemetry NOT RUN: nvidia-ml-py (pynvml) is not installed for $ROOT/.venv/bin/python or $PY3"
    skip "part 1b, telemetry: nvidia-ml-py not installed (pip install nvidia-ml-py)"
else
    timeout 60 "$TELEMETRY_PY" "$ROOT/tests/gpu/telemetry_check.py" --gpu "$GPU" --seconds 12 \
        > "$WORK/telemetry.out" 2> "$WORK/telemetry.err"
    TEL_RC=$?
    PART1B=$(tail -n 1 "$WORK/telemetry.out")
    [ -n "$PART1B" ] || PART1B="telemetry FAILED: no answer (rc $TEL_RC; $(tail -n 2 "$WORK/telemetry.err" | tr '\n' ' '))"
    [ "$TEL_RC" -eq 0 ] || [ "$TEL_RC" -eq 2 ] || STATUS=1  # 2: NOT RUN (NVML unreadable), said in the line
fi
idle_all || { PART1B="$PART1B; a GPU is not idle after it"; STATUS=1; }

# ------------------------------------------------------------------ part 2: every engine's modes
MODELS="$WORK/models"
PART2=""
bench_vars() {  # bench_vars ENGINE MODE PYTHON: bench.yml's extra vars as JSON
    local common
    common=$(printf '"mode":"%s","engine":"%s","run_id":"gpu-check","results_dir":"%s","specbench_node_dir":"%s","bench_concurrency":[1,4],"bench_warmup_s":3,"bench_window_s":8,"bench_input_len":64,"bench_output_len":64,"gpu_backend":"nvml","gpu_device_glob":"/dev/nvidia*"' \
        "$2" "$1" "$WORK/results" "$NODE")
    if [ "$1" = sglang ]; then
        printf '{%s,"bench_api":"chat","sglang_python":"%s","sglang_model_path":"%s/tiny","sglang_server_standalone_draft_model_path":"%s/tiny-draft","sglang_server_context_length":1024,"sglang_server_mem_fraction_static":0.5,"sglang_server_max_running_requests":16,"sglang_server_cuda_graph_max_bs":16,"sglang_server_expected_version":"","sglang_server_ready_timeout":240}' \
            "$common" "$3" "$MODELS" "$MODELS"
    else
        printf '{%s,"bench_api":"completions","vllm_python":"%s","vllm_model_path":"%s/tiny","vllm_draft_model_path":"%s/tiny-draft","vllm_server_served_model_name":"tiny","vllm_server_max_model_len":1024,"vllm_server_max_num_seqs":16,"vllm_server_gpu_memory_utilization":0.5,"vllm_server_environment":{"HF_HUB_OFFLINE":"1","TRANSFORMERS_OFFLINE":"1"},"vllm_server_ready_timeout":240}' \
            "$common" "$3" "$MODELS" "$MODELS"
    fi
}
if [ -n "$ENGINES" ]; then
    first=${ENGINES# }
    first=${first%% *}
    IFS="|" read -r _ MAKER _ <<< "$first"
    if ! timeout 120 "$MAKER" "$ROOT/tests/vllm/make_models.py" "$MODELS" > "$WORK/models.log" 2>&1; then
        PART2="engines FAILED: the tiny models could not be made ($(tail -n 2 "$WORK/models.log" | tr '\n' ' ')) see $WORK/models.log"
        STATUS=1
        ENGINES=""
    fi
fi
for entry in $ENGINES; do
    IFS="|" read -r engine py version <<< "$entry"
    for mode in $(modes_of "$engine"); do
        budget=$(( $(left_s) - 20 ))
        if [ "$budget" -lt 90 ]; then
            skip "$engine $mode: the 10-minute budget is spent (${budget}s left)"
            continue
        fi
        [ "$budget" -gt 240 ] && budget=240
        (cd "$ROOT" && timeout "$budget" "$ANSIBLE_PLAYBOOK" bench.yml -e "$(bench_vars "$engine" "$mode" "$py")") \
            > "$WORK/bench-$engine-$mode.log" 2>&1
        rc=$?
        (cd "$ROOT" && timeout 60 "$ANSIBLE_PLAYBOOK" playbooks/teardown.yml -e "$EXTRA") >> "$WORK/bench-$engine-$mode.log" 2>&1
        # What the results say: the post-launch check, accept length and its source, the flush.
        verdict=$("$PY3" - "$WORK/results" "$mode" "$engine" "$ROOT/tests/gpu" <<'PY' 2>&1
import glob, json, sys
folder, mode, engine = sys.argv[1:4]
sys.path.insert(0, sys.argv[4])
from telemetry_check import tolerance_j
files = glob.glob(f"{folder}/gpu-check/*/{mode}.json")
if not files:
    print("FAILED no results file")
    sys.exit()
doc = json.load(open(files[0]))
bad = []
check = (doc.get("server") or {}).get("post_launch_check") or {}
if not check.get("ok"):
    bad.append(f"post-launch check {check.get('mismatches') or 'missing'}")
if doc.get("status") != "complete":
    bad.append(f"status {doc.get('status')}: {doc.get('error')}")
accepts, energies, notes = [], [], set()
for level in doc.get("levels") or []:
    value = level.get("accept_length")
    if not value or value <= 1 or not level.get("accept_length_source"):
        bad.append(f"C={level.get('concurrency')} accept length {value} ({level.get('accept_length_source')})")
    if engine == "sglang" and level.get("cache_flushed") is not True:
        bad.append(f"C={level.get('concurrency')} /flush_cache not answered 200")
    accepts.append(f"{value or 0:.2f}")
    # GPU telemetry from NVML during the window: the energy counter against the power samples integrated,
    # within NVML's stated power accuracy (+-5 W) over the window plus, at each edge, what the 1-s averaged
    # power reading can lag by (telemetry_check.tolerance_j, as part 1b holds it).
    for window in level.get("gpu_telemetry") or []:
        for gpu in (window or {}).get("gpus") or []:
            if gpu.get("energy_source") != "counter" or gpu.get("power_integrated_j") is None:
                continue
            tol = tolerance_j(gpu, window["window_s"])
            diff = gpu["energy_j"] - gpu["power_integrated_j"]
            energies.append(f"{gpu['energy_j']:.0f}J/{gpu['power_integrated_j']:.0f}J")
            if abs(diff) > tol:
                bad.append(f"C={level.get('concurrency')} GPU {gpu['index']} energy counter {gpu['energy_j']:.1f} J vs "
                           f"integrated power {gpu['power_integrated_j']:.1f} J (tolerance {tol:.1f} J)")
    if not level.get("gpu_telemetry"):
        notes.add(level.get("energy_note") or "no GPU telemetry")
energy = (f", energy counter/integrated {' '.join(energies)}" if energies
          else f", energy not checked: {'; '.join(sorted(notes)) or 'no counter'}")
print(("FAILED " + "; ".join(bad)) if bad else
      f"ok (check passed, accept {'/'.join(accepts)}{', flushed' if engine == 'sglang' else ''}{energy})")
PY
)
        if [ "$rc" -eq 0 ] && [ "${verdict#ok}" != "$verdict" ] && idle_all; then
            PART2="$PART2 $engine $version $mode $verdict;"
        else
            PART2="$PART2 $engine $mode FAILED (rc $rc; ${verdict#FAILED }; idle after: $(idle_all && echo yes || echo no)) see $WORK/bench-$engine-$mode.log;"
            STATUS=1
        fi
    done
done
[ -n "$PART2" ] || PART2="engines: none run"
summary "$STATUS" "$PART1 | $PART1B |${PART2%;} | skipped: $(skipped_text) | machine: $COUNT x $MACHINE | $(( $(date +%s) - START_S )) s"

#!/usr/bin/env bash
# Opt-in check: drive a real SGLang 0.5.23 on this machine's CPU end to end (issue 40). SGLang's CPU
# kernel is not on PyPI, neither as source nor as wheel, and upstream code stays out of this
# repository: bring SGLang's source tree at the commit of the installed 0.5.23 (its repository, e.g.
# through the search tool's fetch) and give its path. The script does the rest:
#
#   1. checks: the source holds the CPU kernel (python/sglang/kernels/aot/csrc/cpu/, formerly
#      sgl-kernel/csrc/cpu/) and matches 0.5.23 (extend_attention_cpu takes 0.5.23's is_causal: an
#      older source builds a kernel the installed Python calls with the wrong arguments); the CPU has
#      AVX-512 (AMX is needed neither to build nor to run); libnuma's header; python3.11.
#   2. venv (--venv, default .venv-sglang-cpu): torch 2.13.0 (the CPU wheel on this machine's disk),
#      sglang 0.5.23 with --no-deps, then its own dependency list less the CUDA-only packages
#      (CUDA_ONLY below); no torchvision (PyPI's links libtorch_cuda and breaks SGLang's import).
#   3. kernel: cmake (pip's, >= 3.26) and make -j2 under nice, into a cache keyed by the sha256 of
#      the kernel source and the torch and Python versions (--cache, default
#      ~/.cache/specbench/sglang-cpu-kernel/HASH): about 5.5 minutes on 2 cores the first time, none
#      after. The venv gets a package sgl_kernel that loads the built library into torch.ops.
#   4. the tiny models of tests/vllm/make_models.py (a 4-layer Llama and a noisy copy as draft).
#   5. bench.yml through the real playbooks (engine=sglang, SGLANG_USE_CPU_ENGINE=1, bf16, the
#      flags of issue 40) for each mode a tiny model can serve on CPU: baseline, ngram, standalone
#      (the noisy copy as draft); each must pass the post-launch check and finish complete, a
#      speculative mode with an accept length above 1 from the chat API's per-request
#      sglext.spec_tokens_details, and the teardown must leave none of the server's session while a
#      bystander process lives. SGLang's launcher runs through launch_cpu.py beside this script,
#      which keeps --attention-backend intel_amx on a CPU without AMX (SGLang otherwise swaps in
#      torch_native, which crashes on every speculative verify).
#
# Prints what it skipped and why, then one summary line (last line, starting "run_real_sglang:");
# exits 0 when every part that ran passed, 1 when one failed, 2 when it cannot run here (no source,
# no AVX-512, bad arguments). --plan prints what would run and what is skipped, and starts nothing.
#
#   tests/sglang_cpu/run_real_sglang.sh SRC [--plan] [--venv PATH] [--cache DIR] [--modes "baseline ngram"]
#                                           [--skip-bench] [--ansible-playbook PATH]
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/sglang_cpu"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
SRC=""
PLAN=0
SKIP_BENCH=0
VENV="$ROOT/.venv-sglang-cpu"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/specbench/sglang-cpu-kernel"
MODES="baseline ngram standalone"
ANSIBLE_PLAYBOOK=""
START_S=$(date +%s)
# Requirements of sglang 0.5.23 that need CUDA (or pull a CUDA torch): left out of the CPU venv.
CUDA_ONLY='^(nvidia-|cuda-|flashinfer|sgl-kernel|sglang-kernel|torch$|torchvision|torchaudio|torchao|triton|flash-attn|flash_attn|deep-gemm|deep_gemm|nixl|mooncake|cutlass|quack|apache-tvm-ffi|xformers|decord|cupy)'

usage() {
    sed -n '2,35p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

summary() {  # summary STATUS TEXT: the one line, then exit
    echo "run_real_sglang: $2"
    exit "$1"
}

need_value() {  # need_value FLAG COUNT: a flag given without its value
    [ "$2" -ge 2 ] || summary 2 "NOT RUN: $1 needs a value (see --help)"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --venv|--cache|--modes|--ansible-playbook) need_value "$1" $# ;;
    esac
    case "$1" in
        --venv) VENV=${2:-}; shift 2 ;;
        --cache) CACHE=${2:-}; shift 2 ;;
        --modes) MODES=${2:-}; shift 2 ;;
        --ansible-playbook) ANSIBLE_PLAYBOOK=${2:-}; shift 2 ;;
        --skip-bench) SKIP_BENCH=1; shift ;;
        --plan) PLAN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "unknown argument: $1 (see --help)" >&2
            summary 2 "NOT RUN: unknown argument $1; use SRC --plan --venv PATH --cache DIR --modes LIST --skip-bench" ;;
        *) [ -z "$SRC" ] || summary 2 "NOT RUN: one source tree only, got '$SRC' and '$1'"
           SRC=$1; shift ;;
    esac
done

SKIPPED=""
skip() {  # skip TEXT: one thing not run, said plainly now and in the summary
    echo "skipped: $1"
    SKIPPED="$SKIPPED; $1"
}
skipped_text() {
    if [ -n "$SKIPPED" ]; then echo "${SKIPPED#; }"; else echo nothing; fi
}

# ------------------------------------------------------------------ 1. what is here
[ -n "$SRC" ] || summary 2 "NOT RUN: give the path of SGLang's source tree at the commit of $SGLANG_VERSION (its kernel source is not on PyPI; see --help)"
[ -d "$SRC" ] || summary 2 "NOT RUN: the source tree $SRC is not a folder"
SRC=$(cd "$SRC" && pwd)
KDIR=""
for rel in python/sglang/kernels/aot/csrc/cpu sgl-kernel/csrc/cpu; do
    if [ -f "$SRC/$rel/CMakeLists.txt" ]; then KDIR="$SRC/$rel"; break; fi
done
[ -n "$KDIR" ] || summary 2 "NOT RUN: $SRC holds no CPU kernel source (python/sglang/kernels/aot/csrc/cpu/CMakeLists.txt or sgl-kernel/csrc/cpu/CMakeLists.txt): is it SGLang's repository?"
EXT="$KDIR/torch_extension_cpu.cpp"
if [ ! -f "$EXT" ] || ! grep -A40 'void extend_attention_cpu(' "$EXT" | grep -q 'is_causal'; then
    summary 2 "NOT RUN: the kernel source in $KDIR is not $SGLANG_VERSION's: its extend_attention_cpu lacks is_causal, which the installed sglang $SGLANG_VERSION passes (sglang/srt/layers/attention/intel_amx_backend.py); check out the commit of $SGLANG_VERSION"
fi
# What this machine lacks: each stops a run (exit 2) and is listed by --plan.
MISSING=""
grep -qw avx512f /proc/cpuinfo 2>/dev/null || MISSING="$MISSING; this CPU has no AVX-512 (avx512f), which SGLang's CPU kernel needs"
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then CPU_NOTE="AVX-512 and AMX"; else CPU_NOTE="no AMX (intel_amx kept by launch_cpu.py)"; fi
[ -f "${SPECBENCH_NUMA_HEADER:-/usr/include/numa.h}" ] || MISSING="$MISSING; libnuma's header is missing (/usr/include/numa.h): apt-get install libnuma-dev"
PYTHON=$(command -v python3.11 || true)
[ -n "$PYTHON" ] || MISSING="$MISSING; python3.11 not found (SGLang $SGLANG_VERSION's venv is built with it)"
PYTHON=${PYTHON:-python3}
# The cache key: every file of the kernel source, the torch and the Python it is built against.
HASH=$( (cd "$KDIR" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "torch $TORCH_VERSION";
         "$PYTHON" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
KCACHE="$CACHE/$HASH"

for mode in $MODES; do
    case "$mode" in
        baseline|ngram|standalone) ;;
        *) summary 2 "NOT RUN: mode $mode cannot run on a tiny model here: use baseline, ngram, standalone" ;;
    esac
done
skip "eagle, eagle3, nextn, eagle3-adaptive: they need an EAGLE/EAGLE-3/MTP head; no head is made here yet (a random head would only show the server starts, at acceptance 1.0)"
skip "compare.yml, the NGRAM crossover, serve.yml and serve_state=absent: not in this script yet (issue 40, item 2)"
[ "$SKIP_BENCH" -eq 0 ] || skip "part 5, every mode (--skip-bench)"

VENV_STATE="to build"
if [ -x "$VENV/bin/python" ] && [ "$(SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" = "$SGLANG_VERSION" ]; then
    VENV_STATE="present"
fi
if [ -f "$KCACHE/sgl_kernel/__init__.py" ]; then KERNEL_STATE="cached"; else KERNEL_STATE="to build (~5.5 min on 2 cores)"; fi

if [ "$PLAN" -eq 1 ]; then
    [ -z "$MISSING" ] || echo "plan: cannot run here: ${MISSING#; }"
    echo "plan: source $SRC, kernel $KDIR (sha256 key $HASH)"
    echo "plan: CPU $CPU_NOTE, $(nproc) cores"
    echo "plan: venv $VENV: $VENV_STATE (torch $TORCH_VERSION CPU wheel, sglang $SGLANG_VERSION --no-deps, its dependencies less CUDA-only ones)"
    echo "plan: kernel $KCACHE: $KERNEL_STATE"
    [ "$SKIP_BENCH" -eq 1 ] || echo "plan: bench.yml engine=sglang on the tiny models, modes: $MODES (chat API, C=1,4)"
    summary 0 "PLAN ONLY (nothing started)${MISSING:+, CANNOT RUN HERE: ${MISSING#; }}: venv $VENV_STATE, kernel $KERNEL_STATE, modes: $([ "$SKIP_BENCH" -eq 1 ] && echo none || echo "$MODES") | skipped: $(skipped_text)"
fi

[ -z "$MISSING" ] || summary 2 "NOT RUN: ${MISSING#; } (nothing was started)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/specbench-sglang-cpu-XXXXXX")
echo "run_real_sglang: work folder $WORK"

# ------------------------------------------------------------------ 2. the venv
if [ "$VENV_STATE" != present ]; then
    T0=$(date +%s)
    {
        "$PYTHON" -m venv "$VENV" &&
        "$ROOT/tests/venv_install.sh" "$VENV/bin/python" "torch==$TORCH_VERSION" &&
        "$ROOT/tests/venv_install.sh" "$VENV/bin/python" --no-deps "sglang==$SGLANG_VERSION" &&
        deps=$("$VENV/bin/python" - "$CUDA_ONLY" <<'PY'
import importlib.metadata as m, re, sys
skip = re.compile(sys.argv[1], re.I)
out = []
for req in m.requires("sglang") or []:
    if "extra ==" in req:
        continue
    spec = req.split(";")[0].strip()
    name = re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0]
    if not skip.match(name.lower()):
        out.append(spec)
print("\n".join(out))
PY
) &&
        echo "$deps" > "$WORK/deps.txt" &&
        "$ROOT/tests/venv_install.sh" "$VENV/bin/python" -r "$WORK/deps.txt" "torch==$TORCH_VERSION" &&
        "$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio 2>&1 | grep -v 'not installed'
    } > "$WORK/venv.log" 2>&1 || true
    version=$(SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)
    [ "$version" = "$SGLANG_VERSION" ] || summary 1 "FAILED: the venv $VENV has no sglang $SGLANG_VERSION after the install ($(tail -n 2 "$WORK/venv.log" | tr '\n' ' ')) see $WORK/venv.log"
    echo "run_real_sglang: venv built in $(( $(date +%s) - T0 )) s"
fi

# ------------------------------------------------------------------ 3. the kernel, cached by its source
if [ ! -f "$KCACHE/sgl_kernel/__init__.py" ]; then
    T0=$(date +%s)
    "$ROOT/tests/venv_install.sh" "$VENV/bin/python" "cmake>=3.26" > "$WORK/cmake.log" 2>&1
    BUILD="$WORK/kernel-build"
    PREFIX=$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    if ! (nice -n 10 "$VENV/bin/cmake" -S "$KDIR" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_PREFIX_PATH="$PREFIX" -DPython_EXECUTABLE="$VENV/bin/python" &&
          nice -n 10 make -C "$BUILD" -j2) > "$WORK/kernel.log" 2>&1; then
        summary 1 "FAILED: the CPU kernel did not build ($(grep -m1 -i 'error' "$WORK/kernel.log" | cut -c1-200)) see $WORK/kernel.log"
    fi
    LIB=$(find "$BUILD" -name 'common_ops*.so' -print -quit)
    [ -n "$LIB" ] || LIB=$(find "$BUILD" -name '*.so' -size +1M -print -quit)
    [ -n "$LIB" ] || summary 1 "FAILED: the kernel build made no library (see $WORK/kernel.log)"
    mkdir -p "$KCACHE/sgl_kernel.tmp"
    cp "$LIB" "$KCACHE/sgl_kernel.tmp/"
    cp "$HERE/sgl_kernel_loader.py" "$KCACHE/sgl_kernel.tmp/__init__.py"
    rm -rf "$KCACHE/sgl_kernel" && mv "$KCACHE/sgl_kernel.tmp" "$KCACHE/sgl_kernel"
    echo "run_real_sglang: kernel built in $(( $(date +%s) - T0 )) s into $KCACHE"
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$KCACHE" > "$SITE/specbench-sglang-cpu-kernel.pth"
if ! SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import sgl_kernel, torch; assert hasattr(torch.ops.sgl_kernel, "extend_attention_cpu")' > "$WORK/kernel-import.log" 2>&1; then
    summary 1 "FAILED: the cached kernel does not load into torch.ops.sgl_kernel ($(tail -n 1 "$WORK/kernel-import.log")) see $WORK/kernel-import.log"
fi

# ------------------------------------------------------------------ 4. the tiny models
MODELS="$WORK/models"
if ! HF_HUB_OFFLINE=1 timeout 600 "$VENV/bin/python" "$ROOT/tests/vllm/make_models.py" "$MODELS" > "$WORK/models.log" 2>&1; then
    summary 1 "FAILED: the tiny models could not be made ($(tail -n 2 "$WORK/models.log" | tr '\n' ' ')) see $WORK/models.log"
fi

# ------------------------------------------------------------------ 5. the modes, through the playbooks
[ "$SKIP_BENCH" -eq 0 ] || summary 0 "venv and kernel ready (key $HASH), models made; bench skipped | skipped: $(skipped_text)"
if [ -z "$ANSIBLE_PLAYBOOK" ]; then
    if [ -x "$ROOT/.venv/bin/ansible-playbook" ]; then ANSIBLE_PLAYBOOK="$ROOT/.venv/bin/ansible-playbook"
    else ANSIBLE_PLAYBOOK=$(command -v ansible-playbook || true); fi
fi
[ -n "$ANSIBLE_PLAYBOOK" ] || summary 2 "NOT RUN: ansible-playbook not found: build the venv (see README) or pass --ansible-playbook"
NODE="$WORK/node"
mkdir -p "$NODE/emulated-dev"
PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The role runs "PYTHON -m sglang.launch_server ...": this interpreter runs that through launch_cpu.py.
LAUNCHER="$WORK/python-sglang-cpu"
# shellcheck disable=SC2016  # the "$@" and ${1:-} are the wrapper's own, written as they are
printf '#!/usr/bin/env bash\nif [ "${1:-}" = -m ] && [ "${2:-}" = sglang.launch_server ]; then shift 2; exec "%s" "%s" "$@"; fi\nexec "%s" "$@"\n' \
    "$VENV/bin/python" "$HERE/launch_cpu.py" "$VENV/bin/python" > "$LAUNCHER"
chmod +x "$LAUNCHER"
sleep 86400 &
BYSTANDER=$!
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { kill "$BYSTANDER" 2>/dev/null || true; }
trap cleanup EXIT

bench_vars() {  # bench_vars MODE: bench.yml's extra vars as JSON (cpu_vars.py)
    "$VENV/bin/python" "$HERE/cpu_vars.py" "$1" "$WORK" "$MODELS" "$PORT" "$LAUNCHER"
}
STATUS=0
PARTS=""
for mode in $MODES; do
    T0=$(date +%s)
    (cd "$ROOT" && timeout 1500 "$ANSIBLE_PLAYBOOK" bench.yml -e "$(bench_vars "$mode")") > "$WORK/bench-$mode.log" 2>&1
    rc=$?
    verdict=$("$VENV/bin/python" "$HERE/check_results.py" "$WORK/results" "$mode" 2>&1)
    # The teardown left nothing of the server's session, and the bystander lives.
    left=$("$VENV/bin/python" - "$WORK/results" "$mode" <<'PY' 2>&1
import glob, json, os, sys
files = glob.glob(f"{sys.argv[1]}/cpu-check/*/{sys.argv[2]}.json")
sid = (json.load(open(files[0])).get("server") or {}).get("pgid") if files else None
alive = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if sid and os.getsid(int(pid)) == sid:
            alive.append(pid)
    except OSError:
        pass
print(" ".join(alive))
PY
)
    kill -0 "$BYSTANDER" 2>/dev/null || left="$left (the bystander $BYSTANDER died)"
    if [ "$rc" -eq 0 ] && [ "${verdict#ok}" != "$verdict" ] && [ -z "$left" ]; then
        PARTS="$PARTS $mode $verdict, torn down clean, $(( $(date +%s) - T0 )) s;"
    else
        PARTS="$PARTS $mode FAILED (rc $rc; ${verdict#FAILED }; left after teardown: ${left:-nothing}) see $WORK/bench-$mode.log;"
        STATUS=1
    fi
done
summary "$STATUS" "sglang $SGLANG_VERSION on CPU ($CPU_NOTE, $(nproc) cores), kernel $HASH |${PARTS%;} | skipped: $(skipped_text) | $(date -u +%Y-%m-%d) | $(( $(date +%s) - START_S )) s"

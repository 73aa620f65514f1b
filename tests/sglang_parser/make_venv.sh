#!/usr/bin/env bash
# Build a venv holding SGLang 0.5.23's real argument parser (no GPU, no CUDA), for
# tests/sglang_parser. Per ../shared/docs/sglang.md: torch's CPU wheel, sglang without its
# dependencies, then the few packages that `sglang.srt.server_args` imports.
#
#   tests/sglang_parser/make_venv.sh            # creates .venv-sglang at the repo root
#   SPECBENCH_SGLANG_VENV=/path tests/sglang_parser/make_venv.sh
#
# Idempotent: a venv whose parser already builds is left as it is. About 2.3 GB; a few
# minutes the first time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SPECBENCH_SGLANG_VENV:-$ROOT/.venv-sglang}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"

probe() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import argparse, importlib.metadata as md
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
print(md.version("sglang"))
PY
}

if [ -x "$VENV/bin/python" ] && [ "$(probe || true)" = "$SGLANG_VERSION" ]; then
    echo "make_venv: $VENV already has sglang $SGLANG_VERSION's parser"
    exit 0
fi

if [ -z "$PYTHON" ] || ! command -v "$PYTHON" >/dev/null; then
    echo "make_venv: no python3 found; set PYTHON=" >&2
    exit 1
fi
echo "make_venv: building $VENV"
"$PYTHON" -m venv "$VENV"
install="$ROOT/tests/venv_install.sh"
"$install" "$VENV/bin/python" "torch==$TORCH_VERSION"
"$install" "$VENV/bin/python" --no-deps "sglang==$SGLANG_VERSION"
"$install" "$VENV/bin/python" numpy orjson psutil pybase64 requests packaging pillow \
    starlette msgspec pydantic pyzmq tqdm ipython aiohttp zstandard triton
version="$(probe)" || { echo "make_venv: sglang's parser does not build in $VENV:" >&2; probe >&2 || true; exit 1; }
echo "make_venv: $VENV ready (sglang $version)"

#!/usr/bin/env bash
# Install packages into a venv: with uv where there is one (SPECBENCH_UV, else uv on PATH), else
# with the venv's own pip. The test setup's one installer (.ci/run and both engines' make_venv.sh).
#
#   tests/venv_install.sh VENV_PYTHON [pip install arguments...]
#   SPECBENCH_COMPILE_EXCLUDE=REGEX tests/venv_install.sh ...   (uv: compile all but the paths matching)
#
# uv resolves and unpacks in parallel: CI's venvs took 167 s (.venv, on the critical path before
# pytest), 268 s and 383 s (the engines', beside pytest, taking its CPUs) with pip, and ~40 s,
# ~60 s with uv, pip's cache and uv's cold alike. uv compiles the bytecode as pip does
# (--compile-bytecode): tests/run sets PYTHONDONTWRITEBYTECODE, so an uncompiled torch or vLLM would
# be compiled again by every process that imports it. uv reads its own settings, not pip's: the
# pip settings a machine sets in the environment (find-links, index) are passed on, TLS uses the
# system's certificates as pip does here, and a uv failure (an index uv cannot reach) falls back
# to pip, so uv only ever makes it faster.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 VENV_PYTHON [pip install arguments...]" >&2
    exit 2
fi
python=$1
shift
uv=${SPECBENCH_UV:-$(command -v uv || true)}

if [ -n "$uv" ] && [ -x "$uv" ]; then
    export UV_NATIVE_TLS=${UV_NATIVE_TLS:-true}
    [ -z "${PIP_FIND_LINKS:-}" ] || export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}
    [ -z "${PIP_INDEX_URL:-}" ] || export UV_DEFAULT_INDEX=${UV_DEFAULT_INDEX:-$PIP_INDEX_URL}
    [ -z "${PIP_EXTRA_INDEX_URL:-}" ] || export UV_INDEX=${UV_INDEX:-$PIP_EXTRA_INDEX_URL}
    if [ -z "${SPECBENCH_COMPILE_EXCLUDE:-}" ]; then
        if "$uv" pip install --quiet --python "$python" --compile-bytecode "$@"; then
            exit 0
        fi
    elif "$uv" pip install --quiet --python "$python" "$@"; then
        # Compile all but what matches the pattern (e.g. ansible's bundled collections, 15 000 of
        # .venv's 20 000 files: Ansible loads collection plugins from source, never from bytecode,
        # lib/ansible/utils/collection_loader/_collection_finder.py get_code).
        "$python" -m compileall -q -j 0 -x "$SPECBENCH_COMPILE_EXCLUDE" \
            "$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
        exit 0
    fi
    echo "venv_install: uv failed (above); installing with pip instead" >&2
fi
log=$(mktemp)
rc=0
"$python" -m pip install --quiet "$@" >"$log" 2>&1 || rc=$?
grep -v 'is ignored' "$log" >&2 || true # pip's notes on find-links folders a machine lacks
rm -f "$log"
exit $rc

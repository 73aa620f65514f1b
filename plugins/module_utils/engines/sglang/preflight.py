# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Checks on the node before anything is torn down or launched; standard library only.

Each check returns problems as sentences naming what is wrong and the fix:
* :func:`check_paths`: the model and draft paths exist (a local folder, or, when the hub is
  offline, a snapshot in the Hugging Face cache);
* :func:`check_disk`: free disk where the server writes;
* :func:`check_gpus`: the tensor-parallel size fits the GPUs visible;
* :func:`check_version`: the installed SGLang is a supported release (versions.py), or the one the
  user named (compared on the public version, so the emulator's ``0.5.23+specbench-emulator`` is 0.5.23).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.versions import (
    NEWEST,
    RANGE,
    public_version,
    unsupported,
)

VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n    print('SPECBENCH-SGLANG-VERSION ' + m.version('sglang'))\n"
    "except m.PackageNotFoundError:\n    print('SPECBENCH-SGLANG-VERSION none')\n"
)
TRUE = ("1", "true", "yes", "on")


def hf_cache_dir(env: dict) -> str:
    """Where huggingface_hub keeps models: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if env.get("HF_HUB_CACHE"):
        return os.path.expanduser(env["HF_HUB_CACHE"])
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def in_hf_cache(repo_id: str, cache: str) -> bool:
    """A snapshot of ``repo_id`` (org/name) with at least one file is in ``cache``."""
    snapshots = os.path.join(cache, "models--" + repo_id.replace("/", "--"), "snapshots")
    try:
        return any(os.listdir(os.path.join(snapshots, s)) for s in os.listdir(snapshots))
    except OSError:
        return False


def looks_like_hub_id(path: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path)) and not path.startswith((".", "~"))


def check_paths(paths: list[dict], env: dict) -> list[str]:
    """``paths``: [{"name": "model", "path": ..., "variable": "sglang_server_model_path"}]."""
    offline = str(env.get("HF_HUB_OFFLINE", "")).lower() in TRUE
    cache = hf_cache_dir(env)
    problems = []
    for item in paths:
        path, var, name = str(item.get("path") or ""), item.get("variable", "?"), item.get("name", "model")
        if not path:
            problems.append(f"the {name} path is empty: set {var}.")
            continue
        local = os.path.expanduser(path)
        if os.path.isdir(local):
            if not os.listdir(local):
                problems.append(f"the {name} folder {path} on this node is empty: copy the model there, or fix {var}.")
            continue
        if looks_like_hub_id(path) and not os.path.exists(local):
            if not offline or in_hf_cache(path, cache):
                continue
            problems.append(
                f"the {name} {path} is neither a folder on this node nor in the Hugging Face cache {cache}, and "
                f"HF_HUB_OFFLINE is set: download it there first (huggingface-cli download {path}), or point {var} "
                "at the folder that holds it."
            )
            continue
        problems.append(f"the {name} path {path} does not exist on this node (as a folder): copy the model there, "
                        f"or fix {var}.")
    return problems


def check_disk(path: str, min_free_gib: float) -> list[str]:
    """Free space on the filesystem holding ``path`` (its nearest existing parent)."""
    probe = os.path.expanduser(path)
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    free = shutil.disk_usage(probe or "/").free / 2**30
    if free < min_free_gib:
        return [f"only {free:.1f} GiB free on the filesystem of {path} (needs {min_free_gib:g} GiB for logs, "
                "results and SGLang's caches): free some space, or lower sglang_server_min_free_disk_gib."]
    return []


def check_gpus(tp_size: int, visible: int | None, how: str) -> list[str]:
    if visible is None:
        return []
    if tp_size > visible:
        return [f"sglang_server_tp_size is {tp_size} but only {visible} GPU(s) are visible here ({how}): lower "
                "sglang_server_tp_size, or make the GPUs visible (CUDA_VISIBLE_DEVICES, the container's device "
                "passthrough)."]
    return []


def installed_sglang(python: str, env: dict | None = None, timeout: float = 60) -> str | None:
    """The version of SGLang ``python`` would import (read from its metadata, SGLang not imported)."""
    try:
        proc = subprocess.run([python, "-c", VERSION_PROBE], capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in proc.stdout.splitlines():
        if line.startswith("SPECBENCH-SGLANG-VERSION "):
            found = line.split(" ", 1)[1].strip()
            return None if found == "none" else found
    return None


def check_version(installed: str | None, expected: str, python: str) -> list[str]:
    """The installed SGLang is a supported release (``expected`` empty), or exactly ``expected``.

    An ``expected`` outside the supported table is the user's own choice (a newer release they
    checked themselves): it is held exactly, and the flags are still checked against the node's
    own parser at launch."""
    wanted = f"sglang=={expected}" if expected else f"a supported SGLang ({RANGE})"
    if installed is None:
        return [f"{python} has no SGLang installed: install {wanted} for it, or set sglang_python to the "
                "interpreter that has it."]
    if expected:
        if public_version(installed) != public_version(expected):
            return [f"SGLang {installed} is installed here ({python}), but sglang_server_expected_version is "
                    f"{expected}: install sglang=={expected}, or set sglang_server_expected_version to "
                    f"\"{public_version(installed)}\" (or to \"\" for any supported release: {RANGE})."]
        return []
    refused = unsupported(installed)
    if refused:
        return [f"{refused}, installed here ({python}): install one of them (sglang=={NEWEST} is the newest), or, "
                f"having checked the modes' flags against {public_version(installed)} yourself, set "
                f"sglang_server_expected_version: \"{public_version(installed)}\"."]
    return []

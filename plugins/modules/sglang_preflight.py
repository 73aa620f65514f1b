#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_preflight
short_description: Check the node can serve a mode before anything is torn down or launched
version_added: "0.1.0"
description:
  - Read-only checks on the node, each failing with a sentence that names the problem and the fix.
  - The model and draft paths exist (a non-empty local folder, or a hub name; with C(HF_HUB_OFFLINE)
    set, a hub name must be in the Hugging Face cache).
  - Free disk on the filesystem of I(disk_path) is at least I(min_free_disk_gib).
  - I(tp_size) fits the GPUs visible (read through the gpu_state backends; for the emulator, the
    GPUs it will emulate).
  - The installed SGLang is a release specbench supports (0.5.18 to 0.5.23, each with what it has
    and lacks in C(module_utils/engines/sglang/versions.py)), refused by name with the range
    otherwise; or exactly I(expected_version) when it is set. Compared on the public version, so the emulator's
    C(0.5.23+specbench-emulator) is 0.5.23.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  engine:
    description: C(sglang) or C(emulator).
    type: str
    choices: [sglang, emulator]
    required: true
  paths:
    description: Paths to check, each C({name, path, variable}) (the variable is named in the error).
    type: list
    elements: dict
    default: []
  environment:
    description:
      - The server's extra environment; C(HF_HUB_OFFLINE), C(HF_HOME) and C(HF_HUB_CACHE) are read from it,
        then from the node's.
    type: dict
    default: {}
  disk_path:
    description: A path on the filesystem that must have free space (the node folder).
    type: path
    required: true
  min_free_disk_gib:
    description: GiB that must be free there.
    type: float
    default: 10
  tp_size:
    description: The tensor-parallel size rendered.
    type: int
    required: true
  emulated_gpus:
    description: GPUs the emulator will emulate (engine C(emulator)).
    type: int
  gpu_backend:
    description: How GPUs are counted for engine C(sglang) (gpu_state backends), or C(none) to skip.
    type: str
    choices: [auto, nvml, nvidia-smi, none]
    default: auto
  gpu_nvidia_smi:
    description: The nvidia-smi binary.
    type: str
    default: nvidia-smi
  python:
    description: Interpreter whose SGLang is checked (engine C(sglang)).
    type: str
    default: python3
  emulator_path:
    description: The emulator folder (engine C(emulator)); its version is read from its C(__init__.py).
    type: path
  expected_version:
    description:
      - The SGLang version the node must have; empty accepts any supported release (0.5.18 to 0.5.23).
      - A version outside that range is taken as the user's own choice and held exactly.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.sglang_flags
"""

EXAMPLES = r"""
- name: Check the node before the teardown
  specbench.core.sglang_preflight:
    engine: sglang
    paths:
      - {name: model, path: /models/Kimi-K2.5-INT4, variable: sglang_server_model_path}
    disk_path: ~/.local/share/specbench
    tp_size: 8
    python: /opt/sglang/bin/python
    expected_version: "0.5.23"
"""

RETURN = r"""
problems:
  description: What is wrong, each naming the fix (the module fails when there is any).
  returned: always
  type: list
  elements: str
version:
  description: The SGLang version found (the emulator's marked version for engine C(emulator)).
  returned: always
  type: str
gpus_visible:
  description: GPUs counted (null when not counted).
  returned: always
  type: int
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.preflight import (
    check_disk,
    check_gpus,
    check_paths,
    check_version,
    installed_sglang,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state


def emulator_version(path: str | None) -> str | None:
    try:
        # path comes from the option emulator_path (type path: already expanded)
        with open(os.path.join(path or "", "__init__.py"), encoding="utf-8") as fh:
            found = re.search(r'^REPORTED_VERSION\s*=\s*"([^"]+)"', fh.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "choices": ["sglang", "emulator"], "required": True},
            "paths": {"type": "list", "elements": "dict", "default": []},
            "environment": {"type": "dict", "default": {}},
            "disk_path": {"type": "path", "required": True},
            "min_free_disk_gib": {"type": "float", "default": 10},
            "tp_size": {"type": "int", "required": True},
            "emulated_gpus": {"type": "int"},
            "gpu_backend": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia-smi", "none"]},
            "gpu_nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "python": {"type": "str", "default": "python3"},
            "emulator_path": {"type": "path"},
            "expected_version": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    env = {**os.environ, **{k: str(v) for k, v in p["environment"].items()}}
    problems = []
    if p["engine"] == "sglang":
        problems += check_paths(p["paths"], env)
    problems += check_disk(p["disk_path"], p["min_free_disk_gib"])
    visible = None
    if p["engine"] == "emulator":
        visible = p["emulated_gpus"] if p["emulated_gpus"] is not None else p["tp_size"]
        problems += check_gpus(p["tp_size"], visible, "emulated GPUs, --emulator-gpus")
    elif p["gpu_backend"] != "none":
        try:
            visible = len(gpu_state.open_backend(p["gpu_backend"], "/dev/nvidia*", p["gpu_nvidia_smi"]).read_gpus())
        except gpu_state.GpuStateError as exc:
            problems.append(f"cannot count the GPUs here: {exc}")
        else:
            problems += check_gpus(p["tp_size"], visible, f"gpu_backend {p['gpu_backend']}")
    if p["engine"] == "emulator":
        version = emulator_version(p["emulator_path"])
        if version is not None:  # not shipped yet (fresh node, check mode): the flag check runs at launch
            problems += check_version(version, p["expected_version"], "the emulator")
    else:
        version = installed_sglang(p["python"], env)
        problems += check_version(version, p["expected_version"], p["python"])
    result = {"problems": problems, "version": version, "gpus_visible": visible}
    if problems:
        module.fail_json(msg=" ".join(problems), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

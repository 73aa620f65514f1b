#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Module emulator_time_scale: the emulator's time scale this machine can sustain for a sweep."""
from __future__ import annotations

DOCUMENTATION = r"""
module: emulator_time_scale
short_description: Choose the SGLang emulator's time scale this machine can sustain for a sweep
description:
  - Asks the emulator's own model (C(plan.py) in the emulator folder, run with the launch's own arguments)
    for the node's output tokens per second at each level, and picks the fastest time scale at which
    the emulator and the benchmark client each stay under O(headroom) of one core, from their measured
    capacities in tokens per CPU-second (C(specbench.core) C(emulator_scale.choose_time_scale)).
  - Read-only; used by role C(sglang_server) when C(sglang_server_emulator_time_scale) is C(auto).
version_added: "0.1.0"
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  python:
    description: Interpreter that runs the emulator on the node.
    type: str
    default: python3
  emulator_path:
    description: The emulator folder on the node.
    type: path
    required: true
  args:
    description: The launch's arguments after the entry point (the C(args) that C(specbench.core.sglang_command) returns).
    type: list
    elements: str
    required: true
  levels:
    description: The sweep's concurrency levels.
    type: list
    elements: int
    required: true
  input_len:
    description: Prompt tokens per request.
    type: int
    default: 256
  output_len:
    description: Output tokens per request.
    type: int
    default: 256
  emulator_tok_per_cpu_s:
    description: The emulator's measured capacity, output tokens served per CPU-second of its server process.
    type: float
    required: true
  client_tok_per_cpu_s:
    description: The benchmark client's measured capacity, tokens (streamed chunks) read per CPU-second.
    type: float
    required: true
  headroom:
    description: The share of one core each process may use.
    type: float
    default: 0.5
  fastest:
    description: The fastest time scale to choose (the smallest).
    type: float
    default: 0.1
attributes:
  check_mode:
    support: full
    details: >-
      Read-only; the same in check mode, except on a node the emulator was not shipped to yet
      (it reports the fastest scale, chosen for real at launch).
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: Choose the time scale for the seeds' levels
  specbench.core.emulator_time_scale:
    emulator_path: ~/.local/share/specbench/sglang_emulator
    args: [--model-path, emulated/Kimi-K2.5-INT4, --tp-size, "8"]
    levels: [1, 2, 5, 10, 30, 70, 100, 250]
    emulator_tok_per_cpu_s: 22000
    client_tok_per_cpu_s: 205000
  register: scale
"""

RETURN = r"""
time_scale:
  description: The time scale chosen.
  returned: success
  type: float
  sample: 0.1
text:
  description: Why, in one line (the model's peak, the wall-clock rate and each process's share of a core).
  returned: success
  type: str
plan:
  description: The emulator model's node figures per level (C(node_output_tok_per_s), C(node_steps_per_s)) and peaks.
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.engines.emulator_scale import choose_time_scale


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "str", "default": "python3"},
            "emulator_path": {"type": "path", "required": True},
            "args": {"type": "list", "elements": "str", "required": True},
            "levels": {"type": "list", "elements": "int", "required": True},
            "input_len": {"type": "int", "default": 256},
            "output_len": {"type": "int", "default": 256},
            "emulator_tok_per_cpu_s": {"type": "float", "required": True},
            "client_tok_per_cpu_s": {"type": "float", "required": True},
            "headroom": {"type": "float", "default": 0.5},
            "fastest": {"type": "float", "default": 0.1},
        },
        supports_check_mode=True,
    )
    p = module.params
    script = os.path.join(p["emulator_path"], "plan.py")
    if not os.path.isfile(script) and module.check_mode:
        # Check mode on a fresh node: bench_scripts only reported what it would ship, so there is no
        # model to ask yet; the launch that would follow is itself only reported.
        module.exit_json(changed=False, time_scale=p["fastest"], plan=None,
                         text=f"time scale chosen at launch (check mode: {script} is not shipped yet)")
    if not os.path.isfile(script):
        module.fail_json(msg=f"{script} is missing: the emulator folder on the node is not this collection's "
                             "(re-run role bench_scripts to ship it)")
    if not p["levels"] or min(p["levels"]) < 1:
        module.fail_json(msg=f"levels {p['levels']!r}: give the sweep's concurrency levels, each at least 1")
    cmd = [p["python"], script, "--levels", ",".join(map(str, p["levels"])), "--input-len", str(p["input_len"]),
           "--output-len", str(p["output_len"]), "--", *p["args"]]
    rc, out, err = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg=f"the emulator's model refused the launch: {err.strip() or out.strip()}", cmd=cmd)
    try:
        plan = json.loads(out)
        chosen = choose_time_scale(plan, p["emulator_tok_per_cpu_s"], p["client_tok_per_cpu_s"], p["headroom"],
                                   p["fastest"])
    except (ValueError, KeyError, TypeError) as exc:
        module.fail_json(msg=f"cannot choose a time scale: {exc}", cmd=cmd)
    module.exit_json(changed=False, time_scale=chosen["time_scale"], text=chosen["text"], plan=plan)


if __name__ == "__main__":
    main()

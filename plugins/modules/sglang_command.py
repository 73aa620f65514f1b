#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_command
short_description: Render the SGLang launch command of one serving mode, refusing unfair settings
version_added: "0.1.0"
description:
  - Builds the argv of C(python -m sglang.launch_server) (engine C(sglang)) or of the SGLang
    emulator (engine C(emulator), the same flags plus C(--emulator-*)) for one mode of the
    modes table, over the capacity settings every mode shares.
  - "Fairness: each capacity setting (mem-fraction-static, max-running-requests, tp-size,
    context length, decode CUDA-graph batch size, chunked prefill) must be set and is rendered
    explicitly in every launch. A mode, I(mode_extra_args) or I(extra_args) that sets one is
    refused with the setting's name and the fix. A per-mode override happens only when named in
    I(mode_overrides) and is returned in C(confounders)."
  - Changes nothing and runs anywhere; the role sglang_server runs it in its preflight.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  engine:
    description: C(sglang) runs C(python -m sglang.launch_server); C(emulator) runs the emulator folder.
    type: str
    required: true
  mode:
    description: The serving mode, a key of I(modes).
    type: str
    required: true
  modes:
    description:
      - "The modes table: C({name: {flags: {--flag: value}, required: {--flag: variable}}}). C(true)
        renders a bare flag; C(null), C(false) and an empty string leave the flag out; a list
        repeats values after the flag."
    type: dict
    required: true
  settings:
    description:
      - The capacity settings shared by all modes, each with C(name), C(flag), C(aliases),
        C(variable), C(kind) (C(fraction), C(count) or C(count_or_off)), C(value) and C(why).
    type: list
    elements: dict
    required: true
  mode_overrides:
    description: "C({mode: {setting name: value}}); applied to that mode only and reported as a confounder."
    type: dict
    default: {}
  mode_extra_args:
    description: "C({mode: [argv items]}) added to that mode only (never a capacity setting)."
    type: dict
    default: {}
  extra_args:
    description: Argv items added to every mode (never a capacity setting, a rendered flag or a speculative flag).
    type: list
    elements: str
    default: []
  enable_metrics:
    description:
      - Render C(--enable-metrics) (once) whatever I(extra_args) hold; C(/metrics) gives the running and
        queued figures and the "cap reached" and "queued" confounders.
    type: bool
    default: true
  model_path:
    description: C(--model-path) (required; an empty value fails naming C(sglang_server_model_path)).
    type: str
  served_model_name:
    description: C(--served-model-name); left out when empty.
    type: str
  host:
    description: C(--host).
    type: str
    default: 127.0.0.1
  port:
    description: C(--port), a TCP port number (required).
    type: raw
  python:
    description: The interpreter with SGLang (engine C(sglang)).
    type: str
    default: python3
  emulator_python:
    description: The interpreter that runs the emulator (engine C(emulator)).
    type: str
    default: python3
  emulator_path:
    description: The emulator folder on the node (engine C(emulator)).
    type: str
  emulator:
    description:
      - The emulator's own flags, engine C(emulator) only, with keys C(device_dir), C(profile),
        C(time_scale), C(load_seconds), C(launch_sd), C(launch_seed), C(faults) (list) and C(args) (further
        C(--emulator-*) items).
    type: dict
    default: {}
  adaptive_config:
    description:
      - "SGLang's C(--speculative-adaptive-config) content, checked against SGLang's rules when the
        mode sets C(--speculative-adaptive): batch-size keys (C(\"1\"), C(\"64\")) mapping to
        C({candidate_steps: [non-negative integers]}), plus shared knobs (C(ema_alpha),
        C(update_interval), C(warmup_batches), C(up_hysteresis), C(down_hysteresis), C(ceiling_coeff))."
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Renders only; the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.sglang_flags
  - module: specbench.core.sglang_launch
"""

EXAMPLES = r"""
- name: Render the eagle3 launch
  specbench.core.sglang_command:
    engine: sglang
    mode: eagle3
    python: /opt/sglang/venv/bin/python
    model_path: /models/Kimi-K2.5-INT4
    port: 30000
    modes:
      baseline: {flags: {}}
      eagle3:
        flags:
          --speculative-algorithm: EAGLE3
          --speculative-draft-model-path: /models/Kimi-K2.5-EAGLE3
    settings:
      - {name: mem_fraction_static, flag: --mem-fraction-static, variable: sglang_server_mem_fraction_static,
         kind: fraction, value: 0.88}
      - {name: max_running_requests, flag: --max-running-requests, variable: sglang_server_max_running_requests,
         kind: count, value: 256}
  register: launch_command
"""

RETURN = r"""
argv:
  description: The whole command, interpreter first.
  returned: success
  type: list
  elements: str
  sample: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --model-path, /models/m, --host, 127.0.0.1,
           --port, "30000", --mem-fraction-static, "0.88", --max-running-requests, "256",
           --speculative-algorithm, EAGLE3]
args:
  description: The arguments after the entry point (what SGLang's parser sees).
  returned: success
  type: list
  elements: str
entry:
  description: The entry point (interpreter and module or emulator folder).
  returned: success
  type: list
  elements: str
settings:
  description: The capacity settings as rendered for this mode, by name.
  returned: success
  type: dict
  sample: {mem_fraction_static: 0.88, max_running_requests: 256}
confounders:
  description: Every way this launch differs from the other modes beyond its speculative flags.
  returned: success
  type: list
  elements: str
mode_flags:
  description: The mode's own argv items.
  returned: success
  type: list
  elements: str
origins:
  description: For each flag, the variable or mode it comes from (used in error messages).
  returned: success
  type: dict
base_url:
  description: Where a client on the node reaches the server.
  returned: success
  type: str
  sample: http://127.0.0.1:30000
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.engines.common import CommandError, base_url
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.command import render


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True},
            "modes": {"type": "dict", "required": True},
            "settings": {"type": "list", "elements": "dict", "required": True},
            "mode_overrides": {"type": "dict", "default": {}},
            "mode_extra_args": {"type": "dict", "default": {}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "enable_metrics": {"type": "bool", "default": True},
            "model_path": {"type": "str"},
            "served_model_name": {"type": "str"},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "raw"},
            "python": {"type": "str", "default": "python3"},
            "emulator_python": {"type": "str", "default": "python3"},
            "emulator_path": {"type": "str"},
            "emulator": {"type": "dict", "default": {}},
            "adaptive_config": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        result = render(module.params)
    except CommandError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, base_url=base_url(result["host"], result["port"]), **result)


if __name__ == "__main__":
    main()

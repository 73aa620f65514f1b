#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_ready
short_description: Wait until a launched SGLang server serves, failing fast with its log if it exits
version_added: "0.1.0"
description:
  - Polls C(/health_generate) (SGLang's readiness probe, 503 while loading), falling back to
    C(/health) and then C(/v1/models) when the server has no such endpoint, until one answers
    200 or I(timeout) passes.
  - Fails at once, with the last lines of the server's log since this launch, when the process
    (same pid and start time) or its systemd unit is gone before it is ready.
  - Once ready, reads C(/get_server_info) (version and resolved arguments) and C(/v1/models), and
    compares the capacity settings the server resolved with I(expected).
  - With I(state_path), completes the launch record written by M(specbench.core.sglang_launch)
    with I(extra), the version, the server info and the confounders, rewrites it, and returns it
    as C(record) (the role's C(specbench_server) fact).
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  base_url:
    description: The server's URL as seen from the node, e.g. C(http://127.0.0.1:30000).
    type: str
    required: true
  pid:
    description: The server's main process (from M(specbench.core.sglang_launch)).
    type: int
  starttime:
    description: Its start time (tells a reused pid apart).
    type: int
  unit:
    description: Its transient systemd unit, if launched as one.
    type: str
  log_path:
    description: The server's log.
    type: path
    required: true
  log_offset:
    description: Where this launch's output starts in the log (bytes).
    type: int
    default: 0
  timeout:
    description: Seconds to wait for readiness (model loads of large models take many minutes).
    type: int
    default: 1800
  interval:
    description: Seconds between probes.
    type: float
    default: 0.5
  tail_lines:
    description: Log lines shown when the server fails.
    type: int
    default: 40
  expected:
    description: "C({server_info key: value}) the server should report (the capacity settings rendered)."
    type: dict
    default: {}
  state_path:
    description: The launch record (JSON) to complete and rewrite; empty, none.
    type: path
  extra:
    description: Fields added to the record (settings, mode_flags, confounders, ...).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.sglang_launch
"""

EXAMPLES = r"""
- name: Wait for readiness
  specbench.core.sglang_ready:
    base_url: http://127.0.0.1:30000
    pid: "{{ launched.pid }}"
    starttime: "{{ launched.starttime }}"
    log_path: "{{ launched.log_path }}"
    log_offset: "{{ launched.log_offset }}"
    timeout: 1800
  register: ready
"""

RETURN = r"""
probe:
  description: The endpoint that answered 200.
  returned: success
  type: str
  sample: /health_generate
elapsed_s:
  description: Seconds waited.
  returned: success
  type: float
server_info:
  description: C(/get_server_info) as the server returned it (resolved arguments, C(version), ...).
  returned: success
  type: dict
version:
  description: The SGLang version the server reports.
  returned: success
  type: str
  sample: "0.5.23"
models:
  description: The model ids C(/v1/models) lists.
  returned: success
  type: list
  elements: str
differences:
  description: Capacity settings the server resolved differently from I(expected) (confounders).
  returned: success
  type: list
  elements: str
record:
  description:
    - The completed record (launch record, I(extra), C(version), C(server_info), C(models),
      C(ready_probe), C(confounders) including C(differences)).
  returned: when I(state_path) is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.sglang_process import (
    LaunchError,
    read_state,
    resolved_differences,
    server_info,
    wait_ready,
    write_state,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "pid": {"type": "int"},
            "starttime": {"type": "int"},
            "unit": {"type": "str"},
            "log_path": {"type": "path", "required": True},
            "log_offset": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 1800},
            "interval": {"type": "float", "default": 0.5},
            "tail_lines": {"type": "int", "default": 40},
            "expected": {"type": "dict", "default": {}},
            "state_path": {"type": "path"},
            "extra": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = p["base_url"].rstrip("/")
    try:
        ready = wait_ready(base, p["pid"], p["starttime"], p["unit"], p["log_path"], p["log_offset"],
                           p["timeout"], p["interval"], p["tail_lines"])
    except LaunchError as exc:
        module.fail_json(msg=str(exc))
    found, warnings = server_info(base)
    for warning in warnings:
        module.warn(warning)
    info = found["server_info"]
    result = {
        "probe": ready["probe"],
        "elapsed_s": ready["elapsed_s"],
        "server_info": info,
        "version": str(info.get("version", "unknown")),
        "models": found["models"],
        "differences": resolved_differences(info, p["expected"]),
    }
    if p["state_path"]:
        record = read_state(p["state_path"]) or {}
        record.update(p["extra"])
        record.update({
            "version": result["version"],
            "server_info": info,
            "models": result["models"],
            "ready_probe": result["probe"],
            "confounders": list(p["extra"].get("confounders") or []) + result["differences"],
        })
        if not module.check_mode:
            write_state(p["state_path"], record)
        result["record"] = record
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

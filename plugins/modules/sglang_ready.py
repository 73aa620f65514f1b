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
  - Once ready, reads C(/server_info) (or C(/get_server_info) on older SGLang releases), that is the
    version and resolved arguments, and C(/v1/models), and
    compares the capacity settings the server resolved with I(expected).
  - With I(poll_for), returns after that many seconds with C(ready=false) and a C(progress)
    snapshot (elapsed, the log's last line, GPU memory used) while the server still loads; the
    action plugin of the same name calls it again and again, printing one line per call, until the
    server is ready, exits, or I(timeout) passes (counted with I(elapsed_before)).
  - "With I(speculative_check), checks after the launch that the server runs the speculative
    settings its command asked for (for C(sglang), C(/server_info)'s C(speculative_algorithm),
    C(speculative_adaptive), C(speculative_num_steps), C(speculative_eagle_topk) and
    C(speculative_num_draft_tokens) against I(args); for C(vllm), the spec-decode counters rise over
    one short completion in a speculative mode, and are absent in a plain one), and fails naming
    I(mode) and every mismatch. The check goes into the record as C(post_launch_check)."
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
  poll_for:
    description: Seconds this call waits before returning a progress snapshot (0 waits the whole I(timeout)).
    type: float
    default: 0
  elapsed_before:
    description: Seconds of I(timeout) that earlier calls of this wait already spent.
    type: float
    default: 0
  gpu_backend:
    description: How the progress snapshot reads GPU memory (the gpu_state backends), or C(none).
    type: str
    choices: [auto, nvml, nvidia-smi, emulated, none]
    default: none
  gpu_device_glob:
    description: Device files of the GPUs (the emulated backend's folder pattern).
    type: str
    default: /dev/nvidia*
  gpu_nvidia_smi:
    description: The nvidia-smi binary for the C(nvidia-smi) backend.
    type: str
    default: nvidia-smi
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
  speculative_check:
    description: The post-launch check of the speculative settings, by engine; C(none) skips it.
    type: str
    choices: [none, sglang, vllm]
    default: none
  mode:
    description: The serving mode launched (named in the check's failure).
    type: str
    default: ""
  args:
    description: The server's arguments (SGLang; the speculative flags asked for are read from them).
    type: list
    elements: str
    default: []
  speculative_config:
    description: The mode's C(--speculative-config) (vLLM; empty for plain decoding).
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
ready:
  description: True once the server serves; false when I(poll_for) passed first (see C(progress)).
  returned: always
  type: bool
progress:
  description: While loading, C(elapsed_s), C(timeout_s), C(last_probe), C(log_line) and C(gpu_memory)
    (C(gpus), C(used_mib), C(total_mib), C(error)).
  returned: when C(ready) is false
  type: dict
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
  description: C(/server_info) as the server returned it (resolved arguments, C(version), ...).
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
    - The completed record (launch record, I(extra), C(version), C(server_info), C(info_path),
      C(models), C(ready_probe), C(ready_s) (the seconds to ready), C(post_launch_check),
      C(confounders) including C(differences)).
  returned: when I(state_path) is given
  type: dict
post_launch_check:
  description:
    - C(engine), C(source), C(asked), C(running), C(ok), C(mismatches) (see I(speculative_check)).
  returned: when I(speculative_check) is not C(none)
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.specbench.core.plugins.module_utils.engines.common import postlaunch_failure
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import postlaunch as sglang_postlaunch
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm import postlaunch as vllm_postlaunch
from ansible_collections.specbench.core.plugins.module_utils.launch.process import (
    LaunchError,
    http_get,
    log_tail,
    read_state,
    resolved_differences,
    server_info,
    wait_ready,
    write_state,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state


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
            "poll_for": {"type": "float", "default": 0},
            "elapsed_before": {"type": "float", "default": 0},
            "gpu_backend": {"type": "str", "default": "none",
                            "choices": ["auto", "nvml", "nvidia-smi", "emulated", "none"]},
            "gpu_device_glob": {"type": "str", "default": "/dev/nvidia*"},
            "gpu_nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "interval": {"type": "float", "default": 0.5},
            "tail_lines": {"type": "int", "default": 40},
            "expected": {"type": "dict", "default": {}},
            "state_path": {"type": "path"},
            "extra": {"type": "dict", "default": {}},
            "speculative_check": {"type": "str", "default": "none", "choices": ["none", "sglang", "vllm"]},
            "mode": {"type": "str", "default": ""},
            "args": {"type": "list", "elements": "str", "default": []},
            "speculative_config": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = p["base_url"].rstrip("/")
    read_gpus = None
    if p["gpu_backend"] != "none":
        def read_gpus():
            glob = p["gpu_device_glob"]
            return gpu_state.open_backend(p["gpu_backend"], glob, p["gpu_nvidia_smi"]).read_gpus()
    try:
        ready = wait_ready(base, p["pid"], p["starttime"], p["unit"], p["log_path"], p["log_offset"],
                           p["timeout"], p["interval"], p["tail_lines"], poll_for=p["poll_for"],
                           elapsed_before=p["elapsed_before"], read_gpus=read_gpus)
    except LaunchError as exc:
        module.fail_json(msg=str(exc))
    if not ready["ready"]:
        module.exit_json(changed=False, ready=False, progress=ready["progress"], elapsed_s=ready["elapsed_s"])
    found, warnings = server_info(base)
    for warning in warnings:
        module.warn(warning)
    info = found["server_info"]
    result = {
        "ready": True,
        "probe": ready["probe"],
        "elapsed_s": ready["elapsed_s"],
        "server_info": info,
        "version": str(info.get("version", "unknown")),
        "models": found["models"],
        "differences": resolved_differences(info, p["expected"]),
    }
    check = None
    if p["speculative_check"] == "sglang":
        check = sglang_postlaunch.sglang_check(p["args"], info, found.get("info_path"),
                                               log_tail(p["log_path"], p["log_offset"], 400))
    elif p["speculative_check"] == "vllm":
        check = vllm_drafts(base, (found["models"] or [""])[0], p["speculative_config"])
    if check is not None:
        result["post_launch_check"] = check
    if p["state_path"]:
        record = read_state(p["state_path"]) or {}
        record.update(p["extra"])
        record.update({
            "version": result["version"],
            "server_info": info,
            "models": result["models"],
            "ready_probe": result["probe"],
            # The model load's seconds, for the next run's plan (run_plan reads the node's last launches).
            "ready_s": result["elapsed_s"],
            "info_path": found.get("info_path"),
            "post_launch_check": check,
            "confounders": list(p["extra"].get("confounders") or []) + result["differences"],
        })
        if not module.check_mode:
            write_state(p["state_path"], record)
        result["record"] = record
    if check is not None and not check["ok"]:
        module.fail_json(msg=postlaunch_failure(p["mode"] or "?", check), **result)
    module.exit_json(changed=False, **result)


# A prompt that repeats itself, so that n-gram drafting finds matches as a draft model would.
CHECK_PROMPT = " ".join(["one two three four"] * 8)
CHECK_TOKENS = 16


def vllm_drafts(base: str, model: str, spec: dict) -> dict:
    """/metrics, one greedy completion of CHECK_TOKENS tokens, /metrics again: the check's input."""
    status, before = http_get(base + "/metrics")
    body = json.dumps({"model": model, "prompt": CHECK_PROMPT, "max_tokens": CHECK_TOKENS, "temperature": 0,
                       "ignore_eos": True}).encode()
    try:
        with open_url(base + "/v1/completions", data=body, method="POST", timeout=120, use_proxy=False,
                      headers={"Content-Type": "application/json"}) as resp:
            resp.read()
    except Exception as exc:  # noqa: BLE001 - any failure is reported as the check's
        return {"engine": "vllm", "source": "/metrics around a completion", "asked": {"speculative_config": spec},
                "running": {}, "ok": False, "mismatches": [f"the check's completion failed: {exc}"]}
    status_after, after = http_get(base + "/metrics")
    return vllm_postlaunch.vllm_check(spec, before.decode("utf-8", "replace") if status == 200 else None,
                                      after.decode("utf-8", "replace") if status_after == 200 else None,
                                      CHECK_TOKENS)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_teardown
short_description: Kill whatever holds the NVIDIA GPUs and prove them clean
version_added: "0.1.0"
description:
  - "The seeds' C(pkill) and C(fuser -k /dev/nvidia*) done safely and provably, in this order:
    the recorded server process group (SIGTERM, wait); its survivors and processes whose full
    command line matches I(kill_patterns) (SIGTERM, wait, SIGKILL, wait); holders of the
    device nodes in I(device_glob) (SIGTERM, wait, SIGKILL, wait); then polling memory on every
    GPU every I(poll_interval_s) until each is at or under I(idle_mib) and lists no compute
    process. Every wait has a deadline; there is no fixed sleep."
  - "Never signals its own process, its children, its ancestors (the Ansible worker,
    ansible-playbook), the rest of the Ansible controller's process tree, Ansible programs
    whose command lines match a pattern through C(-e) text, the I(never_kill) list, or
    processes it cannot see. Signals go through a pidfd after checking the start time."
  - "Fails when the GPUs are not clean by the deadline, naming each GPU's memory and each
    surviving holder with pid, state and command line: a process in state D is called out as
    needing a GPU reset or a reboot; memory with no visible process is reported as held outside
    this PID namespace, with the advice to run the teardown on the Proxmox host."
  - C(changed) only when it signalled something. In check mode it lists in C(would_kill) what
    it would signal and signals nothing.
author:
  - specbench contributors
options:
  backend:
    description: Where to read GPU memory from (see M(specbench.core.gpu_state)).
    type: str
    choices: [auto, nvml, nvidia-smi, emulated]
    default: auto
  device_glob:
    description: The device nodes whose holders are killed (the fuser step); never a broader path.
    type: str
    default: /dev/nvidia*
  nvidia_smi:
    description: The nvidia-smi binary for the C(nvidia-smi) backend.
    type: str
    default: nvidia-smi
  idle_mib:
    description: A GPU at or under this many MiB used, with no compute process, is clean.
    type: int
    default: 64
  never_kill:
    description:
      - Process names never signalled (matched against the kernel's 15-character comm and the
        basename of argv[0]).
    type: list
    elements: str
    default: [nvidia-persistenced, nv-hostengine, dcgm-exporter, nv-fabricmanager, nvidia-cuda-mps-control, Xorg]
  kill_patterns:
    description:
      - Python regular expressions searched in each process's full command line (like
        C(pkill -f), without matching this module itself).
    type: list
    elements: str
    default: ["sglang::", "sglang.launch_server", "sglang serve", "sglang_emulator"]
  server_pgid:
    description:
      - The server's recorded process group (C(specbench_server.pgid)). Its members are only
        signalled while one of them matches I(kill_patterns) or holds a device node, so a stale
        record cannot hit a reused group.
    type: int
  server_state_file:
    description: JSON with the server's C(pgid), read when I(server_pgid) is not given and the file exists.
    type: path
  term_timeout_s:
    description: Seconds to wait after SIGTERM before SIGKILL.
    type: float
    default: 15
  kill_timeout_s:
    description: Seconds to wait after SIGKILL for the processes to be gone.
    type: float
    default: 10
  clean_timeout_s:
    description: Seconds, after the last kill, to wait for every GPU to read clean.
    type: float
    default: 60
  poll_interval_s:
    description: Seconds between two reads of the processes or of GPU memory.
    type: float
    default: 0.05
attributes:
  check_mode:
    support: full
    description: Lists what it would signal in C(would_kill) and signals nothing.
  diff_mode:
    support: none
    description: Nothing to diff.
seealso:
  - module: specbench.core.gpu_state
"""

EXAMPLES = r"""
- name: Tear the server down and verify every GPU is clean
  specbench.core.gpu_teardown:
    server_state_file: "{{ specbench_node_dir }}/state/server.json"
  register: teardown

- name: The emulator's GPUs, with a short deadline
  specbench.core.gpu_teardown:
    backend: emulated
    device_glob: "{{ specbench_emulator_device_dir }}/nvidia*"
    clean_timeout_s: 10
"""

RETURN = r"""
clean:
  description: Every GPU read clean before the deadline (in check mode, whether it is clean now).
  returned: always
  type: bool
killed:
  description: Each process signalled, with the step that found it and the signals sent in order.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 31337
      ppid: 1
      pgid: 31330
      name: sglang::schedul
      state: S
      cmdline: "sglang::scheduler_TP1"
      step: pattern
      signals: [SIGTERM, SIGKILL]
      signal: SIGKILL
      exited: true
would_kill:
  description: In check mode, what would be signalled (pid, name, cmdline, step); empty otherwise.
  returned: always
  type: list
  elements: dict
left_alone:
  description: Processes found but left alone, each with the reason (own process tree, never-kill list, ...).
  returned: always
  type: list
  elements: dict
time_to_clean_s:
  description: Seconds from the end of the kill steps to the first clean read of every GPU; null if never clean.
  returned: always
  type: float
  sample: 0.0012
elapsed_s:
  description: Seconds the whole teardown took.
  returned: always
  type: float
before:
  description: The gpu_state facts before anything was signalled.
  returned: always
  type: dict
after:
  description: The gpu_state facts at the end.
  returned: always
  type: dict
recorded_pgid:
  description: The server process group used in the first step, or null.
  returned: always
  type: int
recorded_pgid_source:
  description: Where the recorded group came from (specbench_server.pgid, the state file, or none recorded).
  returned: always
  type: str
log:
  description: One line per signal sent.
  returned: always
  type: list
  elements: str
msg:
  description: A summary, or on failure every GPU not clean and every surviving holder.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.gpu_state import (
    BACKENDS,
    GpuStateError,
    open_backend,
)
from ansible_collections.specbench.core.plugins.module_utils.gpu_teardown import (
    DEFAULT_KILL_PATTERNS,
    DEFAULT_NEVER_KILL,
    Teardown,
    TeardownInputError,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "default": "auto", "choices": list(BACKENDS)},
            "device_glob": {"type": "str", "default": "/dev/nvidia*"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "idle_mib": {"type": "int", "default": 64},
            "never_kill": {"type": "list", "elements": "str", "default": list(DEFAULT_NEVER_KILL)},
            "kill_patterns": {"type": "list", "elements": "str", "default": list(DEFAULT_KILL_PATTERNS)},
            "server_pgid": {"type": "int"},
            "server_state_file": {"type": "path"},
            "term_timeout_s": {"type": "float", "default": 15},
            "kill_timeout_s": {"type": "float", "default": 10},
            "clean_timeout_s": {"type": "float", "default": 60},
            "poll_interval_s": {"type": "float", "default": 0.05},
        },
        supports_check_mode=True,
    )
    p = module.params
    backend = None
    try:
        backend = open_backend(p["backend"], p["device_glob"], p["nvidia_smi"])
        teardown = Teardown(
            backend,
            p["device_glob"],
            idle_mib=p["idle_mib"],
            never_kill=p["never_kill"],
            kill_patterns=p["kill_patterns"],
            server_pgid=p["server_pgid"],
            server_state_file=p["server_state_file"],
            term_timeout_s=p["term_timeout_s"],
            kill_timeout_s=p["kill_timeout_s"],
            clean_timeout_s=p["clean_timeout_s"],
            poll_interval_s=p["poll_interval_s"],
            check_mode=module.check_mode,
        )
        result = teardown.run()
    except TeardownInputError as exc:
        module.fail_json(msg=str(exc), error="bad_input")
    except GpuStateError as exc:
        module.fail_json(msg=str(exc), error=exc.kind)
    finally:
        if backend is not None:
            backend.close()
    for warning in result.pop("warnings"):
        module.warn(warning)
    changed = bool(result["killed"] or result["would_kill"])
    if not result["clean"] and not module.check_mode:
        module.fail_json(changed=changed, **result)
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()

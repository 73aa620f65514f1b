#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_state
short_description: Report every NVIDIA GPU's memory, compute processes and device-node holders
version_added: "0.1.0"
description:
  - Reads every GPU (index, uuid, name, memory used, total and reserved in MiB, compute
    processes with pid and memory) and every process holding one of the device nodes
    (pid, name, command line, state R/S/Z/D, which nodes), and returns them as the fact
    C(gpu_state).
  - "Backends: C(nvml) (nvidia-ml-py, memory through the v2 struct whose C(used) matches
    nvidia-smi), C(nvidia-smi) (C(--query-gpu) and C(--query-compute-apps) CSV), C(emulated)
    (the SGLang emulator's device folder) and C(auto) (NVML, else nvidia-smi when
    nvidia-ml-py or libnvidia-ml is missing)."
  - "Fails with a distinct message for: no driver library, driver not loaded, user-space
    library and kernel module versions differ (the LXC pitfall), no GPU at all."
  - Runs on the managed node with the Python standard library (plus nvidia-ml-py where
    installed). Changes nothing.
author:
  - specbench contributors (!UNKNOWN)
options:
  backend:
    description: Where to read the GPUs from.
    type: str
    choices: [auto, nvml, nvidia-smi, emulated]
    default: auto
  device_glob:
    description:
      - The device nodes whose holders are listed (a shell glob; folders such as
        C(/dev/nvidia-caps) count with their files).
      - For C(emulated), the glob's folder is the emulated device folder.
    type: str
    default: /dev/nvidia*
  devices:
    description:
      - The target GPUs (indexes or UUIDs; empty for all). C(clean) and C(dirty_gpus) cover exactly
        these; every GPU is still listed.
    type: list
    elements: raw
    default: []
  nvidia_smi:
    description: The nvidia-smi binary (name on PATH or path) for the C(nvidia-smi) backend.
    type: str
    default: nvidia-smi
  idle_mib:
    description:
      - A GPU using at most this many MiB and listing no compute process counts as clean
        (C(clean) and C(dirty_gpus) in the result). Idle H100/H200 read 0 to 4 MiB.
    type: int
    default: 64
extends_documentation_fragment: [specbench.core.attributes]
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
    details: Sets the fact C(gpu_state).
notes:
  - Holders are found through C(/proc/<pid>/fd) like C(fuser -v); processes in another PID
    namespace (the Proxmox host, another container) are invisible from inside a container.
seealso:
  - module: specbench.core.gpu_teardown
"""

EXAMPLES = r"""
- name: Read the GPUs
  specbench.core.gpu_state:
  register: gpus

- name: Show memory used per GPU
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu_state']['gpus'] | map(attribute='memory_used_mib') | list }}"

- name: Read the GPUs through nvidia-smi (a node without nvidia-ml-py)
  specbench.core.gpu_state:
    backend: nvidia-smi
    nvidia_smi: /usr/bin/nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: The fact C(gpu_state), the same dictionary as C(gpu_state) below.
  returned: success
  type: dict
gpu_state:
  description: The GPUs and the holders of the device nodes.
  returned: success
  type: dict
  contains:
    backend:
      description: The backend that answered (C(nvml), C(nvidia-smi) or C(emulated)).
      type: str
      sample: nvml
    driver_version:
      description: The driver version the backend reports.
      type: str
      sample: "590.48.01"
    gpus:
      description: One entry per GPU.
      type: list
      elements: dict
      sample:
        - index: 0
          uuid: GPU-5e1c3b0a-1111-2222-3333-444455556666
          name: NVIDIA H200
          memory_used_mib: 4
          memory_total_mib: 143771
          memory_reserved_mib: 512
          node: /dev/nvidia0
          processes: []
    holders:
      description: Every process holding a device node open, with pid, user, name, cmdline, state, state_text, nodes.
      type: list
      elements: dict
      sample:
        - pid: 4242
          name: nvidia-persiste
          cmdline: /usr/bin/nvidia-persistenced --user nvidia-persistenced
          state: S
          state_text: sleeping
          nodes: [/dev/nvidia0, /dev/nvidiactl]
    nodes:
      description: The device nodes the glob expanded to.
      type: list
      elements: str
    targets:
      description: Indexes of the target GPUs (I(devices); all when empty).
      type: list
      elements: int
    clean:
      description: Every target GPU at or under I(idle_mib) with no compute process.
      type: bool
    dirty_gpus:
      description: Indexes of the GPUs that are not clean.
      type: list
      elements: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.teardown.gpu_state import (
    BACKENDS,
    GpuStateError,
    open_backend,
    read_state,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "default": "auto", "choices": list(BACKENDS)},
            "device_glob": {"type": "str", "default": "/dev/nvidia*"},
            "devices": {"type": "list", "elements": "raw", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "idle_mib": {"type": "int", "default": 64},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["idle_mib"] < 0:
        module.fail_json(msg=f"idle_mib is {p['idle_mib']}: it must be 0 or more MiB (e.g. 64).")
    try:
        backend = open_backend(p["backend"], p["device_glob"], p["nvidia_smi"])
        try:
            state = read_state(backend, p["device_glob"], p["idle_mib"], devices=p["devices"])
        finally:
            backend.close()
    except GpuStateError as exc:
        module.fail_json(msg=str(exc), error=exc.kind)
    module.exit_json(changed=False, gpu_state=state, ansible_facts={"gpu_state": state})


if __name__ == "__main__":
    main()

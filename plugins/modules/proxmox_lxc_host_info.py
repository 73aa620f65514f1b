#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: proxmox_lxc_host_info
short_description: Read what GPU passthrough to a Proxmox VE container needs from its host
version_added: "0.1.0"
description:
  - On the Proxmox VE node, checks that C(pct) and the container's config exist, reads the
    C(nvidia-uvm) character major from C(/proc/devices) (dynamic, often 508 to 511), lists the
    C(/dev/nvidia*) device nodes (folders such as C(nvidia-caps) left out) and reads the NVIDIA
    kernel module's version from C(/proc/driver/nvidia/version).
  - Returns the config lines passthrough needs, for M(specbench.core.proxmox_lxc_config). Each
    missing piece fails with what to do about it. Changes nothing.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  vmid:
    description: The container's VMID.
    type: int
    required: true
  pct:
    description: The pct binary.
    type: path
    default: /usr/sbin/pct
  config_dir:
    description: Folder of the container configs.
    type: path
    default: /etc/pve/lxc
  proc_devices:
    description: Where the character majors are read.
    type: path
    default: /proc/devices
  dev_dir:
    description: The host's device folder.
    type: path
    default: /dev
  device_nodes:
    description: Device nodes to pass through (empty, every nvidia* node of I(dev_dir)).
    type: list
    elements: str
    default: []
  nvidia_major:
    description: The NVIDIA character major.
    type: int
    default: 195
  driver_version_file:
    description: The kernel module's version file (empty, not read).
    type: path
    default: /proc/driver/nvidia/version
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.proxmox_lxc_config
"""

EXAMPLES = r"""
- name: Read the host's NVIDIA devices for container 129
  specbench.core.proxmox_lxc_host_info:
    vmid: 129
  register: gpu_host

- name: Pass them through
  specbench.core.proxmox_lxc_config:
    path: "{{ gpu_host.config_path }}"
    lines: "{{ gpu_host.lines }}"
"""

RETURN = r"""
config_path:
  description: The container config.
  returned: success
  type: str
  sample: /etc/pve/lxc/129.conf
uvm_major:
  description: The nvidia-uvm character major.
  returned: success
  type: int
  sample: 508
nodes:
  description: The device nodes to pass through.
  returned: success
  type: list
  elements: str
  sample: [nvidia-modeset, nvidia-uvm, nvidia-uvm-tools, nvidia0, nvidiactl]
lines:
  description: The config lines passthrough needs.
  returned: success
  type: list
  elements: str
  sample: ["lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.cgroup2.devices.allow: c 508:* rwm",
           "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]
host_driver:
  description: The NVIDIA kernel module version (null when not read).
  returned: success
  type: str
  sample: "590.48.01"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.node.proxmox_lxc import HostError, host_info


def main():
    module = AnsibleModule(
        argument_spec={
            "vmid": {"type": "int", "required": True},
            "pct": {"type": "path", "default": "/usr/sbin/pct"},
            "config_dir": {"type": "path", "default": "/etc/pve/lxc"},
            "proc_devices": {"type": "path", "default": "/proc/devices"},
            "dev_dir": {"type": "path", "default": "/dev"},
            "device_nodes": {"type": "list", "elements": "str", "default": []},
            "nvidia_major": {"type": "int", "default": 195},
            "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        info = host_info(p["pct"], p["config_dir"], p["vmid"], p["proc_devices"], p["dev_dir"], p["device_nodes"],
                         p["nvidia_major"], p["driver_version_file"] or None)
    except HostError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **info)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: proxmox_lxc_config
short_description: Ensure raw lines in a Proxmox VE container config, in its main section
version_added: "0.1.0"
description:
  - Makes sure every line of I(lines) (for example C(lxc.cgroup2.devices.allow) and
    C(lxc.mount.entry) lines for GPU passthrough) is in the main section of
    C(/etc/pve/lxc/<vmid>.conf), adding the missing ones at the end of that section, before any
    snapshot section (where a plain append would put them).
  - Lines already present (compared ignoring spacing) are left alone, so a second run changes
    nothing. Other lines, comments (the container's description) and snapshots are kept.
  - C(/etc/pve) is the Proxmox cluster file system, which refuses chmod and chown; with
    I(unsafe_writes) the file is rewritten in place when an atomic rename is refused.
  - The module M(community.proxmox.proxmox) (API) has no option for raw C(lxc.*) lines.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  path:
    description: The container config, C(/etc/pve/lxc/<vmid>.conf).
    type: path
    required: true
  lines:
    description: Lines the main section must contain.
    type: list
    elements: str
    required: true
  unsafe_writes:
    description: Rewrite in place when an atomic replace is refused (needed on C(/etc/pve)).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reports the lines it would add; writes nothing.
  diff_mode:
    support: full
    details: Shows the config before and after.
  facts:
    support: none
seealso:
  - module: community.proxmox.proxmox
"""

EXAMPLES = r"""
- name: Pass the GPUs through to container 129
  specbench.core.proxmox_lxc_config:
    path: /etc/pve/lxc/129.conf
    lines:
      - "lxc.cgroup2.devices.allow: c 195:* rwm"
      - "lxc.cgroup2.devices.allow: c 508:* rwm"
      - "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"
      - "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file"
"""

RETURN = r"""
added:
  description: The lines added.
  returned: success
  type: list
  elements: str
  sample: ["lxc.cgroup2.devices.allow: c 195:* rwm"]
path:
  description: The config file.
  returned: success
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.node.proxmox_lxc import ensure_lines


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "lines": {"type": "list", "elements": "str", "required": True},
            "unsafe_writes": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    if not os.path.isfile(path):
        module.fail_json(msg=f"{path} does not exist: is the container defined on this Proxmox node (pct list)? "
                             "Check proxmox_lxc_vmid and proxmox_lxc_config_dir.")
    with open(path, encoding="utf-8") as fh:
        before = fh.read()
    after, added = ensure_lines(before, module.params["lines"])
    result = {"changed": bool(added), "added": added, "path": path}
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    if added and not module.check_mode:
        fd, tmp = tempfile.mkstemp(prefix=".specbench-", dir=module.tmpdir)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(after)
        module.atomic_move(tmp, path, unsafe_writes=module.params["unsafe_writes"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()

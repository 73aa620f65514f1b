#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_scripts_verify
short_description: Compare the scripts on a node with the controller's sha256 manifest
version_added: "0.1.0"
description:
  - For every entry of I(manifest) (from M(specbench.core.bench_scripts_manifest)), hashes the
    node's copy under I(dir) with sha256 and reports it C(ok), C(missing) or C(differs).
  - Returns C(to_copy), the entries to ship again. Changes nothing.
  - Warns when I(dir) is under /tmp, /var/tmp or /dev/shm (tmpfiles cleaning removes files there).
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  dir:
    description: The node folder the entries' C(dest) are relative to.
    type: path
    required: true
  manifest:
    description: Entries with C(src), C(dest), C(sha256) and C(mode).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: none
seealso:
  - module: specbench.core.bench_scripts_manifest
"""

EXAMPLES = r"""
- name: Check the node's copies
  specbench.core.bench_scripts_verify:
    dir: ~/.local/share/specbench
    manifest: "{{ manifest.manifest }}"
  register: scripts
"""

RETURN = r"""
ok:
  description: Files present with the controller's sha256.
  returned: success
  type: list
  elements: str
missing:
  description: Files absent on the node.
  returned: success
  type: list
  elements: str
  sample: [bin/specbench_client.pyz]
differs:
  description: Files whose sha256 differs from the controller's copy.
  returned: success
  type: list
  elements: str
  sample: [sglang_emulator/cli.py]
to_copy:
  description: The manifest entries of the missing and differing files.
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.node.scripts import under_tmp, verify


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "manifest": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    folder = module.params["dir"]
    entries = module.params["manifest"]
    for index, entry in enumerate(entries):
        if not all(entry.get(k) for k in ("dest", "sha256")):
            module.fail_json(msg=f"manifest[{index}] lacks dest or sha256: pass the bench_scripts_manifest result.")
    if under_tmp(folder):
        module.warn(f"{folder} is under a temporary folder, which tmpfiles cleaning empties over time: files can "
                    "vanish between runs (each run ships them again). Set specbench_node_dir (or "
                    "bench_scripts_dir) to a lasting folder such as ~/.local/share/specbench.")
    result = verify(folder, entries)
    wanted = set(result["missing"]) | set(result["differs"])
    to_copy = [e for e in entries if e["dest"] in wanted]
    module.exit_json(changed=False, to_copy=to_copy, **result)


if __name__ == "__main__":
    main()

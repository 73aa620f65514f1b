#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_scripts_install
short_description: Ship scripts to the node in one bundle, each file checked by sha256 before it goes into place
version_added: "0.1.0"
description:
  - Its action plugin writes the I(entries) (manifest entries, e.g. M(specbench.core.bench_scripts_verify)'s
    C(to_copy)) to a tar bundle on the controller, moves it into the task's temporary folder on
    the node (one transfer, whatever the connection) and runs this module there, then removes
    the bundle on both sides.
  - The module creates I(dir) (mode 0755) when missing, checks every member against the
    controller's sha256 in I(entries), writes each beside its destination and renames it into
    place with its mode.
  - A source whose sha256 changed on the controller since the manifest fails, as does a member
    that arrives with another sha256.
  - Uses Python's tarfile (standard library); no tar binary needed on the node.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  dir:
    description: The node folder the entries' C(dest) are relative to.
    type: path
    required: true
  bundle:
    description:
      - The tar bundle on the node (removed afterwards). Set by the action plugin; not a task option.
    type: path
    required: true
  entries:
    description: The manifest entries to install (C(dest), C(sha256), C(mode)).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reports what it would install; writes nothing.
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: none
seealso:
  - module: specbench.core.bench_scripts_manifest
  - module: specbench.core.bench_scripts_verify
"""

EXAMPLES = r"""
- name: Ship what is missing or differs
  specbench.core.bench_scripts_install:
    dir: ~/.local/share/specbench
    entries: "{{ scripts.to_copy }}"
  when: scripts.to_copy | length > 0
"""

RETURN = r"""
installed:
  description: The files written (dest paths).
  returned: success
  type: list
  elements: str
  sample: [sglang_emulator/cli.py, bin/specbench_client.pyz]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.node.scripts import ScriptsError, install


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "bundle": {"type": "path", "required": True},
            "entries": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    dests = [e["dest"] for e in p["entries"]]
    if module.check_mode:
        module.exit_json(changed=bool(dests), installed=dests)
    try:
        os.makedirs(p["dir"], mode=0o755, exist_ok=True)
        installed = install(p["dir"], p["bundle"], p["entries"])
    except (ScriptsError, OSError) as exc:
        module.fail_json(msg=f"could not install the scripts in {p['dir']}: {exc}")
    finally:
        if os.path.exists(p["bundle"]):
            os.unlink(p["bundle"])
    module.exit_json(changed=bool(installed), installed=installed)


if __name__ == "__main__":
    main()

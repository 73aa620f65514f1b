#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_scripts_install
short_description: Unpack a bundle of scripts on the node, each file checked by sha256 first
version_added: "0.1.0"
description:
  - Takes the tar bundle written by M(specbench.core.bench_scripts_manifest) (copied to the node),
    checks every member against the controller's sha256 in I(entries), writes each beside its
    destination and renames it into place with its mode, then removes the bundle.
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
    description: The tar bundle on the node (removed afterwards).
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
- name: Install the shipped bundle
  specbench.core.bench_scripts_install:
    dir: ~/.local/share/specbench
    bundle: ~/.local/share/specbench/.bench-scripts.tar
    entries: "{{ scripts.to_copy }}"
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

from ansible_collections.specbench.core.plugins.module_utils.bench_scripts import ScriptsError, install


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
        installed = install(p["dir"], p["bundle"], p["entries"])
    except (ScriptsError, OSError) as exc:
        module.fail_json(msg=f"could not install the scripts in {p['dir']}: {exc}")
    finally:
        if os.path.exists(p["bundle"]):
            os.unlink(p["bundle"])
    module.exit_json(changed=bool(installed), installed=installed)


if __name__ == "__main__":
    main()

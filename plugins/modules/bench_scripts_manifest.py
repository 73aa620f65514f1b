#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_scripts_manifest
short_description: List the files bench_scripts ships, with their sha256, on the controller
version_added: "0.1.0"
description:
  - Expands the file list (files and folders, relative to I(root)) into one entry per file with
    its source path, its destination relative to the node folder, its sha256 and its mode.
  - It runs on the controller (C(delegate_to) localhost). Its action plugin computes the result in the
    controller's worker process, without starting a Python child. M(specbench.core.bench_scripts_verify)
    compares a node with the result.
  - Folders are walked recursively, leaving out C(__pycache__) and compiled files.
  - An entry with C(build=zipapp) ships a Python package folder as one runnable file (a zipapp
    that runs the package's C(__main__)), built here at ship time, deterministically (sorted
    members, fixed timestamps), so its sha256 is stable.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  root:
    description: The folder the C(src) paths are relative to (the collection root).
    type: path
    required: true
  files:
    description:
      - Entries with C(src) (file or folder under I(root)), C(dest) (relative to the node folder),
        C(mode) (default C(0644)), C(optional) (skip, and say so, when the source is absent) and
        C(build) (C(zipapp) ships the package folder C(src) as one file built from it).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Read-only.
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: none
seealso:
  - module: specbench.core.bench_scripts_verify
"""

EXAMPLES = r"""
- name: List what ships, with checksums
  specbench.core.bench_scripts_manifest:
    root: "{{ playbook_dir }}"
    files:
      - {src: plugins/module_utils/specbench_client, dest: bin/specbench_client.pyz, mode: "0755", build: zipapp}
      - {src: files/sglang_emulator, dest: sglang_emulator}
  delegate_to: localhost
  run_once: true
  register: manifest
"""

RETURN = r"""
manifest:
  description: One entry per file.
  returned: success
  type: list
  elements: dict
  sample:
    - src: /srv/specbench/files/sglang_emulator/cli.py
      dest: sglang_emulator/cli.py
      sha256: 9f2c1e0d6b6a4f3e2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f
      mode: "0644"
skipped:
  description: Optional entries whose source is absent on the controller.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.node.scripts import (
    MANIFEST_ARGUMENT_SPEC,
    ScriptsError,
    manifest_result,
)


# The action plugin of the same name (plugins/action/bench_scripts_manifest.py) runs the same
# code on the controller without starting this module; this entry point serves ansible-doc and
# a direct run of the module.
def main():
    module = AnsibleModule(argument_spec=MANIFEST_ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = manifest_result(module.params)
    except ScriptsError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"cannot read a file to ship: {exc}")
    for item in result["skipped"]:
        module.warn(f"not shipped: {item}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

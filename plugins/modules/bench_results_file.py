#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Documentation of the bench_results_file action plugin (the work runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_results_file
short_description: Record the GPU state in a mode's results file on the controller and file it under the run's tag
version_added: "0.1.0"
description:
  - Role bench_mode's last step for one mode, on the controller, where role bench_sweep wrote the results file.
  - Puts I(gpu) (the GPU state before the launch and after the teardown) into I(results_file) under the key
    C(gpu), when the sweep wrote the file; the rest of the file is kept.
  - With I(tagged_file) (compare_launches, refinement rounds), then moves the file there, and moves
    I(held_file) (the untagged file the role set aside before the run), when present, back to I(results_file).
  - Every write is atomic (a temporary file, then a rename); the file is written with mode C(0644).
  - Runs in the controller's worker through its action plugin; nothing runs on a node.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  results_file:
    description: The mode's results file, C(<results_dir>/<run_id>/<host>/<mode>.json). Absent when nothing was measured.
    type: path
    required: true
  gpu:
    description: The GPU state to record (role bench_mode's C(bench_mode_gpu_record)).
    type: dict
    required: true
  tagged_file:
    description: Where a tagged run's results go, C(<mode>@<tag>.json) beside I(results_file).
    type: path
  held_file:
    description: The untagged file set aside before a tagged run; put back once the run is filed. Only with I(tagged_file).
    type: path
attributes:
  check_mode:
    support: none
    details: Role bench_mode does not call it in check mode (nothing was measured).
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: none
seealso:
  - module: specbench.core.bench_sweep
"""

EXAMPLES = r"""
- name: Record the GPU state in the results file, then file it as eagle3@launch2.json
  specbench.core.bench_results_file:
    results_file: results/run1/node1/eagle3.json
    gpu: "{{ bench_mode_gpu_record }}"
    tagged_file: results/run1/node1/eagle3@launch2.json
    held_file: results/run1/node1/.eagle3.json.held
"""

RETURN = r"""
recorded:
  description: The results file the GPU state was written into; null when the sweep wrote none.
  returned: always
  type: str
filed_as:
  description: Where the results file was moved (I(tagged_file)); null when not moved.
  returned: always
  type: str
restored:
  description: Where the file set aside was put back (I(results_file)); null when there was none.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.report.results_file import ARGUMENT_SPEC


def main():
    # The options are declared here for the documentation's sake; the action plugin does the work.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False, bypass_checks=True)
    module.fail_json(
        msg="specbench.core.bench_results_file runs on the controller through its action plugin; "
        "call it as a task (specbench.core.bench_results_file), not as a module on a host"
    )


if __name__ == "__main__":
    main()

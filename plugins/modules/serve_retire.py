#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_retire
short_description: Retire the serve.json records of a host that no longer serves them
version_added: "0.1.0"
description:
  - Run on the controller (with C(delegate_to) localhost). Every run's C(<results_dir>/<run>/<host>/serve.json)
    that still says it is served (at I(base_url), or anywhere on the host without it) gets C(state=retired),
    C(retired_why) and C(retired_at); its proof is kept. playbooks/serve.yml runs it for
    C(serve_state=absent), then re-renders those runs' reports (their Served section says no longer served).
  - C(specbench_compare.retire_others).
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  results_dir:
    description: The results folder on the controller.
    type: path
    required: true
  host:
    description: The host's folder in each run.
    type: str
    required: true
  base_url:
    description: Only the records served at this address (the node's launch record's); all of the host's when unset.
    type: str
  why:
    description: Why they are retired (kept in each record as C(retired_why)).
    type: str
    required: true
attributes:
  check_mode:
    support: full
    details: Says which records would be retired, writes nothing.
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: Retire what this host no longer serves
  specbench.core.serve_retire:
    results_dir: results
    host: "{{ inventory_hostname }}"
    why: stopped by serve.yml -e serve_state=absent
  delegate_to: localhost
"""

RETURN = r"""
retired:
  description: The run ids whose serve.json was retired.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp


def main():
    module = AnsibleModule(
        argument_spec={
            "results_dir": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "base_url": {"type": "str"},
            "why": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    retired = cmp.retire_others(p["results_dir"], p["host"], p["base_url"] or None, None, p["why"],
                                write=not module.check_mode)
    module.exit_json(changed=bool(retired) and not module.check_mode, retired=retired)


if __name__ == "__main__":
    main()

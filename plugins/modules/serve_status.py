#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_status
short_description: Whether the server a node's launch record names still runs, answers, and runs a given command
version_added: "0.1.0"
description:
  - Reads the node's launch records (one per launch, C(state/servers/<port>.json), written by
    M(specbench.core.sglang_launch)), picks the service the node runs (serve.yml's service that runs, else
    any recorded server that runs, else the last service recorded), and
    says whether the recorded server runs (same pid and process start time; for a systemd unit, the
    unit active and its main pid the recorded one), whether its C(/health) answers 200, and whether
    its command is I(command). playbooks/serve.yml launches nothing when all three hold (and serve.json
    says the configuration was proved).
  - Also says whether a systemd unit can be started here (C(systemd_scope)), so that serve.yml refuses
    C(serve_launcher=systemd) in its preflight, before anything is touched.
  - Changes nothing.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  state_dir:
    description:
      - The node's folder of launch records (C(state/servers)). The single C(server.json) beside it, the
        record file of releases before one record per launch, is read too.
    type: path
    required: true
  command:
    description: The command expected to run (serve.json's C(launch_command)); empty matches nothing.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: Is the served configuration still up
  specbench.core.serve_status:
    state_dir: ~/.local/share/specbench/state/servers
    command: "{{ serve_plan_result.current.launch_command | default([]) }}"
  register: status
"""

RETURN = r"""
record_path:
  description: The launch record file read (null when the node has none).
  returned: success
  type: str
running:
  description: The recorded server still runs.
  returned: success
  type: bool
healthy:
  description: Its /health answered 200.
  returned: success
  type: bool
same:
  description: Its command is I(command).
  returned: success
  type: bool
record:
  description: The launch record (empty when there is none).
  returned: success
  type: dict
adaptive_config_file:
  description: >-
    The adaptive table file the recorded server reads (its C(--speculative-adaptive-config)), when specbench wrote it
    in the node's state folder (the launch role's C(adaptive-config.json), serve.yml's
    C(serve-adaptive-config-<hash>.json)); null otherwise, a file the user gave included. serve.yml removes it with
    the service it belonged to (serve_state=absent, a replacement that started).
  returned: success
  type: str
systemd_scope:
  description: >-
    C(system) (systemd is the system manager and this is root), C(user) (a user manager runs for this user), or
    null (no unit can be started here: serve.yml's launcher is then a session).
  returned: success
  type: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.launch.process import (
    http_get,
    record_adaptive_file,
    recorded_alive,
    served_record,
)
from ansible_collections.specbench.core.plugins.module_utils.launch.unit import systemd_scope


def main():
    module = AnsibleModule(
        argument_spec={
            "state_dir": {"type": "path", "required": True},
            "command": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    # the node's state/ folder, where specbench's adaptive table files lie beside state/servers
    state_folder = os.path.dirname(os.path.abspath(module.params["state_dir"]))
    record_path, record = served_record(module.params["state_dir"])
    running = recorded_alive(record)
    healthy = False
    if running and record.get("base_url"):
        status, _body = http_get(str(record["base_url"]).rstrip("/") + "/health", timeout=5)
        healthy = status == 200
    same = bool(module.params["command"]) and record.get("command") == module.params["command"]
    scope = systemd_scope() if shutil.which("systemctl") else None
    table = record_adaptive_file(record, state_folder)
    module.exit_json(changed=False, running=running, healthy=healthy, same=same, record=record, record_path=record_path,
                     systemd_scope=scope, adaptive_config_file=table)


if __name__ == "__main__":
    main()

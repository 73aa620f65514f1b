#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_launch
short_description: Start an SGLang server detached, in its own process group or a transient systemd unit
version_added: "0.1.0"
description:
  - Starts I(argv) detached from Ansible (stdin from /dev/null, stdout and stderr appended to
    I(log_path), no pipe of Ansible's held), either in a new session and process group
    (C(session)) or as a transient systemd service (C(systemd), where systemd is the system
    manager and this is root). C(auto) picks systemd where it runs.
  - Records pid, process start time, process group and unit in I(state_path) (JSON) at once, so a
    later, separate teardown run signals exactly this server's group even if startup fails.
  - A port already in use fails before launching with the name and pid of its holder.
  - Idempotent. When I(state_path) records a server that still runs (same pid and start time)
    with the same command, nothing is started and C(changed) is false. A recorded server that
    still runs with another command is refused (tear it down first).
  - Does not wait for readiness; see M(specbench.core.sglang_ready).
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  argv:
    description: The command, interpreter first (as returned by M(specbench.core.sglang_command)).
    type: list
    elements: str
    required: true
  log_path:
    description: File the server's output is appended to (created with its folder).
    type: path
    required: true
  state_path:
    description:
      - JSON record of the launched server (pid, starttime, pgid, unit, command...), one per launch
        (the launch roles use C(state/servers/<port>.json) in the node folder, which the teardown reads whole).
    type: path
    required: true
  host:
    description: The address the server binds (for the port check).
    type: str
    default: 127.0.0.1
  port:
    description: The port the server binds (for the port check).
    type: int
    required: true
  launcher:
    description:
      - C(session) (own session and process group), C(systemd) (transient unit) or C(auto) (systemd
        where it runs as the system manager and this is root).
      - A systemd unit gets an explicit environment, the session's C(CUDA_*), C(HF_*), C(NCCL_*),
        C(PATH), C(HOME), C(LD_LIBRARY_PATH) and C(VIRTUAL_ENV) plus I(environment).
    type: str
    choices: [auto, session, systemd]
    default: session
  unit:
    description: Name of the transient systemd unit (launcher C(systemd)).
    type: str
    default: specbench-sglang
  chdir:
    description: Working directory of the server (created if missing).
    type: path
    required: true
  service:
    description:
      - A lasting service (playbooks/serve.yml). With C(systemd), a persistent unit file
        C(specbench-<engine>-<port>.service) (in C(/etc/systemd/system) as root, C(~/.config/systemd/user) otherwise;
        C(launch/unit.py), C(service_unit)), enabled so it starts after a reboot, restarted on failure, logging to
        journald (C(journalctl -u) the unit); I(unit) is then unused. With C(session), the server is never restarted,
        and its log moves to C(<log>.1) at a launch when over 64 MiB.
    type: bool
    default: false
  environment:
    description: Extra environment variables for the server.
    type: dict
    default: {}
  record:
    description: Further fields stored in the state file (mode, engine...).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Checks the port and the recorded server, reports what it would start, starts nothing.
  diff_mode:
    support: none
  facts:
    support: none
notes:
  - The server is not a child Ansible waits for; stop it through the recorded process group or
    unit (role specbench.core.gpu_teardown).
seealso:
  - module: specbench.core.sglang_command
  - module: specbench.core.sglang_ready
"""

EXAMPLES = r"""
- name: Launch the server
  specbench.core.sglang_launch:
    argv: "{{ launch_command.argv }}"
    port: 30000
    log_path: ~/.local/share/specbench/logs/sglang-eagle3.log
    state_path: ~/.local/share/specbench/state/servers/30000.json
    chdir: ~/.local/share/specbench/run
    record:
      mode: eagle3
      engine: sglang
  register: launched
"""

RETURN = r"""
pid:
  description: The server's process id (main process).
  returned: success and not check mode
  type: int
  sample: 31330
pgid:
  description: The server's process group (its workers share it).
  returned: success and not check mode
  type: int
  sample: 31330
starttime:
  description: The server's start time (field 22 of /proc/<pid>/stat), which tells a reused pid apart.
  returned: success and not check mode
  type: int
unit:
  description: The transient systemd unit, or null when launched in a session.
  returned: success
  type: str
launcher:
  description: C(session) or C(systemd).
  returned: success
  type: str
log_path:
  description: The log file.
  returned: success
  type: str
log_offset:
  description: Where this launch's output starts in the log (bytes).
  returned: success and not check mode
  type: int
command:
  description: The command started (argv list).
  returned: success
  type: list
  elements: str
already_running:
  description: True when the recorded server already ran this command (nothing started).
  returned: success
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.launch.process import (
    LaunchError,
    check_port,
    choose_launcher,
    launch,
    read_state,
    recorded_alive,
    write_state,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table


def _visible_gpus(extra: dict) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as the server sees it (the launch's environment over this one's)."""
    value = (extra or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if value is None or not str(value).strip():
        return None
    return [part.strip() for part in str(value).split(",") if part.strip()]


def main():
    module = AnsibleModule(
        argument_spec={
            "argv": {"type": "list", "elements": "str", "required": True},
            "log_path": {"type": "path", "required": True},
            "state_path": {"type": "path", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "required": True},
            "launcher": {"type": "str", "choices": ["auto", "session", "systemd"], "default": "session"},
            "unit": {"type": "str", "default": "specbench-sglang"},
            "chdir": {"type": "path", "required": True},
            "environment": {"type": "dict", "default": {}},
            "service": {"type": "bool", "default": False},
            "record": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    argv = p["argv"]
    state = read_state(p["state_path"])
    if recorded_alive(state):
        if state.get("command") == argv:
            module.exit_json(changed=False, already_running=True, **{
                k: state.get(k) for k in ("pid", "pgid", "starttime", "unit", "launcher", "log_path", "log_offset")
            }, command=argv)
        module.fail_json(
            msg=(f"a server specbench launched still runs (pid {state.get('pid')}, process group "
                 f"{state.get('pgid')}, mode {state.get('mode')}, recorded in {p['state_path']}) with another "
                 "command: tear it down first (role specbench.core.gpu_teardown), then launch again."),
            recorded=state,
        )
    try:
        check_port(p["host"], p["port"])
        launcher = choose_launcher(p["launcher"], p["service"])
        if module.check_mode:
            module.exit_json(changed=True, already_running=False, launcher=launcher, command=argv,
                             unit=p["unit"] if launcher == "systemd" else None, log_path=p["log_path"])
        started = launch(argv, p["log_path"], launcher, p["unit"], p["chdir"], p["environment"], p["service"],
                         engine=str(p["record"].get("engine") or "server"), port=p["port"])
    except LaunchError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"could not launch the server: {exc}")
    record = dict(p["record"])
    record.update(started)
    record.update({"command": argv, "log_path": p["log_path"], "host": p["host"], "port": p["port"],
                   "service": p["service"],  # serve.yml's lasting service: the teardown names it (launch/unit.py)
                   "launched_by": "specbench.core.sglang_launch", "node_pid_namespace": _pid_ns(),
                   "launched_at": round(time.time(), 3),  # the last launched, of a node's records (served_record)
                   # the teardown verifies the tree by session and boot (plugins/module_utils/teardown/record.py)
                   "sid": _sid(started.get("pid")), "boot_id": proc_table.boot_id(),
                   # the GPUs it may use (CUDA_VISIBLE_DEVICES; null: every GPU): a teardown with gpu_devices
                   # touches this record only when they meet (plugins/module_utils/teardown/record.py)
                   "gpus": _visible_gpus(p["environment"])})
    write_state(p["state_path"], record)
    module.exit_json(changed=True, already_running=False, command=argv, log_path=p["log_path"], **started)


def _sid(pid):
    try:
        return os.getsid(pid) if pid else None
    except OSError:
        return None


def _pid_ns():
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


if __name__ == "__main__":
    main()

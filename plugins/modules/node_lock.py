#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_lock
short_description: Hold the node lock for one playbook run (one job at a time per node)
version_added: "0.1.0"
description:
  - Takes an C(flock) on C(path) (by default C(node.lock) in the node folder) for the playbook run
    named by C(token), so that a second job launching, benchmarking, serving or tearing down on the
    same node waits or fails naming the first.
  - The lock is kept by a small daemon (C(specbench-lock) in ps) that the module forks. The kernel
    drops the lock when that daemon dies, and it exits when its holder does (C(ansible-playbook)
    under a local connection, the SSH connection's sshd otherwise), when released, or after
    C(max_hold_s) when it has nothing to watch. A lock never outlives its holder.
  - A run that holds the lock already (same C(token)) gets it again at once.
  - "C(node.lock.json) beside the lock names the holder: run id, playbook, user, since when, AWX job
    id and the daemon's pid. The lock file is opened without following symbolic links and without
    blocking, and refused unless it is a regular file of this user."
  - In check mode nothing is taken; the result says whether the lock is free.
  - Never reports C(changed), so a second run of a playbook changes nothing; the lock lasts only as
    long as the run that holds it and leaves the node as it was.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment: [specbench.core.attributes]
attributes:
  check_mode:
    support: full
    details: Takes and releases nothing; says whether the lock is free.
  diff_mode:
    support: none
  facts:
    support: none
options:
  path:
    description: The lock file (created when missing).
    type: path
    required: true
  state:
    description: C(held) takes the lock (waiting up to C(wait_s)); C(released) gives this run's lock back.
    type: str
    choices: [held, released]
    default: held
  token:
    description: Identifies this playbook run (one value for every task of the run on this host).
    type: str
    required: true
  run_id:
    description: The run id, for the holder's description.
    type: str
  playbook:
    description: The playbook, for the holder's description.
    type: str
  user:
    description: Who runs it (the controller's user), for the holder's description.
    type: str
  awx_job_id:
    description: The AWX job id, when run from AWX.
    type: str
  wait_s:
    description: How long to wait for another job's lock before failing (0 fails at once).
    type: float
    default: 300
  poll_s:
    description: How often to try the lock while waiting, and how often the daemon checks its holder.
    type: float
    default: 0.2
  max_hold_s:
    description: With no holder process to watch (neither ansible-playbook nor sshd), how long the lock is kept at most.
    type: float
    default: 86400
  served_record:
    description:
      - The node's folder of launch records (C(state/servers), one per launch; the single C(server.json) beside
        it, of earlier releases, is read too). When given, also says whether the node's service runs and is
        serve.yml's (C(served)), read once the lock is held (in check mode, without it), so that bench, compare
        and teardown refuse a served node before they touch anything.
    type: path
  orphan_records:
    description:
      - The node's folder of launch records (C(state/servers)). When given, and the process the keeper watches ends
        without this run having released the lock (an AWX cancel, Ctrl-C, a kill, a lost SSH connection), the keeper,
        still holding the lock, stops every measuring launch (not serve.yml's service) recorded while it held the
        lock whose leader still runs at the head of its recorded process group (SIGTERM, after I(orphan_term_s)
        SIGKILL), retires its record and appends a line to C(orphans.jsonl) beside the folder.
      - A run that ends, failed or not, tore its launches down itself; nothing is stopped after a release. GPU memory
        is not read here; the next run's teardown proves the GPUs clean.
    type: path
  orphan_term_s:
    description: Seconds the keeper waits after SIGTERM before it sends SIGKILL to a launch left behind.
    type: float
    default: 15
"""

EXAMPLES = r"""
- name: Hold the node lock for this run
  specbench.core.node_lock:
    path: "{{ specbench_node_dir }}/node.lock"
    token: "{{ specbench_node_lock_token }}"
    run_id: "{{ specbench_run_id }}"
    playbook: bench
    wait_s: 300
"""

RETURN = r"""
holder:
  description: >-
    The holder record (token, run_id, playbook, user, awx_job_id, since, since_unix, pid, starttime, watching).
  returned: always
  type: dict
already:
  description: This run held the lock already.
  returned: when state is held
  type: bool
waited_s:
  description: Seconds waited for another job's lock.
  returned: when state is held
  type: float
released:
  description: This run's lock was given back.
  returned: when state is released
  type: bool
served:
  description: >-
    With I(served_record): C(running) (the recorded server still runs: same pid and process start time),
    C(service) (it is serve.yml's service) and C(record) (the launch record, empty when there is none).
  returned: when served_record is given and state is held
  type: dict
msg:
  description: What happened, or on failure who holds the lock and the fix.
  returned: always
  type: str
"""

import fcntl
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.launch.orphans import stop_orphans
from ansible_collections.specbench.core.plugins.module_utils.launch.process import recorded_alive, served_record
from ansible_collections.specbench.core.plugins.module_utils.node.lock import (
    LockError,
    acquire,
    describe,
    open_lock_file,
    read_holder,
    release,
)


def served(state_dir: str | None) -> dict:
    """Whether the node's launch records in ``state_dir`` name a server that still runs, and
    serve.yml's service (launch/process.py, served_record)."""
    if not state_dir:
        return {}
    _path, record = served_record(state_dir)
    running = recorded_alive(record)
    return {"served": {"running": running, "service": running and bool(record.get("service")), "record": record}}


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "default": "held", "choices": ["held", "released"]},
            "token": {"type": "str", "required": True, "no_log": False},
            "run_id": {"type": "str"},
            "playbook": {"type": "str"},
            "user": {"type": "str"},
            "awx_job_id": {"type": "str"},
            "wait_s": {"type": "float", "default": 300},
            "poll_s": {"type": "float", "default": 0.2},
            "max_hold_s": {"type": "float", "default": 86400},
            "served_record": {"type": "path"},
            "orphan_records": {"type": "path"},
            "orphan_term_s": {"type": "float", "default": 15},
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("wait_s", "poll_s", "max_hold_s", "orphan_term_s"):
        if p[name] < 0 or (name in ("poll_s", "max_hold_s") and p[name] == 0):
            allowed = {"wait_s": " (0 allowed: fail at once)", "orphan_term_s": " (0 allowed: SIGKILL at once)"}
            module.fail_json(msg=f"node_lock {name} is {p[name]}: it must be a number of seconds above 0"
                                 f"{allowed.get(name, '')}.", error="bad_input")
    path = p["path"]
    if p["state"] == "released":
        done = False if module.check_mode else release(path, p["token"])
        module.exit_json(changed=False, released=done, holder=read_holder(path),
                         msg="node lock released" if done else "this run held no node lock")
    if module.check_mode:
        holder = read_holder(path)
        free = True
        try:
            fd = open_lock_file(path) if os.path.exists(path) else None
        except LockError as exc:
            module.fail_json(msg=str(exc), error="bad_lock_file")
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                free = False
            finally:
                os.close(fd)
        held = "it is free" if free else f"held by {describe(holder)}"
        module.exit_json(changed=False, holder=holder if not free else {}, already=False, waited_s=0.0,
                         **served(p["served_record"]), msg="check mode: took no lock; " + held)
    who = {k: p[k] for k in ("run_id", "playbook", "user", "awx_job_id")}
    try:
        on_gone = None
        if p["orphan_records"]:
            def on_gone(since, records=p["orphan_records"], term_s=p["orphan_term_s"]):
                stop_orphans(records, since, term_s)
        holder = acquire(path, p["token"], who, p["wait_s"], p["poll_s"], p["max_hold_s"], on_holder_gone=on_gone)
    except LockError as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, error="node_locked")
    already = holder.pop("already")
    msg = ("this run holds the node lock already" if already else
           f"node lock held by this run (waited {holder.get('waited_s', 0.0)}s; released when "
           f"{holder['watching']['what']} ends)")
    module.exit_json(changed=False, holder=holder, already=already, waited_s=holder.get("waited_s", 0.0),
                     **served(p["served_record"]), msg=msg)


if __name__ == "__main__":
    main()

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Launches a run left behind: the servers a bench, compare or serve run launched for measuring
(not serve.yml's lasting service) that still run when the run itself is gone.

Every playbook tears its launches down in the role's ``always`` part (roles/bench_mode/tasks/run.yml),
so a measuring launch outlives its run only when ansible-playbook was killed: an AWX cancel
(ansible-runner's SIGKILL to its process group), Ctrl-C, a kill, a lost SSH connection. The node
lock's keeper notices that (plugins/module_utils/node/lock.py) and, still holding the lock, calls
``stop_orphans``: so the GPUs are not held by a server nobody measures, and a job waiting for the
lock finds them free. A launch is stopped only when its record says it was launched while this
lock was held (``launched_at``), is not a service, is not retired, and its leader still runs as
recorded (pid and start time) at the head of its recorded process group; the group is sent
SIGTERM, then SIGKILL, and the record retired once no member is left. GPU memory is not read
here: the next run's teardown proves the GPUs clean as always.

Standard library only (it runs on the managed node, in the lock's keeper).
"""
from __future__ import annotations

import json
import os
import signal
import time

from ansible_collections.specbench.core.plugins.module_utils.launch.process import node_records, recorded_alive
from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.record import retire_state_file

REASON = ("the run that launched it ended without tearing it down (ansible-playbook gone: an AWX cancel, Ctrl-C, "
          "a kill or a lost connection); stopped by the node lock's keeper")
BY = "specbench.core.node_lock (the lock's keeper)"
LOG_NAME = "orphans.jsonl"


def _members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for pid in proc_table.pids():
        info = proc_table.read_proc(pid)
        if info is not None and info.pgid == pgid and info.state not in ("Z", "X"):
            found.append(pid)
    return found


def _leads_its_group(record: dict) -> int | None:
    """The recorded process group, when the recorded leader still runs (pid and start time) in it."""
    try:
        pid, pgid = int(record.get("pid") or 0), int(record.get("pgid") or 0)
    except (TypeError, ValueError):
        return None
    if pid <= 1 or pgid <= 1 or not recorded_alive(record):
        return None
    info = proc_table.read_proc(pid)
    return pgid if info is not None and info.pgid == pgid else None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_empty(pgid: int, timeout_s: float, clock, sleep) -> bool:
    deadline = clock() + timeout_s
    while _members(pgid):
        if clock() >= deadline:
            return False
        sleep(0.05)
    return True


def orphans(state_dir: str, since: float) -> list[tuple[str, dict, int]]:
    """(path, record, process group) of each measuring launch recorded at or after ``since`` (unix
    seconds) that still runs at the head of its recorded group."""
    found = []
    for path, record in node_records(state_dir):
        if record.get("service") or record.get("torn_down"):
            continue
        try:
            launched = float(record.get("launched_at") or 0)
        except (TypeError, ValueError):
            continue
        if launched < since:
            continue
        pgid = _leads_its_group(record)
        if pgid is not None:
            found.append((path, record, pgid))
    return found


def stop_orphans(state_dir: str, since: float, term_s: float = 15.0, kill_s: float = 10.0,
                 clock=time.monotonic, sleep=time.sleep) -> list[dict]:
    """Stop the measuring launches recorded since ``since`` that outlived their run; one entry per
    launch stopped (or tried), also appended to ``orphans.jsonl`` beside ``state_dir``."""
    done = []
    for path, record, pgid in orphans(state_dir, since):
        entry = {"record": path, "pid": record.get("pid"), "pgid": pgid, "mode": record.get("mode"),
                 "port": record.get("port"), "launched_at": record.get("launched_at"), "signals": ["SIGTERM"]}
        _signal_group(pgid, signal.SIGTERM)
        gone = _wait_empty(pgid, term_s, clock, sleep)
        if not gone:
            entry["signals"].append("SIGKILL")
            _signal_group(pgid, signal.SIGKILL)
            gone = _wait_empty(pgid, kill_s, clock, sleep)
        warnings: list[str] = []
        entry["stopped"] = gone
        entry["retired"] = gone and retire_state_file(path, record, REASON, warnings, by=BY)
        entry["warnings"] = warnings
        entry["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        done.append(entry)
        _log(state_dir, entry)
    return done


def _log(state_dir: str, entry: dict) -> None:
    """One line per launch stopped, in the node's state folder (read by whoever inspects the node)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(state_dir)), LOG_NAME), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError:
        pass

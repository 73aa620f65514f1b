"""Issue 19, item 1: a stale server record never kills an unrelated process, and the record
is retired (rewritten with ``torn_down``) once the tree it names is proven gone. Each test in a PID namespace of its own,
through the role (ansible-runner), on emulated GPUs.

The pid of the recorded server is really reused: the server exits, /proc/sys/kernel/ns_last_pid
(writable by root in the test's own PID namespace) makes the next fork get its pid, and that
next process is a launcher that starts its own session, forks a child and exits (a daemon's
double fork): the child, a "notebook server" (no GPU, no pattern match), sits in the recorded
process group and session.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from td_support import run_playbook

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]

DAEMON = (
    "import os, sys\n"
    "os.setsid()\n"
    "if os.fork() == 0:\n"
    "    null = os.open(os.devnull, os.O_RDWR)\n"
    "    for fd in (0, 1, 2):\n"
    "        os.dup2(null, fd)\n"
    "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]])\n"
    "print(os.getpid(), flush=True)\n"
)


def next_pid_is(pid: int) -> None:
    """The next process forked in this PID namespace gets ``pid`` (root in its own namespace)."""
    with open("/proc/sys/kernel/ns_last_pid", "w", encoding="ascii") as fh:
        fh.write(str(pid - 1))


def reused_by_a_daemon(lab, pid: int) -> int:
    """A launcher with ``pid`` starts a session, forks a child and exits; the child's pid."""
    next_pid_is(pid)
    launcher = subprocess.run([sys.executable, "-c", DAEMON, lab.tag], capture_output=True, text=True,
                              check=True, timeout=30)
    assert int(launcher.stdout) == pid, "the pid was not reused (another fork came first)"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = [i for i in proc_table.snapshot().values() if i.sid == pid and i.pid != pid]
        if children:
            return children[0].pid
        time.sleep(0.02)
    raise AssertionError("the daemon's child did not start")


def test_a_reused_pid_whose_daemon_child_sits_in_the_recorded_group_is_left_alone(lab, tmp_path):
    assert os.getpid() == 1
    server, workers = lab.server(gpus_used=(0,))
    record = lab.write_server_record(server.pid, server.pid)
    os.kill(workers[0], 9)
    server.kill()
    server.wait()
    os.waitpid(workers[0], 0)  # reparented to this test (init here): reaped, so no group keeps the pid
    notebook = reused_by_a_daemon(lab, server.pid)
    info = proc_table.read_proc(notebook)
    assert (info.pgid, info.sid) == (server.pid, server.pid)  # in the recorded group and session
    assert info.starttime > json.loads(record.read_text())["starttime"]

    play = run_playbook(tmp_path, lab.extravars())
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert res["killed"] == [] and proc_table.alive(notebook)
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert "not verifiably the recorded server's" in left[notebook]
    assert json.loads(record.read_text())["torn_down"]["reason"] == "no process of the recorded tree is left"
    assert res["recorded_server_retired"] is True
    # read again by a later run: it names nothing, nothing is killed
    again = run_playbook(tmp_path, lab.extravars()).task("Kill the server and the device holders")
    assert "retired" in again["recorded_pgid_source"] and again["recorded_pgid"] is None and again["killed"] == []
    assert proc_table.alive(notebook)


def test_a_record_from_an_earlier_boot_is_void(lab, tmp_path):
    """The record names a live process with its pid and start time, but another boot's id: it is
    not the server (after a reboot pids and start times start over); nothing is signalled."""
    server, _unused = lab.start("--nodes", "nvidiactl", "--comm", "td-server")
    record = lab.write_server_record(server.pid, server.pid)
    record.write_text(json.dumps({**json.loads(record.read_text()), "boot_id": "0f0f0f0f-earlier-boot"}))

    play = run_playbook(tmp_path, lab.extravars())
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert res["killed"] == [] and proc_table.alive(server.pid)
    assert any("earlier boot" in w for w in res.get("warnings", [])), res.get("warnings")
    assert "earlier boot" in json.loads(record.read_text())["torn_down"]["reason"]
    assert res["recorded_server_retired"] is True


def test_the_record_is_retired_after_the_tree_is_gone(lab, tmp_path):
    server, workers = lab.server(gpus_used=(0, 1))
    record = lab.write_server_record(server.pid, server.pid)
    assert json.loads(record.read_text())["boot_id"] == proc_table.boot_id()
    play = run_playbook(tmp_path, lab.extravars())
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert {k["pid"] for k in res["killed"]} == {server.pid, *workers}
    assert json.loads(record.read_text())["torn_down"]["by"] == "specbench.core.gpu_teardown"
    assert res["recorded_server_retired"] is True

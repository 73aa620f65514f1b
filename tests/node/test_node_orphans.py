"""Launches a killed run left behind (module_utils/launch/orphans.py), and the node lock's keeper that
stops them (module_utils/node/lock.py), with real processes: only the measuring launches recorded while
the lock was held, still running as recorded, are stopped (their whole process group, SIGKILL after the
grace when SIGTERM is ignored); serve.yml's service, an earlier run's launch and a record whose pid now
names another process are left alone. The keeper stops them while it still holds the lock, and only
when its holder vanished: never after the run released it.

Every process signalled here is one this test started, in its own session."""
from __future__ import annotations

import calendar
import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from nodekit import emulator_vars, flock_free
from specbench_testkit import free_port, inventory, start_playbook

from ansible_collections.specbench.core.plugins.module_utils.launch import orphans
from ansible_collections.specbench.core.plugins.module_utils.node import lock
from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

# A "server": the leader of its own session with a worker child in its group (as an engine's scheduler
# processes are); with "ignore", both ignore SIGTERM (a server stuck in its shutdown).
SERVER = """
import signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                          "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                          "time.sleep(300)", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(300)
"""


class Servers:
    """The servers this test started; every one killed (by its group) at the end, whatever happened."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, how: str = "plain") -> tuple[subprocess.Popen, int]:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, how], start_new_session=True,
                                stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        child = int(proc.stdout.readline())
        return proc, child

    def close(self):
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture
def servers():
    made = Servers()
    yield made
    made.close()


def record(state_dir, port: int, proc, launched_at: float, **more) -> str:
    path = state_dir / f"{port}.json"
    data = {"pid": proc.pid, "pgid": os.getpgid(proc.pid), "sid": os.getsid(proc.pid),
            "starttime": proc_table.starttime(proc.pid), "launched_at": launched_at, "port": port,
            "mode": f"mode-{port}", "service": False, "launcher": "session"}
    data.update(more)
    path.write_text(json.dumps(data))
    return str(path)


def gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while proc_table.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not proc_table.alive(pid)


def test_only_the_measuring_launches_of_the_hold_that_still_run_as_recorded_are_stopped(tmp_path, servers):
    state_dir = tmp_path / "node" / "state" / "servers"
    state_dir.mkdir(parents=True)
    since = time.time()
    left, left_child = servers.start()
    stuck, stuck_child = servers.start("ignore")
    service, service_child = servers.start()
    earlier, earlier_child = servers.start()
    reused, reused_child = servers.start()
    record(state_dir, 30001, left, since + 1)
    record(state_dir, 30002, stuck, since + 2)
    record(state_dir, 30003, service, since + 3, service=True)          # serve.yml's service: never
    record(state_dir, 30004, earlier, since - 60)                       # launched before this hold
    record(state_dir, 30005, reused, since + 5, starttime=1)            # the pid now names another process
    (state_dir / "30006.json").write_text("not json")                   # unreadable: skipped

    done = orphans.stop_orphans(str(state_dir), since, term_s=0.5, kill_s=10)

    assert [(d["port"], d["signals"], d["stopped"], d["retired"]) for d in done] == [
        (30001, ["SIGTERM"], True, True), (30002, ["SIGTERM", "SIGKILL"], True, True)], done
    for pid in (left.pid, left_child, stuck.pid, stuck_child):  # the whole group, the worker child included
        assert gone(pid, 1), pid
    for pid in (service.pid, service_child, earlier.pid, earlier_child, reused.pid, reused_child):
        assert proc_table.alive(pid), pid
    for port in (30001, 30002):
        torn = json.loads((state_dir / f"{port}.json").read_text())["torn_down"]
        assert torn["by"] == orphans.BY and "AWX cancel" in torn["reason"], torn
    for port in (30003, 30004, 30005):
        assert "torn_down" not in json.loads((state_dir / f"{port}.json").read_text())
    logged = [json.loads(line) for line in (tmp_path / "node" / "state" / "orphans.jsonl").read_text().splitlines()]
    assert [(e["port"], e["pid"], e["stopped"]) for e in logged] == [(30001, left.pid, True), (30002, stuck.pid, True)]
    # Nothing more to stop: a second call (another host of the run, the same node folder) finds nothing.
    assert orphans.stop_orphans(str(state_dir), since, term_s=0.5) == []


def _holder():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    return proc, {"pid": proc.pid, "starttime": lock.starttime(proc.pid), "what": "a test holder"}


def _hook(mark):
    def on_gone(since):  # runs in the keeper, the lock still held
        mark.with_suffix(".start").write_text(repr(since))
        time.sleep(1.0)
        mark.with_suffix(".end").write_text("done")
    return on_gone


def _wait(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_the_keeper_cleans_up_after_a_vanished_run_before_it_drops_the_lock(tmp_path):
    path = str(tmp_path / "node" / "node.lock")
    mark = tmp_path / "hook"
    proc, watch = _holder()
    try:
        held = lock.acquire(path, "token-a", {"run_id": "a"}, wait_s=0, poll_s=0.02, watch=watch,
                            on_holder_gone=_hook(mark))
        assert abs(held["since_unix"] - time.time()) < 30
        proc.kill()  # the run is killed (an AWX cancel): no release
        proc.wait()
        _wait(lambda: mark.with_suffix(".start").exists())
        assert float(mark.with_suffix(".start").read_text()) == held["since_unix"]
        assert not flock_free(path)  # still held while the keeper cleans up: a waiting job waits for it
        _wait(lambda: flock_free(path))
        assert mark.with_suffix(".end").read_text() == "done"
    finally:
        proc.kill()
        proc.wait()


def test_a_released_lock_leaves_the_launches_to_the_run(tmp_path):
    path = str(tmp_path / "node" / "node.lock")
    mark = tmp_path / "hook"
    proc, watch = _holder()
    try:
        lock.acquire(path, "token-a", {"run_id": "a"}, wait_s=0, poll_s=0.02, watch=watch, on_holder_gone=_hook(mark))
        assert lock.release(path, "token-a")
        assert flock_free(path)
        proc.kill()
        proc.wait()
        time.sleep(0.3)
        assert not mark.with_suffix(".start").exists()
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def control_dir():
    """ssh's ControlPath folder: its socket must fit a Unix socket's 108 bytes, which pytest's folders under
    xdist do not (CI: "unix_listener: path ... too long for Unix domain socket", the host unreachable)."""
    folder = tempfile.mkdtemp(prefix="sb-cp-", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_awx_cancel_over_ssh_leaves_no_server_holding_the_gpus(tmp_path, node_dir, sshd, control_dir):
    """bench.yml over a real SSH connection (the test's sshd on 127.0.0.1), cancelled as AWX cancels
    (ansible-runner's SIGKILL to ansible-playbook's process group) while it measures: the server it
    launched outlives the SIGKILL (its own session), the lock's keeper on the node watches the SSH
    connection's sshd, which ends once ssh's ControlPersist master has had no client for its time (30 s
    here, 60 s by ansible's default; a shorter one than the run's longest pause between tasks on the node
    would end the watch, and the lock, early), and then stops that server, still holding the lock, and
    retires its record."""
    port = free_port()
    host = emulator_vars(
        node_dir, port, specbench_emulator_device_dir=str(node_dir / "emulated-dev"),
        gpu_kill_patterns=[re.escape(str(node_dir))], gpu_clean_timeout_s=20, gpu_term_timeout_s=5,
        bench_concurrency=[1, 2], bench_warmup_s=1, bench_window_s=60,
        ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=sshd["port"],
        ansible_user=getpass.getuser(), ansible_ssh_private_key_file=str(sshd["key"]),
        ansible_ssh_common_args=f"-o UserKnownHostsFile={sshd['known_hosts']} -o StrictHostKeyChecking=yes",
        ansible_ssh_args="-o ControlMaster=auto -o ControlPersist=30s", ansible_control_path_dir=control_dir,
        ansible_python_interpreter=sys.executable)
    results = tmp_path / "results"
    records = node_dir / "state" / "servers"
    sweeping = {}

    def cancel():  # ansible-runner asks every few seconds; True cancels the run as AWX does
        doc = results / "cut" / "node1" / "baseline.json"
        if not sweeping and doc.exists() and json.loads(doc.read_text() or "{}").get("status") == "running":
            sweeping["server"] = json.loads((records / f"{port}.json").read_text())
        return bool(sweeping)

    thread, runner, unused_pdd = start_playbook(
        tmp_path, "bench.yml", inventory({"node1": host}),
        {"mode": "baseline", "results_dir": str(results), "run_id": "cut"},
        home=tmp_path / "home", name="runner-ssh-cancel", timeout=400, cancel_callback=cancel)
    thread.join(400)
    assert not thread.is_alive() and runner.status == "canceled", (runner.status, runner.stdout.read()[-6000:])
    server = sweeping["server"]
    cancelled_at = time.time()
    assert server["service"] is False, server
    # The keeper exits (and removes node.lock.json) once it stopped what the run left.
    deadline = time.monotonic() + 120
    while (node_dir / "node.lock.json").exists():
        assert time.monotonic() < deadline, "the node lock's keeper outlived the cancelled run by 120 s"
        time.sleep(0.2)
    assert flock_free(str(node_dir / "node.lock"))
    assert gone(server["pid"], 5), server
    torn = json.loads((records / f"{port}.json").read_text())["torn_down"]
    assert torn["by"] == orphans.BY, torn
    (logged,) = [json.loads(line) for line in (node_dir / "state" / "orphans.jsonl").read_text().splitlines()]
    assert (logged["pid"], logged["port"], logged["stopped"], logged["retired"]) == (server["pid"], port, True, True)
    # The keeper found it running as recorded after the cancel (it logs only such a launch), and stopped it.
    stamp = calendar.timegm(time.strptime(logged["at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert stamp >= cancelled_at - 2, (logged, cancelled_at)

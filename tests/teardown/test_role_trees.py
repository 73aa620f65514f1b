"""The role through real ansible-playbook runs (ansible-runner, as AWX runs them) against
real process trees holding files of a device folder the test made.

Every test also runs a never-kill stand-in (comm nvidia-persistenced, holding every node,
its command line matching the kill pattern) and holds a node from the test's own process
(an ancestor of the teardown): both must be left alone.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import specbench_testkit as testkit
from specbench_testkit import case_outcomes, cases_playbook
from td_support import run_playbook, tagged_pids

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

pytestmark = pytest.mark.slow


def killed_by_pid(result: dict) -> dict[int, dict]:
    return {k["pid"]: k for k in result["killed"]}


@pytest.fixture
def bystanders(lab):
    """The never-kill daemon stand-in, the test's own open node, and another Ansible run whose
    command line carries the kill pattern through -e; checked after each test."""
    daemon = lab.never_kill_daemon()
    lab.hold_node_myself()
    fake = lab.tmp / "ansible-playbook"
    fake.write_text("import time\ntime.sleep(600)\n")
    other_run = subprocess.Popen([sys.executable, str(fake), "-e", f"gpu_kill_patterns=['{lab.pattern}']"],
                                 start_new_session=True)
    lab.spared = {daemon.pid, other_run.pid}
    yield daemon
    assert daemon.poll() is None, "the never-kill stand-in was killed"
    assert other_run.poll() is None, "another Ansible run's ansible-playbook was killed"
    other_run.kill()
    other_run.wait()


def assert_clean(lab, daemon):
    """Memory idle; nothing the test started is left but the never-kill stand-in, the other
    Ansible run, and the test itself."""
    assert lab.used() == [1, 1]
    assert lab.holders() == {os.getpid(), daemon.pid}
    assert lab.fuser() == {os.getpid(), daemon.pid}
    assert tagged_pids(lab.tag) <= lab.spared


def test_plain_server_group_gets_sigterm(lab, bystanders, tmp_path):
    server, workers = lab.server()
    assert lab.used() == [20001, 20001]
    lab.write_server_record(server.pid, server.pid)

    play = run_playbook(tmp_path, lab.extravars())
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = killed_by_pid(res)
    assert set(killed) == {server.pid, *workers}
    assert all(k["signals"] == ["SIGTERM"] and k["step"] == "launched" and k["exited"] for k in killed.values())
    assert res["changed"] is True
    assert res["recorded_pgid"] == server.pid
    assert res["recorded_pgid_source"].endswith("state/servers/30000.json")
    assert res["before"]["gpus"][0]["memory_used_mib"] == 20001
    assert res["after"]["gpus"][0]["memory_used_mib"] == 1
    assert res["time_to_clean_s"] is not None
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert "gpu_never_kill" in left[bystanders.pid]
    assert "ancestor" in left[os.getpid()]
    # another Ansible run's ansible-playbook (its script path matches the test's string pattern)
    assert any("an Ansible program" in reason for reason in left.values())
    fact = play.fact("specbench_gpu")
    assert fact["clean"] is True and {k["pid"] for k in fact["killed"]} == set(killed)
    assert fact["before"]["gpus"][1]["memory_used_mib"] == 20001
    assert_clean(lab, bystanders)


def test_workers_ignoring_sigterm_get_sigkill(lab, bystanders, tmp_path):
    server, workers = lab.server(["--ignore-term"], ["--ignore-term"])
    # the recorded group comes from the fact this time, not the state file
    play = run_playbook(tmp_path, lab.extravars(specbench_server={"pid": server.pid, "pgid": server.pid},
                                                gpu_term_timeout_s=0.5))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = killed_by_pid(res)
    assert res["recorded_pgid_source"] == "specbench_server"
    assert killed[server.pid]["signals"] == ["SIGTERM"]
    for pid in workers:
        assert killed[pid]["signals"] == ["SIGTERM", "SIGKILL"]
        assert killed[pid]["signal"] == "SIGKILL"
    assert_clean(lab, bystanders)


@pytest.mark.parametrize("with_starttime", [True, False])
def test_worker_that_left_the_group_is_still_found(lab, bystanders, tmp_path, with_starttime):
    """With the record's start time it is a descendant of the recorded server; with an old record
    (no start time) the group step misses it and its GPU memory gives it away."""
    server, workers = lab.server([], ["--setsid", "--ignore-term"])
    runaway = workers[1]
    assert proc_table.read_proc(runaway).pgid != server.pid
    lab.write_server_record(server.pid, server.pid, with_starttime=with_starttime)

    play = run_playbook(tmp_path, lab.extravars(gpu_term_timeout_s=0.5))
    assert play.rc == 0, play.stdout
    killed = killed_by_pid(play.task("Kill the server and the device holders"))
    assert killed[server.pid]["step"] == killed[workers[0]]["step"] == "launched"
    assert killed[runaway]["step"] == ("launched" if with_starttime else "memory")
    assert killed[runaway]["signals"] == ["SIGTERM", "SIGKILL"]
    assert_clean(lab, bystanders)


def wait_state(pid: int, state: str) -> proc_table.ProcInfo:
    deadline = time.monotonic() + 10
    while proc_table.read_proc(pid).state != state and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc_table.read_proc(pid)


def test_defunct_parent_children_found_as_device_holders(lab, bystanders, tmp_path):
    parent, children = lab.start(
        "--exit-after-ready",
        "--worker", '["--gpu", "0", "--mib", "9000"]',
        "--worker", '["--gpu", "1", "--mib", "9000", "--ignore-term"]',
    )
    assert wait_state(parent.pid, "Z").threads == 1  # defunct: the test has not reaped it
    # and a defunct thread-group leader whose surviving thread holds a node ("Zl")
    leader, _unused = lab.start("--nodes", "nvidia0", "--leader-exits")
    assert wait_state(leader.pid, "Z").threads == 2
    assert not os.listdir(f"/proc/{leader.pid}/fd")  # only its thread's table shows the node
    assert lab.used() == [9001, 9001]
    # no record, patterns that match nothing: the children are found by their GPU memory
    play = run_playbook(tmp_path, lab.extravars(gpu_kill_patterns=[lab.pattern + "-matches-nothing"],
                                                gpu_term_timeout_s=0.5))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = killed_by_pid(res)
    assert set(killed) == set(children)
    assert all(k["step"] == "memory" for k in killed.values())
    assert killed[children[0]]["signals"] == ["SIGTERM"]
    assert killed[children[1]]["signals"] == ["SIGTERM", "SIGKILL"]
    assert parent.pid not in killed
    # the "Zl" leader holds a node without memory: scope own leaves it running, and says so
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert left[leader.pid] == "holding a device node, no memory: left running"
    assert proc_table.alive(leader.pid)
    # scope node (a dedicated node) is the seeds' fuser -k: it goes too
    play = run_playbook(tmp_path, lab.extravars(gpu_kill_patterns=[lab.pattern + "-matches-nothing"],
                                                gpu_kill_scope="node", gpu_term_timeout_s=0.5))
    assert play.rc == 0, play.stdout
    killed = killed_by_pid(play.task("Kill the server and the device holders"))
    assert set(killed) == {leader.pid} and killed[leader.pid]["step"] == "holder"
    assert_clean(lab, bystanders)
    parent.wait(timeout=5)


def test_check_mode_lists_and_kills_nothing(lab, bystanders, tmp_path):
    server, workers = lab.server()
    lab.write_server_record(server.pid, server.pid)
    play = run_playbook(tmp_path, lab.extravars(), check=True)
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert res["killed"] == []
    assert {w["pid"] for w in res["would_kill"]} == {server.pid, *workers}
    assert res["changed"] is True
    assert lab.used() == [20001, 20001]
    assert all(proc_table.alive(p) for p in (server.pid, *workers))


@pytest.mark.parametrize("case", ["old record, reused group", "pid reused"])
def test_stale_recorded_server_is_left_alone(lab, bystanders, tmp_path, case):
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        if case == "pid reused":
            # the record's pid now belongs to a process started later (another start time)
            path = lab.write_server_record(stranger.pid, stranger.pid)
            record = json.loads(path.read_text())
            path.write_text(json.dumps({**record, "starttime": record["starttime"] - 100}))
            warning = "now belongs to another process"
        else:
            # a record without a start time whose group matches nothing and holds nothing
            lab.write_server_record(stranger.pid, stranger.pid, with_starttime=False)
            warning = "no longer looks like the server"
        play = run_playbook(tmp_path, lab.extravars())
        assert play.rc == 0, play.stdout
        res = play.task("Kill the server and the device holders")
        assert res["killed"] == []
        # the record names nothing of ours: retired (issue 19, item 1), the only change made
        assert res["changed"] is True and res["recorded_server_retired"] is True
        assert any(warning in w for w in res.get("warnings", [])), res.get("warnings")
        again = run_playbook(tmp_path, lab.extravars()).task("Kill the server and the device holders")
        assert again["changed"] is False and again["killed"] == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


# Each bad setting and the words its refusal must hold. One ansible-runner run tries them all
# (nodekit.cases_playbook: a play per case, the role in a block whose rescue records the failure):
# twelve separate runs of playbooks/teardown.yml cost the suite ~30 CPU-s for the same refusals.
BAD_SETTINGS = {
    "glob_not_nvidia": ({"gpu_device_glob": "/tmp/*"}, "last part starts with 'nvidia'"),
    "emulated_on_dev": ({"gpu_backend": "emulated", "gpu_device_glob": "/dev/nvidia*"}, "never /dev"),
    "pattern_invalid": ({"gpu_kill_patterns": ["sglang(::"]}, "is not a valid regular expression"),
    "pattern_everything": ({"gpu_kill_patterns": [".*"]}, "would match every process"),
    "pattern_args_only": ({"gpu_kill_patterns": [{"args": "sglang"}]}, "names no field of what the process is"),
    "pattern_nested": ({"gpu_kill_patterns": [["sglang"]]}, "gpu_kill_patterns a non-empty list of patterns"),
    "scope": ({"gpu_kill_scope": "everything"}, "gpu_kill_scope"),
    "other_users": ({"gpu_kill_other_users": "maybe"}, "gpu_kill_other_users"),
    "devices_words": ({"gpu_devices": ["first"]}, "a list of GPU indexes or UUIDs"),
    "devices_missing": ({"gpu_devices": [5]}, "gpu_devices names 5, which is not one GPU of this node"),
    "idle_negative": ({"gpu_idle_mib": -5}, "gpu_idle_mib must be a whole number"),
    "external": ({"engine": "external"}, "with engine=external specbench launches and kills nothing"),
}


def test_bad_settings_fail_with_the_fix(lab, tmp_path):
    server, workers = lab.server()
    cases = {name: {"vars": overrides} for name, (overrides, _unused) in BAD_SETTINGS.items()}
    (lab.node_dir / "cases").mkdir()
    book = cases_playbook(tmp_path / "cases.yml", cases, role="specbench.core.gpu_teardown")
    # the lab's settings as host variables, so that each case's play variables override them
    play = testkit.run_playbook(tmp_path, book, testkit.inventory({"localhost": testkit.local_host(**lab.extravars())}),
                                {}, timeout=300)
    assert play.rc == 0, play.stdout[-4000:]
    out = case_outcomes(lab.node_dir)
    assert set(out) == set(BAD_SETTINGS), out
    for name, (_overrides, expected) in BAD_SETTINGS.items():
        assert out[name]["failed"], (name, out[name])
        assert expected in re.sub(r"\s+", " ", out[name]["msg"]), (name, out[name])
    # refused before anything was signalled: the server and its workers still hold their GPUs
    assert lab.used() == [20001, 20001] and all(proc_table.alive(p) for p in (server.pid, *workers))


def test_preflight_entry_point_validates_only(lab, tmp_path):
    """bench.yml's first play: tasks_from preflight checks the settings and does nothing else."""
    server, workers = lab.server()
    book = tmp_path / "preflight.yml"
    book.write_text(
        "- name: Preflight only\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Check the teardown settings\n      ansible.builtin.include_role:\n"
        "        name: specbench.core.gpu_teardown\n        tasks_from: preflight\n"
    )
    play = run_playbook(tmp_path, lab.extravars(), playbook=str(book))
    assert play.rc == 0, play.stdout
    assert not any("Kill the server" in (e.get("event_data", {}).get("task") or "") for e in play.events)
    assert lab.used() == [20001, 20001] and proc_table.alive(server.pid)
    bad = run_playbook(tmp_path, lab.extravars(gpu_poll_interval_s=0), playbook=str(book))
    assert bad.rc != 0 and "gpu_poll_interval_s" in bad.stdout

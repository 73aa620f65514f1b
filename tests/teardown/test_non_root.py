"""The teardown run as a non-root user over a tree that includes another user's (root's)
matching processes: a structured result (JSON, with the refusals named), never a traceback.

The module runs the way Ansible runs it on a node (``python3 gpu_teardown.py ARGS.json``),
as the user ``nobody`` (setpriv), in a PID namespace of the test's own, from a copy of the
module, its module_utils and Ansible's that nobody can read (Lab.runtime): the checkout may
sit under a folder only root can read.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from td_support import OTHER_USER, Lab, other_user_ids, python_for_any_user

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]


def runtime_path(lab: Lab) -> str:
    """PYTHONPATH for another user: the collection and Ansible, copied where it can read them."""
    return os.pathsep.join([str(lab.runtime / "collections"), str(lab.runtime / "site")])


@pytest.fixture
def shared_lab(tmp_path):
    lab = Lab(tmp_path, gpu_count=2, shared=True)
    yield lab
    lab.cleanup()


def run_module_as(user: str, lab: Lab, **args) -> tuple[dict, str]:
    """(the module's JSON result, its stderr), run as ``user``."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (Debian package util-linux) is not installed")
    uid, gid = other_user_ids(user)
    home = lab.tmp / "home"
    home.mkdir(exist_ok=True)
    os.chown(home, uid, gid)
    argsfile = lab.tmp / f"args-{len(list(lab.tmp.glob('args-*')))}.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "backend": "emulated", "device_glob": f"{lab.dev}/nvidia*", "term_timeout_s": 1, "kill_timeout_s": 2,
        "clean_timeout_s": 3, "kill_patterns": gpu_teardown.ENGINE_KILL_PATTERNS["sglang"], **args}}))
    argsfile.chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": runtime_path(lab)}
    module = lab.runtime / "collections" / "ansible_collections" / "specbench" / "core" / "plugins" / "modules"
    proc = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
         python_for_any_user(), str(module / "gpu_teardown.py"), str(argsfile)],
        capture_output=True, text=True, env=env, cwd=str(home), timeout=120, check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    try:
        return json.loads(proc.stdout), proc.stderr
    except ValueError:
        pytest.fail(f"the module did not answer with a JSON result (rc {proc.returncode}):\n{proc.stdout}\n"
                    f"{proc.stderr}", pytrace=False)


def test_non_root_teardown_refuses_roots_processes_with_a_result(shared_lab):
    lab = shared_lab
    assert os.getpid() == 1
    server, (worker,) = lab.sglang_tree(gpus_used=(0,), stubborn=(), escaped=())  # root's, recorded
    mine, _unused = lab.start("--gpu", "1", "--mib", "4000", "--comm", "td-mine", user=OTHER_USER)
    record = json.loads(lab.record_path().read_text())

    res, _unused = run_module_as(OTHER_USER, lab, server=record)
    assert res["failed"] is True and res["error"] == "not_clean"
    assert [(k["pid"], k["user"]) for k in res["killed"]] == [(mine.pid, OTHER_USER)]
    (refused,) = res["refused"]
    assert (refused["pid"], refused["user"], refused["kind"]) == (worker, "root", "other_user")
    assert "gpu_kill_other_users: true" in res["msg"] and f"pid {worker} (user root)" in res["msg"]
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert "another user's (root)" in left[server.pid]  # in the recorded tree, but not this user's
    assert proc_table.alive(server.pid) and proc_table.alive(worker) and not proc_table.alive(mine.pid)

    # allowed to, it tries: the kernel refuses (EPERM), and that too is a result
    res, _unused = run_module_as(OTHER_USER, lab, server=record, kill_other_users=True)
    assert res["failed"] is True
    kinds = {r["pid"]: r["kind"] for r in res["refused"]}
    assert kinds[worker] == "not_permitted"
    assert "run the teardown as root (become: true)" in res["msg"] and "or as root" not in res["msg"]
    assert all(r["starttime"] == proc_table.starttime(r["pid"]) for r in res["refused"])  # issue 19, item 8
    assert proc_table.alive(worker) and proc_table.alive(server.pid)

    # and scope node, which reaches every user's matching process
    res, _unused = run_module_as(OTHER_USER, lab, kill_scope="node")
    assert res["failed"] is True
    assert {r["pid"]: r["kind"] for r in res["refused"]}.get(server.pid) == "not_permitted"
    assert proc_table.alive(server.pid)


def test_a_signal_the_kernel_refuses_is_an_answer_not_an_exception(shared_lab):
    """proc_table.send_signal as nobody to a root process: EPERM comes back as 'not permitted'."""
    lab = shared_lab
    victim, _unused = lab.start("--nodes", "nvidiactl")
    uid, gid = other_user_ids(OTHER_USER)
    code = ("import sys; from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table; "
            f"print(proc_table.send_signal({victim.pid}, {proc_table.starttime(victim.pid)}, 9))")
    proc = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", python_for_any_user(), "-c", code],
        capture_output=True, text=True, check=False, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": runtime_path(lab)},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "not permitted", proc.stdout + proc.stderr
    assert proc_table.alive(victim.pid)

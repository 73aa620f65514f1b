"""Issue 19, item 4: a server that respawns on SIGTERM (it forks a child into a process group of
its own, which allocates 0.5 s later, and exits) is not reported clean while its child lives:
the teardown re-walks the recorded tree after every signal round and holds "clean" for the
settle interval. In a PID namespace of its own, through the role, on emulated GPUs.
"""
from __future__ import annotations

import os
import time

import pytest
from td_support import run_playbook, tagged_pids

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]


@pytest.mark.parametrize("mib", [20000, 0], ids=["child-allocates", "child-holds-nothing"])
def test_a_respawning_server_is_not_clean_until_its_child_is_gone(lab, tmp_path, mib):
    """Bound: after the run, and again 1 s later (twice the child's 0.5 s allocation delay), GPU 0
    reads idle and no process the test started is left but the ones it keeps itself."""
    assert os.getpid() == 1
    server, workers = lab.start("--nodes", "nvidiactl,nvidia-uvm", "--comm", "td-server", "--respawn", f"0:{mib}",
                                "--worker", '["--gpu", "1", "--mib", "3000", "--comm", "td-worker0"]')
    lab.write_server_record(server.pid, server.pid)
    play = run_playbook(tmp_path, lab.extravars())
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = {k["pid"]: k for k in res["killed"]}
    children = set(killed) - {server.pid, *workers}
    assert len(children) == 1, killed  # the respawned child was found and signalled
    (child,) = children
    assert killed[child]["step"] == "launched" and killed[child]["exited"]
    assert proc_table.read_proc(child) is None or not proc_table.alive(child)
    assert res["clean"] is True and lab.used() == [1, 1]
    time.sleep(1.0)
    assert lab.used() == [1, 1] and tagged_pids(lab.tag) == set()

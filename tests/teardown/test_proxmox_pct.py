"""The Proxmox path: the teardown run through ``pct exec <vmid>`` from the host reaches only the
container's processes, and run on the host it leaves every container's alone.

The container is a PID namespace (and /proc) of its own made by ``unshare``; the fake pct
(tests/node/fakes/pct) enters it through nsenter for ``exec``, as lxc-attach enters a real
container. Host and container processes hold the same (emulated) GPUs and match the same
patterns; the teardown runs with ``kill_scope: node``, the widest it has. The whole test runs in
a PID namespace of its own (the "host").
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from td_support import HOLDER, ROOT, Lab

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]

VMID = "129"
MODULE = ROOT / "plugins" / "modules" / "gpu_teardown.py"
FAKES = ROOT / "tests" / "node" / "fakes"


class Container:
    """A fake Proxmox host's container 129 with a PID namespace of its own."""

    def __init__(self, lab: Lab):
        if not shutil.which("nsenter"):
            pytest.skip("nsenter (Debian package util-linux) is not installed: the fake pct enters containers with it")
        self.lab = lab
        self.pve = lab.tmp / "pve"
        subprocess.run([sys.executable, str(FAKES / "fake_proxmox.py"), str(self.pve), "--vmid", VMID, "--running"],
                       check=True, capture_output=True)
        self.pct = str(self.pve / "pct")
        self.unshare = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
                                         "sleep", "600"], start_new_session=True)
        deadline = time.monotonic() + 10
        self.init = None
        while self.init is None and time.monotonic() < deadline:
            kids = [i.pid for i in proc_table.snapshot().values() if i.ppid == self.unshare.pid]
            self.init = kids[0] if kids else None
            time.sleep(0.02)
        assert self.init, "the container's init did not start"
        (self.pve / "ct" / VMID / "init.pid").write_text(str(self.init))
        self.namespace = proc_table.pid_namespace(self.init)
        assert self.namespace != proc_table.pid_namespace(os.getpid())

    def start(self, *args: str, as_sglang: bool = False) -> subprocess.Popen:
        """holder.py inside the container, through pct exec."""
        head = ["env", f"PYTHONPATH={self.lab.sglang_package()}", sys.executable]
        head += ["-m", "sglang.launch_server"] if as_sglang else [str(HOLDER)]
        proc = subprocess.Popen([self.pct, "exec", VMID, "--", *head, "--tag", self.lab.tag, "--dev",
                                 str(self.lab.dev), *args], stdout=subprocess.PIPE, start_new_session=True)
        self.lab.started.append(proc)
        assert proc.stdout.readline().startswith(b"READY")
        return proc

    def world(self) -> None:
        """A stale SGLang tree on GPU 0 and an unnamed holder of GPU 1, inside the container."""
        worker = json.dumps(["--gpu", "0", "--mib", "20000", "--argv0", "sglang::scheduler_TP0", "--ignore-term"])
        self.start("--nodes", "nvidiactl,nvidia-uvm", "--worker", worker, as_sglang=True)
        self.start("--gpu", "1", "--mib", "3000")

    def close(self) -> None:
        self.unshare.kill()  # --kill-child: its init dies, and with it everything in the container
        self.unshare.wait(timeout=10)


def host_world(lab: Lab) -> None:
    """The host's own SGLang-like processes on the same GPUs, and a monitor."""
    worker = json.dumps(["--gpu", "1", "--mib", "7000", "--argv0", "sglang::scheduler_TP0"])
    lab.start("--nodes", "nvidiactl,nvidia-uvm", "--worker", worker, as_sglang=True)
    lab.monitor()


def holders_by_namespace(lab: Lab, container: Container) -> tuple[set[int], set[int]]:
    """(the container's holders, the host's), in host pids."""
    inside, outside = set(), set()
    for pid in lab.holders() - {os.getpid()}:
        (inside if proc_table.pid_namespace(pid) == container.namespace else outside).add(pid)
    return inside, outside


def module_args(lab: Lab) -> str:
    path = lab.tmp / f"args-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "backend": "emulated", "device_glob": f"{lab.dev}/nvidia*", "kill_scope": "node", "term_timeout_s": 1,
        "kill_timeout_s": 3, "clean_timeout_s": 3, "kill_patterns": gpu_teardown.ENGINE_KILL_PATTERNS["sglang"]}}))
    return str(path)


def run(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"))
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def pve_lab(tmp_path):
    lab = Lab(tmp_path)
    container = Container(lab)
    yield lab, container
    container.close()
    lab.cleanup()


def test_pct_exec_teardown_kills_inside_the_container_only(pve_lab):
    lab, container = pve_lab
    assert os.getpid() == 1
    container.world()
    host_world(lab)
    inside, outside = holders_by_namespace(lab, container)
    assert len(inside) == 3 and len(outside) == 3  # server, worker, holder; server, worker, monitor

    res = run([container.pct, "exec", VMID, "--", "env", f"PYTHONPATH={ROOT / 'collections'}", sys.executable,
               str(MODULE), module_args(lab)])
    assert len(res["killed"]) == 3 and all(k["exited"] for k in res["killed"])
    assert not any(proc_table.alive(p) for p in inside)
    assert all(proc_table.alive(p) for p in outside), "pct exec reached the host's processes"
    # the host's memory on GPU 1 is not the container's to free
    assert lab.used() == [1, 7001]


def test_a_teardown_on_the_host_leaves_every_container_alone(pve_lab):
    lab, container = pve_lab
    container.world()
    host_world(lab)
    inside, outside = holders_by_namespace(lab, container)

    res = run([sys.executable, str(MODULE), module_args(lab)])
    assert not any(proc_table.alive(p) for p in outside)
    assert all(proc_table.alive(p) for p in inside), "the host's teardown reached into the container"
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert all("in another PID namespace" in left[p] and "pct exec" in left[p] for p in inside)
    assert {k["pid"] for k in res["killed"]} == outside

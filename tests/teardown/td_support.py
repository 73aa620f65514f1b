"""Helpers for the teardown tests: a device folder per test, holder processes, playbook runs.

Every process these tests start carries ``--tag <tmp_path>`` (or, for the emulator, a device
folder under tmp_path) on its command line, and every kill pattern a test passes is that
tmp_path, escaped: nothing outside the test can match. Holders get neutral names (td-server,
td-worker0) rather than sglang::..., so that other people's name-based cleanups running on the
same machine cannot reach them. Cleanup kills only processes whose
command line holds the tag or that hold a file of the test's own device folder.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOLDER = Path(__file__).resolve().parent / "holder.py"
FAKE_SMI = Path(__file__).resolve().parent / "fake_nvidia_smi.py"
for extra in (ROOT / "collections", ROOT / "files"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import specbench_testkit as testkit  # noqa: E402
from specbench_testkit import PlaybookRun  # noqa: E402

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table  # noqa: E402
from sglang_emulator import gpus  # noqa: E402

H200_MIB = 143771


def tagged_pids(tag: str) -> set[int]:
    """Live processes (not zombies) whose command line contains tag."""
    found = set()
    for info in proc_table.snapshot().values():
        if tag in info.command and info.pid != os.getpid() and info.state not in ("Z", "X"):
            found.add(info.pid)
    return found


OTHER_USER = "nobody"


def python_for_any_user() -> str:
    """A Python 3 every user may run (the venv's lives under /root, which is root's alone)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        mode = os.stat(candidate).st_mode if os.path.exists(candidate) else 0
        if mode & 0o001:
            return candidate
    import pytest  # noqa: PLC0415

    pytest.skip("no Python 3 that another user may run (/usr/bin/python3): apt-get install python3")


def other_user_ids(name: str = OTHER_USER) -> tuple[int, int]:
    import pwd  # noqa: PLC0415

    import pytest  # noqa: PLC0415

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no user {name!r} on this machine to run another user's processes (Debian's base-passwd has it)")
    if os.geteuid() != 0:
        pytest.skip("starting processes as another user needs root")
    return entry.pw_uid, entry.pw_gid


def copy_for_any_user(dest: Path) -> Path:
    """What a process of another user runs, copied under ``dest`` (modes 0755/0644): holder.py,
    the emulator's package, this collection's module_utils and modules, and the part of Ansible
    a module imports. The checkout (and the venv in it) may sit under a folder only root can
    read (a CI clone under /root), so another user never runs anything from there."""
    import ansible  # noqa: PLC0415

    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    (dest / "tests" / "teardown").mkdir(parents=True)
    shutil.copy2(HOLDER, dest / "tests" / "teardown" / "holder.py")
    shutil.copytree(ROOT / "files" / "sglang_emulator", dest / "files" / "sglang_emulator", ignore=skip)
    plugins = dest / "collections" / "ansible_collections" / "specbench" / "core" / "plugins"
    for part in ("module_utils", "modules"):
        shutil.copytree(ROOT / "plugins" / part, plugins / part, ignore=skip)
    source = Path(ansible.__file__).resolve().parent
    site = dest / "site"
    for name in ("__init__.py", "release.py"):
        (site / "ansible").mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, site / "ansible" / name)
    for part in ("_vendor", "module_utils"):
        shutil.copytree(source / part, site / "ansible" / part, ignore=skip)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


class Lab:
    """One test's device folder and the process trees it started there.

    ``shared=True`` puts the folder under /tmp, readable by every user (pytest's tmp_path is
    root's alone), for tests that start processes as another user, with a copy of what those
    processes run (copy_for_any_user) in ``runtime``: the holders then run from that copy.
    """

    def __init__(self, tmp_path: Path, gpu_count: int = 2, shared: bool = False):
        self.shared_root = None
        if shared:
            self.shared_root = Path(tempfile.mkdtemp(prefix="specbench-td-", dir="/tmp"))
            self.shared_root.chmod(0o755)
            tmp_path = self.shared_root
        self.tmp = tmp_path
        self.tag = str(tmp_path)
        self.pattern = re.escape(self.tag)
        self.dev = tmp_path / "dev"
        self.node_dir = tmp_path / "node"
        (self.node_dir / "state").mkdir(parents=True)
        gpus.ensure_device_dir(str(self.dev), gpu_count, "NVIDIA H200", H200_MIB)
        if shared:
            for path in self.dev.iterdir():
                path.chmod(0o1777 if path.is_dir() else 0o666)
            for path in (self.node_dir, self.node_dir / "state"):
                path.chmod(0o755)
        self.started: list[subprocess.Popen] = []
        self.own_fds: list[int] = []
        self.packages = None
        self.runtime = copy_for_any_user(tmp_path / "runtime") if shared else None
        self.holder = self.runtime / "tests" / "teardown" / "holder.py" if shared else HOLDER

    def sglang_package(self) -> Path:
        """A folder with a package ``sglang`` whose ``launch_server`` runs holder.py, so that
        ``python3 -m sglang.launch_server`` is, by every measure the teardown uses, SGLang."""
        if self.packages is None:
            self.packages = self.tmp / "pkgs"
            (self.packages / "sglang").mkdir(parents=True)
            (self.packages / "sglang" / "__init__.py").write_text("")
            (self.packages / "sglang" / "launch_server.py").write_text(
                f"import runpy\nrunpy.run_path({str(self.holder)!r}, run_name='__main__')\n"
            )
            for path in (self.packages, self.packages / "sglang"):
                path.chmod(0o755)
        return self.packages

    def start(self, *args: str, wait: bool = True, user: str | None = None,
              as_sglang: bool = False) -> tuple[subprocess.Popen, list[int]]:
        """Start holder.py in its own session; (Popen, pids of its workers) once READY.

        ``as_sglang``: run it as ``python3 -m sglang.launch_server``; ``user``: as that user."""
        python = sys.executable if user is None else python_for_any_user()
        if as_sglang:
            head = [python, "-m", "sglang.launch_server"]
            env = dict(os.environ, PYTHONPATH=str(self.sglang_package()))
        else:
            head = [python, str(self.holder)]
            env = None
        ids = {}
        if user is not None:
            uid, gid = other_user_ids(user)
            ids = {"user": uid, "group": gid, "extra_groups": []}
        proc = subprocess.Popen(
            [*head, "--tag", self.tag, "--dev", str(self.dev), *args],
            stdout=subprocess.PIPE,
            start_new_session=True,
            env=env,
            cwd=str(self.tmp),
            **ids,
        )
        self.started.append(proc)
        if not wait:
            return proc, []
        line = proc.stdout.readline().decode().split()
        assert line and line[0] == "READY", f"holder {args} did not start"
        return proc, [int(p) for p in line[1:]]

    def server(self, *worker_flags: list[str], gpus_used=(0, 1), mib: int = 20000, **kw):
        """A server (its own process group) with one worker per GPU; worker_flags per worker."""
        specs = []
        for i, gpu in enumerate(gpus_used):
            flags = worker_flags[i] if i < len(worker_flags) else []
            specs += ["--worker", json.dumps(["--gpu", str(gpu), "--mib", str(mib), "--comm", f"td-worker{i}", *flags])]
        return self.start("--nodes", "nvidiactl,nvidia-uvm", "--comm", "td-server", *specs, **kw)

    def all_nodes(self) -> str:
        return ",".join(sorted(p.name for p in self.dev.iterdir() if p.name.startswith("nvidia")))

    def never_kill_daemon(self) -> subprocess.Popen:
        """A stand-in for nvidia-persistenced: holds every node, no memory, on the default list."""
        proc, _unused = self.start("--nodes", self.all_nodes(), "--comm", "nvidia-persistenced")
        return proc

    def monitor(self, name: str = "nvtop") -> subprocess.Popen:
        """A monitor (nvtop, nvidia-smi dmon, an exporter): holds every node, no GPU memory."""
        proc, _unused = self.start("--nodes", self.all_nodes(), "--comm", name)
        return proc

    def record_path(self, port: int = 30000) -> Path:
        """Where the launch roles record a server on ``port`` (state/servers/<port>.json)."""
        return self.node_dir / "state" / "servers" / f"{port}.json"

    def sglang_tree(self, gpus_used=(0, 1), mib: int = 20000, stubborn=(0,), escaped=(1,), port: int = 30000,
                    **record) -> tuple:
        """A stale SGLang-like tree: ``python3 -m sglang.launch_server`` (holding nvidiactl and
        nvidia-uvm) with one ``sglang::scheduler_TP<r>`` worker per GPU; the ranks in stubborn
        ignore SIGTERM, those in escaped left the group (setsid). The record is written."""
        specs = []
        for rank, gpu in enumerate(gpus_used):
            flags = ["--gpu", str(gpu), "--mib", str(mib), "--argv0", f"sglang::scheduler_TP{rank}",
                     "--comm", f"sglang::scheduler_TP{rank}"]
            flags += ["--ignore-term"] if rank in stubborn else []
            flags += ["--setsid"] if rank in escaped else []
            specs += ["--worker", json.dumps(flags)]
        server, workers = self.start("--nodes", "nvidiactl,nvidia-uvm", *specs, as_sglang=True)
        self.write_server_record(server.pid, server.pid, port=port, **record)
        return server, workers

    def hold_node_myself(self, node: str = "nvidiactl") -> None:
        """The test's own process holds a node (it is an ancestor of the teardown)."""
        self.own_fds.append(os.open(self.dev / node, os.O_RDWR))

    def state(self) -> dict:
        return gpus.read_state(str(self.dev))

    def used(self) -> list[int]:
        return [g["memory_used_mib"] for g in self.state()["gpus"]]

    def holders(self) -> set[int]:
        real = os.path.realpath(self.dev)
        nodes = [os.path.join(real, n) for n in os.listdir(real) if n.startswith("nvidia")]
        return set(proc_table.holders(nodes))

    def fuser(self) -> set[int]:
        """The holders as the real fuser (psmisc) sees them: an oracle independent of proc_table."""
        nodes = sorted(str(p) for p in self.dev.iterdir() if p.name.startswith("nvidia"))
        out = subprocess.run(["fuser", *nodes], capture_output=True, text=True, check=False).stdout
        return {int(tok) for tok in out.split()}

    def write_server_record(self, pid: int, pgid: int, with_starttime: bool = True, port: int = 30000,
                            **extra) -> Path:
        """The launch role's record, one per launch (state/servers/<port>.json): pid, pgid, starttime,
        boot_id, and ``extra`` (gpus, say)."""
        record = {"pid": pid, "pgid": pgid, "command": ["holder.py"], "boot_id": proc_table.boot_id(), "port": port,
                  **extra}
        if with_starttime:
            record["starttime"] = proc_table.starttime(pid)
        path = self.record_path(port)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.shared_root:
            path.parent.chmod(0o755)
        path.write_text(json.dumps(record))
        if self.shared_root:
            path.chmod(0o644)
        return path

    def extravars(self, **overrides) -> dict:
        """Role variables aimed at this test's folder and tag only."""
        values = {
            "specbench_node_dir": str(self.node_dir),
            "gpu_backend": "emulated",
            "gpu_device_glob": f"{self.dev}/nvidia*",
            # what this test's processes are: holder.py (or its fake sglang.launch_server) with the tag
            "gpu_kill_patterns": [{"script": re.escape(str(self.holder)), "args": self.pattern},
                                  {"module": r"^sglang\.launch_server$", "args": self.pattern},
                                  {"title": "^sglang::", "args": self.pattern},
                                  self.pattern],
            "gpu_term_timeout_s": 2,
            "gpu_kill_timeout_s": 5,
            "gpu_clean_timeout_s": 5,
        }
        values.update(overrides)
        return values

    def cleanup(self) -> None:
        for fd in self.own_fds:
            os.close(fd)
        for _unused in range(3):
            victims = tagged_pids(self.tag) | (self.holders() - {os.getpid()})
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not victims:
                break
            time.sleep(0.05)
        for proc in self.started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdout:
                proc.stdout.close()
        if self.shared_root:
            shutil.rmtree(self.shared_root, ignore_errors=True)


def run_playbook(tmp_path: Path, extravars: dict, playbook: str = "playbooks/teardown.yml",
                 check: bool = False, limit_ident: str | None = None) -> PlaybookRun:
    """The teardown playbook (or ``playbook``) on the default inventory, through the test kit."""
    return testkit.run_playbook(tmp_path, ROOT / playbook, ROOT / "inventory" / "local.yml", extravars,
                                check=check, ident=limit_ident, timeout=180)

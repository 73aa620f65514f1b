"""The one test kit: playbooks through ansible-runner, free ports, HTTP, the emulator, process trees.

Every test folder builds on this module (a unique name: every folder has a conftest.py, so
``from conftest import`` would be ambiguous); a folder's own kit (nodekit, compare_kit, benchlib)
only adds its defaults.

- Playbooks run the way AWX runs them: ``ansible_runner.run`` with a private data folder per
  run, this checkout's ansible.cfg (so ``specbench.core.*`` resolves to the working tree) and
  this venv on PATH. ``PlaybookRun`` reads the outcome: results by event, failures, changed
  tasks, facts, stats, the results files of a bench run.
- Every process a test starts is started in its own session and killed by its process group or,
  for emulated GPUs, as a holder of the test's own device folder: never by name, never anything
  the test did not start (``kill_node_servers`` checks the recorded start time and that the
  command line names the test's folder).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import math
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "files" / "sglang_emulator"
VENV_BIN = Path(sys.executable).parent
for extra in (ROOT / "files", ROOT / "collections"):  # the emulator package; specbench.core from the checkout
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


# ---------------------------------------------------------------------------------------------
# The engines' venvs, which .ci/run may still be building
# ---------------------------------------------------------------------------------------------
# .ci/run starts pytest as soon as .venv is built and builds the engines' venvs (.venv-vllm,
# .venv-sglang) beside it: SPECBENCH_VENV_STATUS names a folder where each build writes a file
# named for the venv ("vllm", "sglang") holding its exit status once it is done.
VENV_BUILD_TIMEOUT_S = 1800


def venv_pending(name: str) -> bool:
    """True while .ci/run is still building the engine venv ``name`` beside the tests ("": none)."""
    folder = os.environ.get("SPECBENCH_VENV_STATUS")
    return bool(folder and name) and not (Path(folder) / name).exists()


def wait_for_venv(name: str, python: Path, timeout: float = VENV_BUILD_TIMEOUT_S) -> str | None:
    """None once the engine venv ``name`` (interpreter ``python``) can be used, else why not:
    waits for .ci/run's build of it when one runs beside the tests (SPECBENCH_VENV_STATUS)."""
    folder = os.environ.get("SPECBENCH_VENV_STATUS")
    if folder:
        flag = Path(folder) / name
        deadline = time.monotonic() + timeout
        while not flag.exists():
            if time.monotonic() > deadline:
                return f"the {name} venv was still being built after {timeout:.0f} s (.ci/run prints its log)"
            time.sleep(1)
        status = flag.read_text(encoding="utf-8").split()
        if not status or status[0] != "0":
            return (f"building the {name} venv failed (exit {status[0] if status else '?'}): .ci/run prints "
                    "its log at the end")
    return None if python.exists() else f"no {name} venv: {python} does not exist"


# ---------------------------------------------------------------------------------------------
# The pytest workers' schedule (tests/conftest.py): units and where the wall time went
# ---------------------------------------------------------------------------------------------
# The units (schedule_unit) that need an engine's venv, and which: the scheduler holds them back
# while .ci/run still builds it (tests/conftest.py).
UNIT_VENVS = {"tests/vllm/": "vllm", "tests/sglang_parser/test_sglang_parser.py": "sglang",
              "tests/sglang_cpu/test_run_real_sglang_script.py": "sglang"}


def first_ready_unit(units) -> str | None:
    """The first of ``units`` (in order) whose engine venv, if it needs one, is not being built."""
    return next((unit for unit in units if not venv_pending(UNIT_VENVS.get(unit, ""))), None)


def schedule_unit(nodeid: str) -> str:
    """The unit a test is scheduled with: its file, or tests/vllm/ for every file there."""
    path = nodeid.split("::", 1)[0]
    return "tests/vllm/" if path.startswith("tests/vllm/") else path


def schedule_lines(schedule: dict[tuple[str, str], list[float]], start: float) -> list[str]:
    """One line per worker: its units, the span they covered, the time inside them, the idle time
    between them, its three longest units and its last one (seconds from the session's start)."""
    lines = []
    for worker in sorted({w for w, _unit in schedule}):
        units = sorted(((span[0] - start, span[1] - start, unit) for (w, unit), span in schedule.items()
                        if w == worker))
        busy = sum(b - a for a, b, _unit in units)
        first, last = units[0][0], max(b for _a, b, _unit in units)
        longest = sorted(units, key=lambda u: u[0] - u[1])[:3]
        named = ", ".join(f"{u} {a:.0f}-{b:.0f}" for a, b, u in longest)
        a, b, unit = max(units, key=lambda u: u[1])
        lines.append(f"{worker}: {len(units)} files {first:.0f}-{last:.0f} s, in them {busy:.0f} s, between them "
                     f"{last - first - busy:.0f} s; longest: {named}; last: {unit} {a:.0f}-{b:.0f}")
    return lines


def utc_edge(text: str) -> float:
    """Seconds since the epoch of a level's window edge as the client records it, ISO 8601 UTC with
    milliseconds (plugins/module_utils/specbench_client/level.py, utc_ms: …T05:41:02.123Z)."""
    assert text.endswith("Z") and len(text.rsplit(".", maxsplit=1)[-1]) == 4, text
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


# ---------------------------------------------------------------------------------------------
# Loopback: ports and HTTP
# ---------------------------------------------------------------------------------------------
_HANDED_OUT: set[int] = set()
_PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port free now, and never handed out before in this process: the servers a test
    starts together each get their own. The kernel can give bind(0) the same port twice in a row;
    a test that launches seven emulators at once got one port for two of them (beside a vLLM loop),
    and its second launch found the first holding it."""
    with _PORTS_LOCK:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port


def http(method: str, url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 30):
    """(status, headers, body bytes) of one request; never raises on HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# ---------------------------------------------------------------------------------------------
# Process trees (read from /proc, independently of the collection's own proc_table)
# ---------------------------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def starttime(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None when the process is gone."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_gone(pids, timeout: float = 10) -> bool:
    """Wait until none of ``pids`` is alive; whether they all went."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def holders_of(device_dir: Path) -> set[int]:
    """PIDs holding any file of ``device_dir`` open (the test's own folder only)."""
    real = os.path.realpath(device_dir)
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                try:
                    if os.path.dirname(os.readlink(f"/proc/{entry}/fd/{fd}")) == real:
                        pids.add(int(entry))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return pids


def _kill(pid: int, sig: int = signal.SIGKILL, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, sig)
        return True
    except ProcessLookupError:
        return False


def kill_node_servers(node_dir: Path, rounds: int = 50) -> list[int]:
    """SIGKILL what a test's node folder recorded or whose device files it holds; nothing else.

    A server group recorded in ``node_dir/state/servers/<port>.json`` (one record per launch) or the
    older ``node_dir/state/server.json`` is signalled only while its leader
    is still the recorded process (same start time, when recorded) and its command line names
    ``node_dir``. Then every holder of a device folder under ``node_dir`` (a folder with an
    ``nvidiactl``), again until none is left (workers that outlive their parent). Returns the
    process groups and pids signalled.
    """
    node_dir = Path(node_dir)
    killed = []
    state = node_dir / "state"
    for path in sorted([*state.glob("server*.json"), *state.glob("servers/*.json")]) if state.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            pid, pgid = int(record.get("pid") or 0), int(record.get("pgid") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        same = record.get("starttime") is None or str(starttime(pid)) == str(record.get("starttime"))
        if pid > 1 and pgid > 1 and alive(pid) and same and str(node_dir) in command_line(pid):
            if _kill(pgid, group=True):
                killed.append(pgid)
    devices = {p.parent for p in node_dir.glob("**/nvidiactl")}
    for _unused in range(rounds):
        pids = set().union(*(holders_of(d) for d in devices)) - {os.getpid()} if devices else set()
        if not pids:
            break
        killed += [pid for pid in pids if _kill(pid)]
        time.sleep(0.05)
    return killed


# ---------------------------------------------------------------------------------------------
# The collection as files: the checkout's own, and the tarball users install
# ---------------------------------------------------------------------------------------------
def checkout_files(root: Path = ROOT) -> list[str]:
    """What the checkout holds: the files git tracks or would track (not ignored), as they are in
    the work tree (a file deleted there but still in the index is left out)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and os.path.lexists(root / name)]


def copy_checkout(dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """The checkout's files copied to ``dest`` (links kept as links), less the paths starting with ``skip``."""
    for name in checkout_files():
        if name.startswith(skip):
            continue
        source, target = ROOT / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    return dest


def build_collection(folder: Path, source: Path = ROOT) -> Path:
    """``ansible-galaxy collection build`` of ``source`` into ``folder``, as a user builds it: the tarball."""
    folder.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(folder),
                            str(source)], cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = folder.glob("specbench-core-*.tar.gz")
    return tarball


# ---------------------------------------------------------------------------------------------
# The emulator as a process of the test
# ---------------------------------------------------------------------------------------------
class Emulator:
    """One emulator process started by a test."""

    def __init__(self, tmp: Path, args: list[str], time_scale: float, wait: bool):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.device_dir = tmp / f"dev-{self.port}"
        self.log_path = tmp / f"emulator-{self.port}.log"
        self.argv = [
            sys.executable,
            str(EMULATOR),
            "--model-path",
            "test/model",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--emulator-time-scale",
            str(time_scale),
            "--emulator-device-dir",
            str(self.device_dir),
            *args,
        ]
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited {self.proc.returncode}:\n{self.log()}")
            try:
                status, unused_headers, unused_body = http("GET", self.base_url + "/health_generate", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"emulator not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        """SIGKILL the group, then any holder of this test's device folder (orphans)."""
        _kill(self.proc.pid, group=True)
        self.proc.wait(timeout=10)
        if self.device_dir.exists():
            for pid in holders_of(self.device_dir) - {os.getpid()}:
                _kill(pid)
        self._log.close()


# ---------------------------------------------------------------------------------------------
# Playbooks through ansible-runner
# ---------------------------------------------------------------------------------------------
def role_default(role: str, name: str):
    """A role's default, as roles/<role>/defaults/main.yml gives it."""
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[name]


def local_host(**hostvars) -> dict:
    """Host variables of a host reached with the local connection and this interpreter."""
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hostvars}


def inventory(hosts: dict[str, dict]) -> dict:
    """An inventory of ``hosts`` (name -> host variables) in group all."""
    return {"all": {"hosts": hosts}}


class PlaybookRun:
    """A finished ansible-runner run: rc, status, events, stdout, its private data folder and
    extra vars; saved and loaded as JSON (``shared_run``).

    Every folder reads its runs through these helpers: events by type, failures (every one, or
    the last per host), changed tasks, a task's last result (``task``), facts (``facts``/``fact``),
    the stats AWX reads, and a bench run's results files (extra vars results_dir and run_id).
    """

    def __init__(self, rc: int, status: str, events: list, stdout: str, pdd: Path, extravars: dict | None = None):
        self.rc, self.status, self.events, self.stdout = rc, status, events, stdout
        self.pdd, self.extravars = Path(pdd), dict(extravars or {})

    @classmethod
    def of(cls, runner, pdd: Path, extravars: dict | None = None) -> PlaybookRun:
        return cls(runner.rc, runner.status, list(runner.events), runner.stdout.read(), pdd, extravars)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"rc": self.rc, "status": self.status, "events": self.events, "stdout": self.stdout,
                                    "pdd": str(self.pdd), "extravars": self.extravars}))

    @classmethod
    def load(cls, path: Path) -> PlaybookRun:
        data = json.loads(path.read_text())
        return cls(data["rc"], data["status"], data["events"], data["stdout"], Path(data["pdd"]), data.get("extravars"))

    # Events
    def events_of(self, event: str) -> list[tuple[str, str, dict]]:
        """(host, task name, result) for every event of this type (e.g. runner_on_ok)."""
        out = []
        for ev in self.events:
            if ev.get("event") == event:
                data = ev.get("event_data", {})
                out.append((data.get("host"), data.get("task", ""), data.get("res", {})))
        return out

    def results(self, event: str) -> list[tuple[str, str, dict]]:
        return self.events_of(event)

    def failures(self) -> list[tuple[str, str, str]]:
        """(host, task, message) of every failed task, rescued and ignored ones included."""
        return [(h, t, str(r.get("msg", ""))) for h, t, r in self.events_of("runner_on_failed")]

    def failed_hosts(self) -> dict[str, str]:
        """host -> the message of its last failure that was not ignored (rescued ones included)."""
        out = {}
        for ev in self.events:
            data = ev.get("event_data", {})
            if ev.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
                out[data.get("host")] = str(data.get("res", {}).get("msg", ""))
        return out

    def changed(self, host: str | None = None) -> list[str]:
        """Names of tasks that reported a change (items count once per task)."""
        names = {task for h, task, res in self.events_of("runner_on_ok") + self.events_of("runner_item_on_ok")
                 if (host is None or h == host) and res.get("changed")}
        return sorted(names)

    def task_started(self, fragment: str) -> list[str]:
        """Hosts on which a task whose name contains ``fragment`` started."""
        return [h for h, t, _res in self.events_of("runner_on_start") if fragment in t]

    def task(self, fragment: str, host: str | None = None) -> dict:
        """The result of the last run of the task whose name contains ``fragment``."""
        found = None
        for ev in self.events:
            data = ev.get("event_data", {})
            if (ev.get("event", "").startswith("runner_on_") and fragment in data.get("task", "")
                    and (host is None or data.get("host") == host) and "res" in data):
                found = data["res"]
        assert found is not None, f"no task named like {fragment!r} ran:\n{self.stdout[-3000:]}"
        return found

    # Facts and stats
    def facts(self, host: str | None = None) -> dict:
        """Facts the tasks returned (ansible_facts of each ok result, set_fact's included), merged in order."""
        out: dict = {}
        for h, _task, res in self.events_of("runner_on_ok"):
            if (host is None or h == host) and isinstance(res, dict):
                out.update(res.get("ansible_facts") or {})
        return out

    def fact(self, name: str, host: str | None = None):
        """The last value a task gave the fact ``name`` (KeyError when none did)."""
        return self.facts(host)[name]

    def stats(self) -> dict:
        for ev in reversed(self.events):
            if ev.get("event") == "playbook_on_stats":
                return ev.get("event_data", {})
        return {}

    def artifact_stats(self) -> dict:
        """The set_stats data (per_host: false) as AWX reads it: the stats event's artifact_data."""
        return self.stats().get("artifact_data") or {}

    def artifacts_text(self) -> str:
        """Everything ansible-runner kept of the run (stdout, events, facts), as one text."""
        return "\n".join(p.read_text(errors="replace") for p in (self.pdd / "artifacts").rglob("*") if p.is_file())

    # A bench run's results files (extra vars results_dir and run_id)
    @property
    def results_dir(self) -> Path:
        return Path(self.extravars["results_dir"])

    @property
    def run_id(self) -> str:
        return str(self.extravars["run_id"])

    def results_file(self, host: str, mode: str) -> Path:
        return self.results_dir / self.run_id / host / f"{mode}.json"

    def mode_results(self, host: str, mode: str) -> dict:
        return json.loads(self.results_file(host, mode).read_text())


# What the suite pins, as extra variables, unless a test sets them itself:
# - the emulator's launch-to-launch variation (sglang_server_emulator_launch_sd, 2% by default as on a real
#   node) is off: tests that hold a speed to an earlier launch's measurement would read that 2% as a change;
# - compare.yml's default, compare_launches: auto, launches each mode twice (A B B A) on a node without a noise
#   floor, and every test's node is new: one launch per mode.
# - serve.yml's default, serve_measure_references: true, launches each of the proof's references again just
#   before the served launch: the tests about other parts of serve.yml hold the proof to the run's figures.
# - compare.yml's default, compare_max_launches: 6, measures levels still unclear in added launches: the tests
#   about other parts of compare.yml make no added launch.
# tests/compare/test_launch_floor_runs.py runs the compare defaults and serve.yml's end to end.
PINNED = {"sglang_server_emulator_launch_sd": 0}
COMPARE_PINNED = {"compare_launches": 1, "compare_max_launches": 0}
SERVE_PINNED = {"serve_measure_references": False}


def _runner_args(folder: Path, playbook: str | Path, inventory: dict | str | Path | None, extravars: dict | None,
                 envvars: dict | None, check: bool, cmdline: str | None, limit: str | None, ident: str | None,
                 name: str | None, forks: int | None, home: Path | None, timeout: int) -> tuple[Path, dict, dict]:
    """(private data folder, ansible_runner keyword arguments, the extra vars) of a run (see run_playbook)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pdd = folder / (name or f"runner-{len(list(folder.glob('runner-*')))}")
    pdd.mkdir(exist_ok=True)
    kwargs = {}
    if isinstance(inventory, Path):
        kwargs["inventory"] = str(inventory)
    elif inventory is not None:
        inv = pdd / "inventory.yml"
        inv.write_text(inventory if isinstance(inventory, str) else yaml.safe_dump(inventory))
        kwargs["inventory"] = str(inv)
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(pdd / "ansible-local"),
        "ANSIBLE_REMOTE_TMP": str(pdd / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    if forks is not None:
        env["ANSIBLE_FORKS"] = str(forks)
    if home is not None:
        env["HOME"] = str(home)
    env.update(envvars or {})
    flags = " ".join(f for f in ("--check" if check else "", cmdline or "") if f)
    pinned = {"compare.yml": COMPARE_PINNED, "serve.yml": SERVE_PINNED}.get(Path(playbook).name, {})
    extravars = {**PINNED, **pinned, **(extravars or {})}
    kwargs.update(private_data_dir=str(pdd), project_dir=str(ROOT), playbook=str(playbook), extravars=extravars or {},
                  envvars=env, cmdline=flags or None, limit=limit, ident=ident, quiet=True, timeout=timeout)
    return pdd, kwargs, extravars


def run_playbook(folder: Path, playbook: str | Path, inventory: dict | str | Path | None = None,
                 extravars: dict | None = None, *, envvars: dict | None = None, check: bool = False,
                 cmdline: str | None = None, limit: str | None = None, ident: str | None = None,
                 name: str | None = None, forks: int | None = None, home: Path | None = None,
                 timeout: int = 540) -> PlaybookRun:
    """Run ``playbook`` (relative to the checkout, or absolute) through ansible-runner.

    The private data folder is ``folder/<name>`` (default ``runner-<n>``, a fresh one per run).
    ``inventory``: a dict or YAML text (written into that folder), a path to an inventory file,
    or None for ansible.cfg's default (inventory/local.yml). ``home`` sets HOME for the run
    (keeps ~/.ansible and ~/.ssh of the user out of it).
    """
    pdd, kwargs, extravars = _runner_args(folder, playbook, inventory, extravars, envvars, check, cmdline, limit,
                                          ident, name, forks, home, timeout)
    import ansible_runner  # the controller's package; imported here so that the kit loads without it

    started, cpu = time.monotonic(), _children_cpu()
    runner = ansible_runner.run(**kwargs)
    run = PlaybookRun.of(runner, pdd, extravars)
    _log_run(run, playbook, time.monotonic() - started, _children_cpu() - cpu)
    return run


def start_playbook(folder: Path, playbook: str | Path, inventory: dict | str | Path | None = None,
                   extravars: dict | None = None, *, home: Path | None = None, name: str | None = None,
                   timeout: int = 540, cancel_callback=None):
    """Start ``playbook`` through ansible-runner and return at once: (thread, runner, private data folder).
    ``runner.pid`` is ansible-playbook's once it started; ``cancel_callback`` returning True cancels the run as
    AWX does (ansible-runner kills the playbook's process group). ``PlaybookRun.of(runner, pdd)`` reads it once
    the thread ended."""
    pdd, kwargs, extravars = _runner_args(folder, playbook, inventory, extravars, None, False, None, None, None, name,
                                          None, home, timeout)
    import ansible_runner

    if cancel_callback is not None:
        kwargs["cancel_callback"] = cancel_callback
    thread, runner = ansible_runner.run_async(**kwargs)
    return thread, runner, pdd


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _log_run(run: PlaybookRun, playbook, wall: float, cpu: float) -> None:
    """Where SPECBENCH_RUN_LOG names a file, append one JSON line per playbook run: the test, the
    playbook, its wall and CPU seconds (ansible-playbook and everything it waited for) and its
    tasks by kind (benchmarks/suite_runs.py sums them: where the suite's time goes)."""
    path = os.environ.get("SPECBENCH_RUN_LOG")
    if not path:
        return
    tasks = modules = 0
    for event in run.events:
        if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            tasks += 1
            action = str(event.get("event_data", {}).get("task_action", ""))
            if event["event"] != "runner_on_skipped" and action not in CONTROLLER_ACTIONS:
                modules += 1
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0], "playbook": str(playbook),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tasks": tasks, "module_runs": modules}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


# Actions that run on the controller only (no module shipped to the node).
CONTROLLER_ACTIONS = frozenset(f"ansible.builtin.{name}" for name in (
    "assert", "set_fact", "include_tasks", "include_role", "import_tasks", "import_role", "validate_argument_spec",
    "fail", "debug", "set_stats", "meta", "add_host", "group_by", "include_vars", "pause")) | frozenset(
    f"specbench.core.{name}" for name in ("bench_results_file", "bench_scripts_manifest", "compare_results"))


def cases_playbook(path: Path, cases: dict[str, dict], role: str = "specbench.core.sglang_server",
                   record: str = "specbench_server") -> Path:
    """Write a playbook with one play per case: each runs ``role`` with the case's variables
    and records the outcome in ``{{ specbench_node_dir }}/cases/<name>.json`` (failed, task, msg
    or the variable ``record``, by default the fact), so one ansible-runner run covers many cases.

    A case is ``{"vars": {...}, "tasks_from": "main", "check": False}``.
    """
    plays = []
    for name, case in cases.items():
        outfile = "{{ specbench_node_dir }}/cases/" + name + ".json"
        plays.append({
            "name": f"Test | Case {name}",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": case.get("vars", {}),
            "tasks": [{
                "name": f"Test | Try {name}",
                "check_mode": bool(case.get("check", False)),
                "block": [
                    {"name": "Test | Run the role", "ansible.builtin.include_role": {
                        "name": role, "tasks_from": case.get("tasks_from", "main")}},
                    {"name": "Test | Record the success", "ansible.builtin.copy": {
                        "content": "{{ {'failed': false, 'fact': " + record + " | default(none)} | to_nice_json }}",
                        "dest": outfile, "mode": "0644"}, "check_mode": False},
                ],
                "rescue": [
                    {"name": "Test | Record the failure", "ansible.builtin.copy": {
                        "content": "{{ {'failed': true, 'task': ansible_failed_task.name, "
                                   "'msg': ansible_failed_result.msg | default('')} | to_nice_json }}",
                        "dest": outfile, "mode": "0644"}, "check_mode": False},
                ],
            }],
        })
    path.write_text(yaml.safe_dump(plays, sort_keys=False, width=200))
    return path


def case_outcomes(node_dir: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((node_dir / "cases").glob("*.json"))}


def shared_run(tmp_path_factory, name: str, build) -> tuple[PlaybookRun, Path]:
    """Run ``build(folder)`` (returning a PlaybookRun) once per test session, even when
    pytest-xdist spreads the tests that share it over several workers: the first worker runs it
    under a lock, the others read the saved run. Returns (run, folder)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / "run.json"
        if record.is_file():
            return PlaybookRun.load(record), folder
        folder.mkdir(exist_ok=True)
        run = build(folder)
        run.save(record)
        return run, folder


def start_shared_run(tmp_path_factory, name: str, build) -> threading.Thread:
    """Start ``shared_run(tmp_path_factory, name, build)`` in a thread and return at once: the
    shared_run of the same name that reads it later waits for it (its lock) and reads its record,
    or, when it failed without one, runs it again and reports that. For a run that mostly waits
    (an emulator slowed down), started beside another in the same file."""
    # The session's base folder first, here: made lazily, and with --basetemp removed and made again,
    # so the thread and its caller's next shared_run would both make it, and one would fail (seen).
    tmp_path_factory.getbasetemp()

    def run() -> None:
        try:
            shared_run(tmp_path_factory, name, build)
        except Exception:  # noqa: BLE001 - the reader runs it again and fails with the reason
            pass

    thread = threading.Thread(target=run, name=f"shared-{name}", daemon=True)
    thread.start()
    return thread


# The interval simulations' noise (tests/unit/plugins/module_utils/specbench_compare/test_intervals.py,
# tests/unit/plugins/module_utils/specbench_client/test_level_intervals.py)
def ar1(rng: random.Random, n: int, rho: float, sd: float) -> list[float]:
    """Stationary AR(1) noise with marginal standard deviation ``sd``."""
    innov = sd * math.sqrt(1 - rho * rho)
    e = rng.gauss(0.0, sd)
    out = []
    for _dummy in range(n):
        out.append(e)
        e = rho * e + rng.gauss(0.0, innov)
    return out

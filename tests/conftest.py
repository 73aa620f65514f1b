"""Shared fixtures. The helpers live in specbench_testkit (a unique module name: every test
folder has a conftest.py, so ``from conftest import`` would be ambiguous)."""
from __future__ import annotations

import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import pytest

# pytest puts this folder on sys.path itself; ansible-test units imports this file as a module of
# the collection (ansible_collections.specbench.core.tests.conftest) and does not.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from specbench_testkit import Emulator, first_ready_unit, schedule_lines, schedule_unit

# The modules the suite's playbooks run compile their zipped sources once per suite, not once per
# module run (tests/zipimport_cache.py says how, and that only this suite's processes use it): the
# hook goes into the venv that runs the tests, whose interpreter is the test nodes' Python. Set up
# by the controlling pytest process (xdist's workers, started after this, inherit the variable).
ZIPIMPORT_CACHE = Path(__file__).resolve().parent / ".tmp" / "zipimport-cache"


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") or sys.prefix == sys.base_prefix:
        return  # a worker (set up by its controller), or no venv to install into
    if config.inipath is None or Path(config.inipath).resolve() != Path(__file__).resolve().parent.parent / "pyproject.toml":
        return  # not this suite's run: ansible-test units (its own pytest.ini) runs tests/unit in a venv of its own
    site = Path(sysconfig.get_paths()["purelib"])
    hook = Path(__file__).resolve().parent / "zipimport_cache.py"
    for name, text in (("specbench_zipimport_cache.py", hook.read_text(encoding="utf-8")),
                       ("specbench_zipimport_cache.pth", "import specbench_zipimport_cache\n")):
        target = site / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            part = target.with_name(f".{name}.{os.getpid()}")
            part.write_text(text, encoding="utf-8")
            os.replace(part, target)
    os.environ.setdefault("SPECBENCH_ZIPIMPORT_CACHE", str(ZIPIMPORT_CACHE))


@pytest.fixture
def emulator(tmp_path):
    """Factory: ``emulator(*flags, time_scale=0.1, wait=True)`` starts one; all are stopped."""
    started: list[Emulator] = []

    def start(*args: str, time_scale: float = 0.1, wait: bool = True) -> Emulator:
        emu = Emulator(tmp_path, list(args), time_scale, wait)
        started.append(emu)
        return emu

    yield start
    for emu in started:
        emu.stop()


# Scheduling under ``pytest -n 3 --dist loadfile`` (tests/run): each file goes whole to one
# worker (a module's fixtures start once), except that all of tests/vllm is one unit, so the
# session-scoped pool of vLLM runs (tests/vllm/conftest.py) starts each server once for every
# file there. That unit is the longest (real servers starting on a busy CPU), so it is queued
# first (tests/run passes --no-loadscope-reorder: units go out in collection order) and the other
# workers take the rest meanwhile. A unit that needs an engine's venv (UNIT_VENVS) which .ci/run is
# still building beside the tests waits in the queue, and a free worker takes the next unit instead:
# a worker that took tests/vllm first sat 220-270 s waiting for .venv-vllm while the other
# worker and the builds left the CPUs idle a fifth of that time. A waiting unit goes out as soon as
# its venv is done (the next time a worker asks), or when nothing else is left.
# (xdist's own --dist loadgroup cannot do this under pytest 9: it renames items through an
# attribute pytest no longer reads.)
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesWithVllmAsOne(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            ready = first_ready_unit(self.workqueue)
            if ready is not None:
                self.workqueue.move_to_end(ready, last=False)  # the unit xdist pops next
            super()._assign_work_unit(node)

    return FilesWithVllmAsOne(config, log)


# Where the wall time went: each worker's units as they ran (first start, last stop of their tests'
# phases, from the reports the workers send), printed at the end of a run with workers, so a slow
# run shows its critical path (a worker waiting, one long unit last) and not only the slowest tests.
SCHEDULE: dict[tuple[str, str], list[float]] = {}
SESSION_START = time.time()


def pytest_runtest_logreport(report):
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker is None or not getattr(report, "start", 0):  # not a worker's report (no xdist), or no times
        return
    span = SCHEDULE.setdefault((worker, schedule_unit(report.nodeid)), [report.start, report.stop])
    span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)


def pytest_terminal_summary(terminalreporter):
    if SCHEDULE:
        terminalreporter.section("schedule: each worker's files (seconds from the session's start)")
        for line in schedule_lines(SCHEDULE, SESSION_START):
            terminalreporter.write_line(line)
        if os.environ.get("SPECBENCH_SCHEDULE_FILE"):  # every unit's span, for tuning the suite's wall time
            rows = [{"worker": w, "unit": u, "start": a - SESSION_START, "stop": b - SESSION_START}
                    for (w, u), (a, b) in sorted(SCHEDULE.items(), key=lambda kv: kv[1][0])]
            Path(os.environ["SPECBENCH_SCHEDULE_FILE"]).write_text(json.dumps(rows, indent=1) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    del config
    items.sort(key=lambda item: not item.nodeid.startswith("tests/vllm/"))  # stable: files keep their order


# In CI (CI=true, as .ci/run runs there) a test may skip only for what no machine of this
# project's CI can have; any other skip (a missing tool, venv or user that .ci/run installs)
# fails, so what CI checks never depends on what the machine happened to have.
SKIPS_ALLOWED_IN_CI = (
    "systemd is not PID 1",  # tests/node/test_node_first_hour_units.py: containers, CI
    "needs an NVIDIA GPU",   # the GPU checks: CI has no GPU
    # tests/sglang_cpu: SGLang's CPU kernel source is on no package registry; a developer brings it
    "needs SGLang's source tree (SPECBENCH_SGLANG_SRC)",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    del item, call
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes") or not report.skipped:
        return
    reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
    if not any(allowed in reason for allowed in SKIPS_ALLOWED_IN_CI):
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI, where nothing may be: {reason}. .ci/run must install or build what this "
                           "test needs (or, for what no CI machine can have, add the reason to SKIPS_ALLOWED_IN_CI "
                           "in tests/conftest.py)")


# Tuning aid (SPECBENCH_CPU_CGROUP=<a cgroup v1 cpuacct folder this user may write>): each worker
# moves itself into a child folder per unit as the unit starts, so every process a unit starts
# (servers, emulators, playbooks) is charged to it; read the folders' cpuacct.usage after the run.
CPU_CGROUP = os.environ.get("SPECBENCH_CPU_CGROUP")
CPU_UNIT = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not CPU_CGROUP:
        return
    unit = schedule_unit(item.nodeid)
    if unit != CPU_UNIT[0]:
        CPU_UNIT[0] = unit
        folder = Path(CPU_CGROUP) / unit.strip("/").replace("/", "__")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup.procs").write_text(str(os.getpid()))

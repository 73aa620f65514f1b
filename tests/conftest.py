"""Shared fixtures. The helpers live in specbench_testkit (a unique module name: every test
folder has a conftest.py, so ``from conftest import`` would be ambiguous)."""
from __future__ import annotations

import os

import pytest
from specbench_testkit import ENGINE_VENV_OF_FOLDER, Emulator, venv_pending, vllm_unit


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
# worker (a module's fixtures start once), except tests/vllm, which is two units, one per run of
# its session-scoped pool with the tests that read it (specbench_testkit.vllm_unit), so each vLLM
# server starts once and the two runs go on at once. The vLLM units are the longest (real servers
# starting on a busy CPU), so they are queued first, one to each of two workers (tests/run passes
# --no-loadscope-reorder: units go out in collection order), and the third worker takes the rest
# meanwhile. A unit whose tests need an engine venv that .ci/run is still building beside the
# tests (SGLang's; .ci/run starts pytest once vLLM's is built, since a unit handed out late waits
# behind the file its worker is in) waits in the queue while other units are left, instead of
# holding a worker idle (xdist's own --dist loadgroup cannot do this under pytest 9: it renames
# items through an attribute pytest no longer reads).
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    def venv_of(scope: str) -> str | None:
        return next((venv for folder, venv in ENGINE_VENV_OF_FOLDER.items() if scope.startswith(folder)), None)

    class FilesWithVllmByRun(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return f"tests/vllm/ {vllm_unit(nodeid)} run" if path.startswith("tests/vllm/") else path

        def _assign_work_unit(self, node) -> None:
            ready = next((scope for scope in self.workqueue
                          if venv_of(scope) is None or not venv_pending(venv_of(scope))), None)
            if ready is not None:
                self.workqueue.move_to_end(ready, last=False)
            super()._assign_work_unit(node)

    return FilesWithVllmByRun(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    del config
    # The compare run's unit first (the longest), then the bench run's; the rest keep their order.
    items.sort(key=lambda item: (0 if item.nodeid.startswith("tests/vllm/") and vllm_unit(item.nodeid) == "compare"
                                 else 1 if item.nodeid.startswith("tests/vllm/") else 2))

# In CI (CI=true, as .ci/run runs there) a test may skip only for what no machine of this
# project's CI can have; any other skip (a missing tool, venv or user that .ci/run installs)
# fails, so what CI checks never depends on what the machine happened to have.
SKIPS_ALLOWED_IN_CI = (
    "systemd is not PID 1",  # tests/node/test_node_first_hour_units.py: containers, CI
    "needs an NVIDIA GPU",   # the GPU checks: CI has no GPU
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

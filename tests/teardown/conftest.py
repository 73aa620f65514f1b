"""Fixtures for the teardown tests (helpers in td_support.py, a name no other area uses).

Tests marked ``own_pid_namespace`` run in a PID namespace of their own: the test is run again
by ``unshare --pid --fork --mount-proc`` (util-linux), where it is process 1 and /proc shows
only what it starts, so not even a ``gpu_kill_scope: node`` teardown can reach anything
outside, and everything left in it dies with it. Outside, the marked test only reports the
inner run's result.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from td_support import ROOT, Lab

INSIDE = "SPECBENCH_TD_PIDNS"


def pytest_configure(config):
    config.addinivalue_line("markers", "own_pid_namespace: the test runs in its own PID namespace (unshare)")


def inside_own_namespace(item) -> bool:
    return os.environ.get(INSIDE) == item.nodeid


def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("own_pid_namespace") is None or inside_own_namespace(pyfuncitem):
        return None
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
         sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "-rs", pyfuncitem.nodeid],
        cwd=ROOT, env=dict(os.environ, **{INSIDE: pyfuncitem.nodeid}), capture_output=True, text=True,
        timeout=540, check=False,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"in its own PID namespace, the test failed (rc {proc.returncode}):\n{out[-12000:]}",
                    pytrace=False)
    if " skipped" in out.splitlines()[-1] and " passed" not in out.splitlines()[-1]:
        pytest.skip(out.strip().splitlines()[-2][:500] if len(out.strip().splitlines()) > 1 else out)
    return True


def pytest_runtest_setup(item):
    if item.get_closest_marker("own_pid_namespace") is None or inside_own_namespace(item):
        return
    if os.geteuid() != 0:
        pytest.skip("a PID namespace of its own needs root (unshare --pid); run the teardown tests as root")
    if not shutil.which("unshare"):
        pytest.skip("unshare (Debian package util-linux) is not installed")


@pytest.fixture
def lab(tmp_path):
    """This test's device folder (two emulated H200s) and the processes it starts there."""
    lab = Lab(tmp_path)
    yield lab
    lab.cleanup()


@pytest.fixture
def in_namespace(request):
    """True inside the test's own PID namespace (the marked test's body runs only there)."""
    return inside_own_namespace(request.node)

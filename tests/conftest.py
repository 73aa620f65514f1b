"""Shared fixtures. The helpers live in specbench_testkit (a unique module name: every test
folder has a conftest.py, so ``from conftest import`` would be ambiguous)."""
from __future__ import annotations

import pytest
from specbench_testkit import Emulator


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

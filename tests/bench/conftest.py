"""Fixtures of the sweep tests (helpers in benchlib.py)."""
from __future__ import annotations

import pytest
from benchlib import FaultProxy, free_port


@pytest.fixture
def fault_proxy():
    """Factory: ``fault_proxy(target_port, mode, after)``; all are stopped afterwards."""
    started: list[FaultProxy] = []

    def start(target_port: int, mode: str, after: int) -> FaultProxy:
        proxy = FaultProxy(free_port(), target_port, mode, after)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()

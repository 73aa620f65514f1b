"""Fixtures for the teardown tests (helpers in td_support.py, a name no other area uses)."""
from __future__ import annotations

import pytest
from td_support import Lab


@pytest.fixture
def lab(tmp_path):
    """This test's device folder (two emulated H200s) and the processes it starts there."""
    lab = Lab(tmp_path)
    yield lab
    lab.cleanup()

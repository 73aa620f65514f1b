"""The comparison's tests import the collection's module_utils from the checkout; ``browser``: Chromium
for the report's browser tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT / "collections", Path(__file__).resolve().parent):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


@pytest.fixture(scope="session")
def browser():
    """Chromium, installed where it is missing and can be (report_browser.ensure_chromium); the tests
    that need it skip, saying why, only where it cannot be (a skip CI refuses: .ci/run installs it).
    Session-scoped, so it is settled before the runs the tests read."""
    import report_browser

    found, why = report_browser.ensure_chromium()
    if not found:
        pytest.skip(why)
    return found

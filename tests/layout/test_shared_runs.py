"""The test kit's shared runs (tests/specbench_testkit.py): a run started in a thread beside
another (start_shared_run) and its caller's own shared_run, on a session whose base folder
neither has made yet (a file run alone, with --basetemp, whose first fixture starts them)."""
from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.tmpdir import TempPathFactory
from specbench_testkit import PlaybookRun, shared_run, start_shared_run


def finished(folder: Path) -> PlaybookRun:
    """What a build returns: a run, which saves its record (read back by whichever comes second)."""
    return PlaybookRun(0, "successful", [], "", folder)


@pytest.mark.parametrize("worker", [None, "gw0"], ids=["alone", "xdist-worker"])
def test_a_run_started_beside_another_and_the_callers_run_both_finish(tmp_path, monkeypatch, worker):
    # 20 fresh sessions: before the kit made the base folder first, the thread and its caller both
    # made it (pytest removes a given --basetemp and makes it again) and one failed with
    # FileExistsError (a loop of the regions file run alone, its first run). Each session has its
    # own parent folder: an xdist worker's shared runs live in its base folder's parent (the
    # session's, shared by its workers), so sessions under one parent would read each other's runs.
    if worker:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    else:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    for i in range(20):
        session = tmp_path / f"session{i}"
        session.mkdir()
        factory = TempPathFactory(session / "base", 3, "all", trace=lambda *args: None, _ispytest=True)
        thread = start_shared_run(factory, "beside", finished)
        caller, folder = shared_run(factory, "caller", finished)
        beside, beside_folder = shared_run(factory, "beside", finished)  # waits on the thread's lock
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert (caller.status, beside.status) == ("successful", "successful")
        assert folder.parent == beside_folder.parent == (session if worker else session / "base")
        assert (beside_folder / "run.json").is_file(), f"session {i}: the run beside did not finish"

"""The test kit's shared runs (tests/specbench_testkit.py): a run started in a thread beside
another (start_shared_run) and its caller's own shared_run, on a session whose base folder
neither has made yet (a file run alone, with --basetemp, whose first fixture starts them)."""
from __future__ import annotations

import json
from pathlib import Path

from _pytest.tmpdir import TempPathFactory
from specbench_testkit import shared_run, start_shared_run


class Finished:
    """What a build returns: a run that saves itself (the kit's PlaybookRun saves its record)."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"rc": 0}), encoding="utf-8")


def test_a_run_started_beside_another_and_the_callers_run_both_finish(tmp_path):
    # 20 fresh sessions: before the kit made the base folder first, the thread and its caller both
    # made it (pytest removes a given --basetemp and makes it again) and one failed with
    # FileExistsError (a loop of the regions file run alone, its first run).
    for i in range(20):
        factory = TempPathFactory(tmp_path / f"base{i}", 3, "all", trace=lambda *args: None, _ispytest=True)
        thread = start_shared_run(factory, "beside", lambda folder: Finished())
        unused_run, folder = shared_run(factory, "caller", lambda folder: Finished())
        thread.join(timeout=60)
        assert (folder / "run.json").is_file()
        assert (folder.parent / "shared-beside" / "run.json").is_file(), f"session {i}: the run beside did not finish"

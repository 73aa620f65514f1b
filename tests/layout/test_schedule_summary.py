"""The pytest run's schedule summary (tests/conftest.py prints it at the end of a run with workers,
.ci/run's log keeps it): each worker's units, where its wall time went, its critical path."""
from __future__ import annotations

from specbench_testkit import UNIT_VENVS, first_ready_unit, schedule_lines, schedule_unit


def test_every_vllm_file_is_one_unit_and_every_other_file_its_own():
    assert schedule_unit("tests/vllm/test_vllm_bench.py::test_x[a]") == "tests/vllm/"
    assert schedule_unit("tests/vllm/test_vllm_serve.py::test_y") == "tests/vllm/"
    assert schedule_unit("tests/compare/test_maths.py::test_z") == "tests/compare/test_maths.py"


def test_a_unit_whose_venv_is_being_built_waits_and_goes_first_once_it_is_built(tmp_path, monkeypatch):
    units = ["tests/vllm/", "tests/sglang_parser/test_sglang_parser.py", "tests/compare/test_maths.py"]
    assert set(UNIT_VENVS) == {"tests/vllm/", "tests/sglang_parser/test_sglang_parser.py",
                               "tests/sglang_cpu/test_run_real_sglang_script.py"}
    # No build beside the tests (a developer's run): the queue's order.
    monkeypatch.delenv("SPECBENCH_VENV_STATUS", raising=False)
    assert first_ready_unit(units) == "tests/vllm/"
    # .ci/run building both engine venvs: the first unit that needs neither.
    monkeypatch.setenv("SPECBENCH_VENV_STATUS", str(tmp_path))
    assert first_ready_unit(units) == "tests/compare/test_maths.py"
    assert first_ready_unit(units[:2]) is None  # nothing else left: the scheduler sends the first, which waits
    # A build that ended (its status file, failed or not: the unit's tests report a failed build).
    (tmp_path / "sglang").write_text("1 90\n")
    assert first_ready_unit(units) == "tests/sglang_parser/test_sglang_parser.py"
    (tmp_path / "vllm").write_text("0 200\n")
    assert first_ready_unit(units) == "tests/vllm/"


def test_each_worker_line_names_its_span_its_idle_time_its_longest_and_its_last_unit():
    start = 1000.0
    schedule = {
        ("gw0", "tests/vllm/"): [1190.0, 1600.0],          # waited 190 s for the venv, then 410 s
        ("gw1", "tests/a.py"): [1002.0, 1100.0],
        ("gw1", "tests/b.py"): [1105.0, 1700.0],           # the critical path: the last, longest unit
        ("gw1", "tests/c.py"): [1100.0, 1104.0],
    }
    gw0, gw1 = schedule_lines(schedule, start)
    assert gw0 == ("gw0: 1 files 190-600 s, in them 410 s, between them 0 s; longest: tests/vllm/ 190-600; "
                   "last: tests/vllm/ 190-600")
    # 98 + 4 + 595 = 697 s in the units of a 698-s span: 1 s between them
    assert gw1 == ("gw1: 3 files 2-700 s, in them 697 s, between them 1 s; longest: tests/b.py 105-700, "
                   "tests/a.py 2-100, tests/c.py 100-104; last: tests/b.py 105-700")

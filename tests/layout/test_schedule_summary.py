"""The pytest run's schedule summary (tests/conftest.py prints it at the end of a run with workers,
.ci/run's log keeps it): each worker's units, where its wall time went, its critical path."""
from __future__ import annotations

from specbench_testkit import schedule_lines, schedule_unit


def test_every_vllm_file_is_one_unit_and_every_other_file_its_own():
    assert schedule_unit("tests/vllm/test_vllm_bench.py::test_x[a]") == "tests/vllm/"
    assert schedule_unit("tests/vllm/test_vllm_serve.py::test_y") == "tests/vllm/"
    assert schedule_unit("tests/compare/test_maths.py::test_z") == "tests/compare/test_maths.py"


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

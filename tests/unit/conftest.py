"""The unit tests of the collection's plugins (module_utils, modules, action), laid out as
``ansible-test units`` wants them (tests/unit/plugins/<type>/...): tests/sanity/run.sh --units runs
them there, and the repository's own pytest runs them with the rest of tests/.

They start no server, playbook or emulator. Their helpers stay with the rest of the suite:
specbench_testkit (tests/, importable through tests/conftest.py, which pytest loads under both
runners and which puts files/, the emulator's performance model, on sys.path) and compare_synth
(tests/compare, the synthetic results files the comparison's playbook tests use too)."""

from __future__ import annotations

import sys
from pathlib import Path

COMPARE_KIT = Path(__file__).resolve().parents[1] / "compare"  # compare_synth
if str(COMPARE_KIT) not in sys.path:
    sys.path.insert(0, str(COMPARE_KIT))

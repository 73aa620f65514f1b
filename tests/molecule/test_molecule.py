"""`molecule test` for every role's default scenario (roles/*/molecule/default), each run in
its role folder the way a role author runs it: converge, idempotence, verify, destroy.

The scenarios find the collection the way ansible-test and an installed collection have it, at
``<path>/ansible_collections/specbench/core``, not through the checkout's own ``collections/``
link: the test runs them in a copy of the checkout's files (what git tracks or would track) laid
out that way."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from specbench_testkit import copy_checkout, free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SCENARIOS = sorted(ROOT.glob("roles/*/molecule/default/molecule.yml"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def collection_copy(tmp_path_factory) -> Path:
    """The checkout's files at <tmp>/ansible_collections/specbench/core (links kept as links)."""
    return copy_checkout(tmp_path_factory.mktemp("molecule") / "ansible_collections" / "specbench" / "core")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.parents[2].name for p in SCENARIOS])
def test_molecule_default_scenario(scenario, tmp_path, collection_copy):
    role_dir = collection_copy / scenario.relative_to(ROOT).parents[2]
    molecule = VENV_BIN / "molecule"
    assert molecule.exists(), f"molecule is not installed in {VENV_BIN}: pip install -r requirements-dev.txt"
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SPECBENCH_MOLECULE_PORT": str(free_port()),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
        "PY_COLORS": "0",
    }
    proc = subprocess.run([str(molecule), "test"], cwd=role_dir, env=env, capture_output=True, text=True,
                          timeout=540, check=False)
    output = proc.stdout + proc.stderr
    (tmp_path / "molecule.log").write_text(output)
    assert proc.returncode == 0, f"molecule test failed in {role_dir} (full log {tmp_path / 'molecule.log'}):\n" + \
        output[-6000:]

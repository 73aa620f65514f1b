"""`molecule test` for every role's default scenario (roles/*/molecule/default), each run in
its role folder the way a role author runs it: converge, idempotence, verify, destroy."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SCENARIOS = sorted(ROOT.glob("roles/*/molecule/default/molecule.yml"))

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.parents[2].name for p in SCENARIOS])
def test_molecule_default_scenario(scenario, tmp_path):
    role_dir = scenario.parents[2]
    molecule = VENV_BIN / "molecule"
    assert molecule.exists(), f"molecule is not installed in {VENV_BIN}: pip install -r requirements-dev.txt"
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SPECBENCH_MOLECULE_PORT": str(_free_port()),
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

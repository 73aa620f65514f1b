"""galaxy-importer, what Galaxy and Automation Hub run on every upload, passes on the tarball
`ansible-galaxy collection build` makes: metadata, content names, a README per role, ansible-doc
on every plugin, ansible-lint on the content, the changelog."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from specbench_testkit import build_collection, copy_checkout

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

CONFIG = """[galaxy-importer]
LOG_LEVEL_MAIN = INFO
RUN_ANSIBLE_DOC = True
RUN_ANSIBLE_LINT = True
OFFLINE_ANSIBLE_LINT = True
CHECK_CHANGELOG = True
"""


def _import(tmp_path: Path, tarball: Path, config_text: str = CONFIG) -> subprocess.CompletedProcess:
    config = tmp_path / "galaxy-importer.cfg"
    config.write_text(config_text)
    env = {**os.environ, "GALAXY_IMPORTER_CONFIG": str(config), "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "HOME": str(tmp_path / "home"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
           # The importer installs the collection to lint it: into this test's folder, not the user's.
           "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
           "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "ansible-home" / "collections")}
    return subprocess.run([str(BIN / "python"), "-m", "galaxy_importer.main", str(tarball)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_galaxy_importer_passes_on_the_built_tarball(tmp_path):
    result = _import(tmp_path, build_collection(tmp_path / "build"))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Importer processing completed successfully" in output, output[-6000:]
    assert "ERROR" not in output, [line for line in output.splitlines() if "ERROR" in line]


def test_galaxy_importer_refuses_what_galaxy_refuses(tmp_path):
    """The check can fail: a module_utils name with '__' (as specbench_client/__main__.py was) is refused."""
    copy = copy_checkout(tmp_path / "src", skip=("tests/", "benchmarks/"))
    bad = copy / "plugins" / "module_utils" / "specbench_client" / "__main__.py"
    bad.write_text("from .cli import main\n")
    tarball = build_collection(tmp_path / "build", source=copy)
    # The name check comes before ansible-doc and ansible-lint, which this run need not pay for.
    result = _import(tmp_path, tarball, CONFIG.replace("= True", "= False"))
    assert result.returncode != 0
    assert "module_utils name invalid format: __main__" in result.stdout + result.stderr

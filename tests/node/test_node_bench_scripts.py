"""Role bench_scripts through real playbook runs: ship, verify by sha256, restore what was damaged."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from nodekit import localhost_inventory, run_playbook, snapshot_sources

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "specbench_client"

pytestmark = pytest.mark.slow


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(run) -> str:
    msgs = [res.get("msg", "") for _host, task, res in run.results("runner_on_ok") if "Report the files" in task]
    assert len(msgs) == 1, run.stdout[-3000:]
    return msgs[0]


def test_scripts_shipped_verified_and_restored(tmp_path):
    node = tmp_path / "node"
    playbook = tmp_path / "scripts.yml"
    playbook.write_text(
        "- name: Test | Ship the scripts\n  hosts: localhost\n  gather_facts: false\n"
        "  roles:\n    - role: specbench.core.bench_scripts\n"
    )
    src = snapshot_sources(tmp_path / "src")
    client = src / "plugins" / "module_utils" / "specbench_client"  # the package, built into one file to ship
    shutil.rmtree(client, ignore_errors=True)
    shutil.copytree(PACKAGE, client, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    inventory = localhost_inventory(specbench_node_dir=str(node), bench_scripts_source_root=str(src))
    sources = sorted(p for p in (src / "files" / "sglang_emulator").rglob("*") if p.is_file())

    first = run_playbook(tmp_path, playbook, inventory)
    assert first.rc == 0, first.stdout[-3000:]
    assert first.changed(), "the first run ships the files"
    for source in sources:
        dest = node / "sglang_emulator" / source.relative_to(src / "files" / "sglang_emulator")
        assert _sha(dest) == _sha(source), dest
    shipped = node / "bin" / "specbench_client.pyz"
    assert shipped.stat().st_mode & 0o111
    with zipfile.ZipFile(shipped) as archive:  # the package's files, unchanged, plus the entry point
        members = {name: archive.read(name) for name in archive.namelist() if name != "__main__.py"}
    assert members == {f"specbench_client/{p.relative_to(client).as_posix()}": p.read_bytes()
                       for p in client.rglob("*") if p.is_file()}
    helped = subprocess.run([sys.executable, "-I", str(shipped), "--help"], capture_output=True, text=True,
                            check=False, timeout=60)
    assert helped.returncode == 0 and "--concurrency" in helped.stdout, helped.stderr

    second = run_playbook(tmp_path, playbook, inventory)
    assert second.rc == 0 and second.changed() == [], second.changed()
    assert "all intact" in _report(second)

    corrupted = node / "sglang_emulator" / "cli.py"
    corrupted.write_text(corrupted.read_text() + "\n# tampered\n")
    deleted = node / "sglang_emulator" / "model.py"
    deleted.unlink()

    dry = run_playbook(tmp_path, playbook, inventory, check=True)
    assert dry.rc == 0, dry.stdout[-3000:]
    assert "bench_scripts | Install the missing and differing files" in dry.changed()
    assert not deleted.exists() and "# tampered" in corrupted.read_text(), "check mode must not write"

    third = run_playbook(tmp_path, playbook, inventory)
    assert third.rc == 0, third.stdout[-3000:]
    report = _report(third)
    assert "restored missing sglang_emulator/model.py" in report
    assert "replaced differing sglang_emulator/cli.py" in report
    assert _sha(corrupted) == _sha(src / "files" / "sglang_emulator" / "cli.py")
    assert _sha(deleted) == _sha(src / "files" / "sglang_emulator" / "model.py")
    assert third.changed() == ["bench_scripts | Install the missing and differing files"]

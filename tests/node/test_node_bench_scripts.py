"""Role bench_scripts through real playbook runs: ship, verify by sha256, restore what was damaged."""
from __future__ import annotations

import hashlib

import pytest
from nodekit import localhost_inventory, run_playbook, snapshot_sources

pytestmark = pytest.mark.slow


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(run) -> str:
    msgs = [res.get("msg", "") for _, task, res in run.results("runner_on_ok") if "Report the files" in task]
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
    inventory = localhost_inventory(specbench_node_dir=str(node), bench_scripts_source_root=str(src))
    sources = sorted(p for p in (src / "files" / "sglang_emulator").rglob("*") if p.is_file())
    client = src / "plugins" / "module_utils" / "specbench_client.py"

    first = run_playbook(tmp_path, playbook, inventory)
    assert first.rc == 0, first.stdout[-3000:]
    assert first.changed(), "the first run ships the files"
    for source in sources:
        dest = node / "sglang_emulator" / source.relative_to(src / "files" / "sglang_emulator")
        assert _sha(dest) == _sha(source), dest
    if client.exists():
        shipped = node / "bin" / "specbench_client.py"
        assert _sha(shipped) == _sha(client) and shipped.stat().st_mode & 0o111

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

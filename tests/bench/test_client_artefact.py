"""The one file the node runs (specbench_client.pyz) is the client package, byte for byte,
built the same every time, and runs on a bare Python with nothing installed."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from benchlib import PACKAGE, bench_scripts, build_client


def _package_sources() -> dict[str, bytes]:
    return {f"specbench_client/{p.relative_to(PACKAGE).as_posix()}": p.read_bytes()
            for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_artefact_is_the_package(tmp_path):
    """Every file of the package is in the zipapp unchanged, and nothing else but its entry point."""
    with zipfile.ZipFile(build_client(tmp_path)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    entry = members.pop("__main__.py").decode()
    assert "from specbench_client.cli import main" in entry
    assert members == _package_sources()


def test_artefact_is_deterministic(tmp_path):
    """Same sources, same bytes (sorted members, fixed timestamps, stored): a stable sha256, so
    bench_scripts ships it once and a second run changes nothing; the copy's mtimes do not matter."""
    first = bench_scripts.zipapp_bytes(str(PACKAGE))
    copy = tmp_path / "specbench_client"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"junk")
    for path in copy.rglob("*.py"):
        os.utime(path, (1_000_000, 1_000_000))
    again = bench_scripts.zipapp_bytes(str(copy))
    assert hashlib.sha256(again).hexdigest() == hashlib.sha256(first).hexdigest()
    (copy / "settings.py").write_text((copy / "settings.py").read_text() + "\n# changed\n")
    assert bench_scripts.zipapp_bytes(str(copy)) != first, "a changed source must change the artefact"


def test_artefact_runs_on_a_bare_python(tmp_path):
    """`python3 -I specbench_client.pyz --help` with no environment, no path, from an empty folder."""
    pyz = build_client(tmp_path)
    bare = tmp_path / "empty"
    bare.mkdir()
    out = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--help"], cwd=bare, env={},
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: specbench_client.pyz" in out.stdout and "--concurrency" in out.stdout
    direct = subprocess.run([str(pyz), "--help"], cwd=bare, env={"PATH": os.path.dirname(sys.executable)},
                            capture_output=True, text=True, check=False, timeout=60)
    assert direct.returncode == 0 and "--concurrency" in direct.stdout, direct.stderr


def test_manifest_builds_the_zipapp_entry(tmp_path):
    """A `build: zipapp` entry ships the package folder as one file whose sha256 is the build's."""
    root = tmp_path / "root"
    shutil.copytree(PACKAGE, root / "pkg" / "specbench_client", ignore=shutil.ignore_patterns("__pycache__"))
    files = [{"src": "pkg/specbench_client", "dest": "bin/specbench_client.pyz", "mode": "0755", "build": "zipapp"}]
    entries, skipped = bench_scripts.manifest(str(root), files)
    assert skipped == [] and len(entries) == 1
    built = bench_scripts.zipapp_bytes(str(root / "pkg" / "specbench_client"))
    assert entries[0]["sha256"] == hashlib.sha256(built).hexdigest() and entries[0]["dest"] == "bin/specbench_client.pyz"
    bundle = bench_scripts.bundle(entries, str(tmp_path))
    node = tmp_path / "node"
    assert bench_scripts.install(str(node), bundle, entries) == ["bin/specbench_client.pyz"]
    assert (node / "bin" / "specbench_client.pyz").read_bytes() == built
    assert bench_scripts.verify(str(node), entries)["ok"] == ["bin/specbench_client.pyz"]


def test_manifest_refuses_unknown_build_and_non_package(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(bench_scripts.ScriptsError, match="build is 'wheel': give one of zipapp"):
        bench_scripts.manifest(str(tmp_path), [{"src": "plain", "dest": "x", "build": "wheel"}])
    with pytest.raises(bench_scripts.ScriptsError, match="not a Python package"):
        bench_scripts.manifest(str(tmp_path), [{"src": "plain", "dest": "x.pyz", "build": "zipapp"}])

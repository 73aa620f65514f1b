"""The suite's bytecode cache for zipped sources (tests/zipimport_cache.py, installed into the
test venv by tests/conftest.py): the same code as compiling, the archive's own paths in a
traceback, a damaged entry compiled again, and Ansible's modules really using it."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ansible.module_utils.basic
from specbench_testkit import local_host, run_playbook

SOURCE = b'''
def outer():
    def inner():
        raise RuntimeError("from inside the zip")
    return inner()

ANSWER = sum(range(10))
'''


def entry_for(source: bytes) -> str:
    return hashlib.sha256(importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize]) + source).hexdigest()


def run_from_zip(tmp: Path, name: str, cache: Path) -> subprocess.CompletedProcess:
    archive = tmp / name / "payload.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped_mod.py", SOURCE)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import zipped_mod; print(zipped_mod.ANSWER); "
            "zipped_mod.outer()")
    return subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SPECBENCH_ZIPIMPORT_CACHE=str(cache)), check=False)


def test_a_cached_compile_runs_the_same_code_and_names_this_archive(tmp_path):
    cache = tmp_path / "cache"
    key = entry_for(SOURCE)
    first = run_from_zip(tmp_path, "first", cache)
    assert (cache / key[:2] / key).is_file(), "the compile was not kept"
    second = run_from_zip(tmp_path, "second", cache)
    for run, name in ((first, "first"), (second, "second")):
        assert run.stdout == "45\n"
        assert "RuntimeError: from inside the zip" in run.stderr
        # Every frame, the nested function's too, names the archive this run imported.
        assert str(tmp_path / name / "payload.zip" / "zipped_mod.py") in run.stderr, run.stderr
        assert str(tmp_path / ("second" if name == "first" else "first")) not in run.stderr, run.stderr
    assert second.stderr.count("zipped_mod.py") == first.stderr.count("zipped_mod.py") == 2
    # A damaged entry is compiled again (and replaced).
    (cache / key[:2] / key).write_bytes(b"\xe3not marshal")
    third = run_from_zip(tmp_path, "third", cache)
    assert third.stdout == "45\n" and "from inside the zip" in third.stderr
    assert (cache / key[:2] / key).read_bytes() != b"\xe3not marshal"


def test_without_the_variable_zipimport_is_untouched():
    env = {k: v for k, v in os.environ.items() if k != "SPECBENCH_ZIPIMPORT_CACHE"}
    probe = "import zipimport, specbench_zipimport_cache as c; print(c.FOLDER, zipimport._compile_source.__module__)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout == "None zipimport\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True,
                         env=dict(env, SPECBENCH_ZIPIMPORT_CACHE="/nonexistent/folder"))
    assert out.stdout == "/nonexistent/folder specbench_zipimport_cache\n"


def test_ansible_modules_compile_their_module_utils_through_it(tmp_path):
    cache = tmp_path / "cache"
    playbook = tmp_path / "stat.yml"
    playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.stat: {path: /}\n")
    run = run_playbook(tmp_path, playbook, {"all": {"hosts": {"localhost": local_host()}}},
                       envvars={"SPECBENCH_ZIPIMPORT_CACHE": str(cache)}, timeout=120)
    assert run.rc == 0, run.stdout[-2000:]
    # The zip carries the controller's ansible-core module_utils: basic.py's exact bytes were kept.
    key = entry_for(Path(ansible.module_utils.basic.__file__).read_bytes())
    assert (cache / key[:2] / key).is_file(), sorted(p.name for p in cache.glob("*/*"))[:5]

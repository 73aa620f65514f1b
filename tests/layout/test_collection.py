"""The checkout is both an Ansible project and a collection: check both faces."""
from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from specbench_testkit import build_collection

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if not p.stem.startswith("_"))
PLAYBOOKS = ["bench.yml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yml"))]


def run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, check=False, capture_output=True, text=True, timeout=300)


def test_galaxy_build_packages_the_collection(tmp_path):
    """The tarball holds what a user of the collection needs (Galaxy, Automation Hub and
    galaxy-importer read the release notes and the licence from it) and none of the checkout's
    development tooling, results or build contexts (galaxy.yml's build_ignore)."""
    with tarfile.open(build_collection(tmp_path)) as tar:
        names = set(tar.getnames())
    needed = {"MANIFEST.json", "meta/runtime.yml", "meta/execution-environment.yml", "LICENSE", "README.md",
              "CHANGELOG.md", "changelogs/changelog.yaml", "changelogs/config.yaml", "playbooks/bench.yml",
              "files/sglang_emulator/__main__.py", "docs/reference/variables.md"}
    assert not needed - names, f"{sorted(needed - names)} left out of the built collection"
    # Of tests/, the sanity ignores only, as certified collections ship them (ansible-test sanity on the
    # installed collection reads them: tests/sanity/run.sh).
    ignores = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    assert ignores and set(ignores) <= names, f"{ignores} left out of the built collection"
    leaked = sorted(n for n in names if n.split("/")[0] in {"benchmarks", "results", "collections", "context",
                                                            ".ci", "bench.yml", "ansible.cfg"}
                    or (n.startswith("tests/") and n not in {"tests", "tests/sanity", *ignores})
                    or n.startswith(".venv") or "/molecule/" in n or n.endswith((".pyc", ".tar.gz"))
                    or n == "docs/reference/generate_variables.py")
    assert not leaked, f"the tarball carries what users do not need: {leaked[:10]}"


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_shows_every_module(module):
    result = run(str(BIN / "ansible-doc"), "--json", f"specbench.core.{module}")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)[f"specbench.core.{module}"]
    assert doc["doc"]["short_description"]
    assert doc["examples"] and doc["return"] is not None


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbooks_pass_syntax_check(playbook):
    result = run(str(BIN / "ansible-playbook"), "--syntax-check", playbook)
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_inventory_is_localhost_on_the_emulator():
    result = run(str(BIN / "ansible-inventory"), "--list")
    assert result.returncode == 0, result.stderr
    inventory = json.loads(result.stdout)
    host = inventory["_meta"]["hostvars"]["localhost"]
    assert host["engine"] == "emulator" and host["ansible_connection"] == "local"


def test_example_proxmox_inventory_uses_documentation_addresses_only():
    result = run(str(BIN / "ansible-inventory"), "-i", "inventory/proxmox.example.yml", "--list")
    assert result.returncode == 0, result.stderr
    hostvars = json.loads(result.stdout)["_meta"]["hostvars"]
    for name, hv in hostvars.items():
        assert hv["ansible_host"].startswith("192.0.2."), name


def test_the_render_cache_is_keyed_by_every_parameter_the_render_takes():
    """Role sglang_server keeps a rendered command under the hash of sglang_server_command_params
    (vars/main.yml) and reuses it for the same hash: the render task must take exactly those
    parameters, or a change in one left out of the key would reuse a stale command."""
    import yaml

    role = ROOT / "roles" / "sglang_server"
    params = yaml.safe_load((role / "vars" / "main.yml").read_text())["sglang_server_command_params"]
    tasks = yaml.safe_load((role / "tasks" / "preflight.yml").read_text())
    (render,) = [t for t in tasks if "specbench.core.sglang_command" in t]
    assert render["specbench.core.sglang_command"] == params
    assert "sglang_server_command_key not in" in " ".join(render["when"])

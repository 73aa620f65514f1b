"""Every playbook starts from role run_context: the hosts (the embedded default with no inventory),
one results folder outside any installed collection, the node folder. Run through ansible-playbook
in the checkout with an empty inventory; tests/layout/test_consumer.py does the same from the
installed tarball as another user."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The playbooks that act on hosts: each opens with a play on localhost that settles them.
HOST_PLAYBOOKS = ["bench", "compare", "serve", "teardown", "node"]


def _playbook(name: str) -> list[dict]:
    return yaml.safe_load((ROOT / "playbooks" / f"{name}.yml").read_text())


def test_the_embedded_default_is_the_checkouts_default_inventory():
    """inventory/local.yml (a checkout's ansible.cfg) and the role's embedded default (an installed
    collection with no inventory) give localhost the same variables."""
    inventory = yaml.safe_load((ROOT / "inventory" / "local.yml").read_text())
    defaults = yaml.safe_load((ROOT / "roles" / "run_context" / "defaults" / "main.yml").read_text())
    assert inventory["all"]["hosts"]["localhost"] == defaults["run_context_embedded_default"]


@pytest.mark.parametrize("name", HOST_PLAYBOOKS)
def test_every_host_playbook_settles_its_hosts_first(name):
    first = _playbook(name)[0]
    assert first["hosts"] == "localhost", f"playbooks/{name}.yml must open with the run_context play on localhost"
    include = first["tasks"][0]["ansible.builtin.include_role"]
    assert include == {"name": "specbench.core.run_context", "tasks_from": "inventory"}


def test_no_results_folder_is_taken_from_the_playbooks_folder():
    """playbook_dir is inside the installed collection when a playbook runs by FQCN."""
    offenders = []
    for path in [*ROOT.glob("roles/*/defaults/*.yml"), *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/vars/*.yml"),
                 *ROOT.glob("playbooks/*.yml")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "playbook_dir" in line and not line.lstrip().startswith("#"):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    empty = tmp_path / "empty-inventory.yml"
    empty.write_text("all: {}\n")
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(empty), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_bench_in_check_mode_with_an_empty_inventory_uses_the_embedded_default(tmp_path):
    """With an inventory that holds no host, bench.yml --check says so and checks localhost on the
    emulator, with results under ./results of the folder it runs in and the node folder under HOME."""
    run = _run(tmp_path, str(ROOT / "bench.yml"), "--check", "-e", "mode=baseline")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "No inventory given" in output and "embedded default" in output
    assert f"results in {tmp_path / 'results'}/" in output, output[-3000:]


def test_node_playbook_with_no_inventory_asks_for_one(tmp_path):
    """node.yml acts on real Proxmox hosts: there is no embedded default for it, and nothing skips silently."""
    run = _run(tmp_path, str(ROOT / "playbooks" / "node.yml"))
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert "matches 'proxmox_hosts'" in output and "-i INVENTORY" in output and "node_proxmox_hosts" in output, output


def test_a_role_on_its_own_defaults_the_node_folder_to_the_users_home(tmp_path):
    """A user's own playbook that runs a role with no specbench_node_dir: no raw 'undefined' from the
    argument validation; the folder is ~/.local/share/specbench of the user the tasks run as."""
    playbook = tmp_path / "own.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Own | Check a teardown's settings", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Own | Check the teardown settings",
                   "ansible.builtin.include_role": {"name": "specbench.core.gpu_teardown", "tasks_from": "preflight"}},
                  {"name": "Own | Show the node folder", "ansible.builtin.debug": {"msg": "node={{ specbench_node_dir }}"}}],
    }]))
    (tmp_path / "home").mkdir()
    run = _run(tmp_path, str(playbook), "-e", "engine=emulator")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert f"node={tmp_path / 'home'}/.local/share/specbench" in output, output[-3000:]

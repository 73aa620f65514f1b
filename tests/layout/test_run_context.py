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
# The playbooks that launch, tear down or serve: only on GPU nodes.
GPU_PLAYBOOKS = ["bench", "compare", "serve", "teardown"]
GPU_HOSTS = "{{ bench_hosts | default('specbench_nodes' if 'specbench_nodes' in groups else 'all') }}"


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


@pytest.mark.parametrize("name", GPU_PLAYBOOKS)
def test_every_gpu_playbook_targets_the_gpu_nodes_and_refuses_any_other_host_first(name):
    """Every play after the localhost one targets bench_hosts, else group specbench_nodes where the
    inventory has it, else all (role run_context's run_context_hosts, the same expression), and the
    first of them opens with the refusal of a host that is neither in specbench_nodes nor sets engine."""
    plays = _playbook(name)[1:]
    assert {play["hosts"] for play in plays} == {GPU_HOSTS}
    defaults = yaml.safe_load((ROOT / "roles" / "run_context" / "defaults" / "main.yml").read_text())
    assert defaults["run_context_hosts"] == GPU_HOSTS
    include = plays[0]["tasks"][0]["ansible.builtin.include_role"]
    assert include == {"name": "specbench.core.run_context", "tasks_from": "targets"}


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


def _run_inventory(tmp_path: Path, hosts: dict, groups: dict, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook against local ``hosts`` (name -> variables) and ``groups`` (name -> host names)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {name: {**local, **hostvars} for name, hostvars in hosts.items()},
        "children": {group: {"hosts": {name: {} for name in names}} for group, names in groups.items()}}}))
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_host_neither_in_specbench_nodes_nor_with_an_engine_is_refused_before_anything_runs(tmp_path):
    """No group specbench_nodes, so bench.yml targets every host: the one with no engine stops the run at
    the first task on the hosts, naming itself and the fix; the one with an engine passes that check."""
    run = _run_inventory(tmp_path, {"withengine": {"engine": "emulator"}, "stray": {}}, {},
                         str(ROOT / "bench.yml"), "--check", "-e", "mode=baseline")
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert "stray is not a GPU node of this inventory" in output, output[-4000:]
    assert "add it to group specbench_nodes or set its engine" in output, output[-4000:]
    assert "withengine is not" not in output and "ok: [withengine]" in output, output[-4000:]
    assert "Pick the run id" not in output, output[-4000:]


def test_group_specbench_nodes_is_targeted_alone_and_needs_no_engine(tmp_path):
    """With group specbench_nodes in the inventory, the plays target it alone (a host outside it, with no
    engine, is left out), and a host in it passes the check with no engine set."""
    hosts, groups = {"hypervisor": {}, "gpu1": {}}, {"specbench_nodes": ["gpu1"]}
    listed = _run_inventory(tmp_path, hosts, groups, str(ROOT / "playbooks" / "teardown.yml"), "--list-hosts")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "hypervisor" not in listed.stdout and listed.stdout.count("gpu1") == 2, listed.stdout
    # The check itself, on both hosts: gpu1 passes, hypervisor is refused.
    playbook = tmp_path / "check.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Own | Check the hosts", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "Own | Refuse a host not meant to be a GPU node",
                   "ansible.builtin.include_role": {"name": "specbench.core.run_context", "tasks_from": "targets"}}],
    }]))
    checked = _run_inventory(tmp_path, hosts, groups, str(playbook))
    output = checked.stdout + checked.stderr
    assert checked.returncode != 0 and "ok: [gpu1]" in output, output[-4000:]
    assert "hypervisor is not a GPU node" in output and "gpu1 is not" not in output, output[-4000:]


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

"""Every command documented for inventory/proxmox.example.yml (its header and the docs that copy it to
inventory/my-node.yml) runs as written against the example, its addresses replaced by loopback ones:
ansible-playbook --list-hosts through ansible-runner (as AWX runs it), which parses the playbook and
resolves every play's hosts without contacting any. The Proxmox host pve1 is the host that `pct exec`s
into the container: node.yml acts on it, and no playbook that launches, tears down or serves does.
Pointed at it anyway, they refuse it before anything runs."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from specbench_testkit import ROOT, run_playbook

EXAMPLE = ROOT / "inventory" / "proxmox.example.yml"
COPY = "inventory/my-node.yml"
PROXMOX_HOST = "pve1"
CONTAINER = "pve1-ct129"
# The playbooks that launch, tear down or serve, and the one that prepares the node.
GPU_PLAYBOOKS = {"bench.yml", "playbooks/bench.yml", "playbooks/compare.yml", "playbooks/serve.yml",
                 "playbooks/teardown.yml"}
COMMAND = re.compile(r"(?:\.venv/bin/)?ansible-playbook\s+-i\s+" + re.escape(COPY) + r"\s+([^#`(\\]*)")
# Where the example's copy is run: its own header, the tutorial that copies it, the playbooks' headers.
DOCUMENTED_IN = [EXAMPLE, ROOT / "docs" / "tutorials" / "proxmox-lxc.md", *sorted((ROOT / "playbooks").glob("*.yml"))]


def documented_commands() -> list[tuple[str, str]]:
    """(where, the arguments after -i inventory/my-node.yml) of every command that runs the example's
    copy (DOCUMENTED_IN)."""
    found: dict[str, str] = {}
    for path in DOCUMENTED_IN:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in COMMAND.finditer(line):
                args = match.group(1).strip()
                found.setdefault(args, f"{path.relative_to(ROOT)}:{number}")
    return [(where, args) for args, where in found.items()]


def loopback_inventory(tmp_path: Path) -> Path:
    """The example with every address replaced by 127.0.0.1 (nothing here contacts it)."""
    text = EXAMPLE.read_text()
    assert re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", text), "the example names no address"
    local = re.sub(r"\b192\.0\.2\.\d+\b", "127.0.0.1", text)
    leftover = [a for a in re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", local) if not a.startswith("127.")]
    assert not leftover, f"addresses other than documentation ones in the example: {leftover}"
    path = tmp_path / "my-node.yml"
    path.write_text(local)
    return path


def play_hosts(stdout: str) -> list[tuple[str, list[str]]]:
    """(play name, its hosts) from ansible-playbook --list-hosts."""
    plays: list[tuple[str, list[str]]] = []
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        head = re.match(r"\s*play #\d+ \([^)]*\): (.*?)\s+TAGS:", line)
        if not head:
            continue
        hosts = []
        for follow in lines[i + 1:]:
            if re.match(r"\s*play #\d+", follow) or not follow.strip():
                break
            if re.match(r"\s+(pattern:|hosts \(\d+\):)", follow):
                continue
            hosts.append(follow.strip())
        plays.append((head.group(1), hosts))
    return plays


COMMANDS = documented_commands()


def test_the_commands_are_found():
    """The example's header names node.yml, bench.yml (with and without --check), compare.yml and teardown.yml."""
    playbooks = {shlex.split(args)[0] for _where, args in COMMANDS}
    assert {"playbooks/node.yml", "bench.yml", "playbooks/compare.yml", "playbooks/teardown.yml"} <= playbooks, COMMANDS
    assert any("--check" in args for _where, args in COMMANDS), COMMANDS


@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[args for _where, args in COMMANDS])
def test_each_documented_command_targets_the_container_and_never_the_proxmox_host_on_gpu_work(tmp_path, where, args):
    inventory = loopback_inventory(tmp_path)
    playbook, *rest = shlex.split(args)
    run = run_playbook(tmp_path, playbook, inventory, cmdline=" ".join([*map(shlex.quote, rest), "--list-hosts"]))
    assert run.rc == 0, f"{where}: ansible-playbook -i {COPY} {args}\n{run.stdout[-4000:]}"
    plays = play_hosts(run.stdout)
    assert plays, f"{where}: no play listed\n{run.stdout[-3000:]}"
    on_nodes = [(name, hosts) for name, hosts in plays if hosts != ["localhost"]]
    if playbook in GPU_PLAYBOOKS:
        for name, hosts in on_nodes:
            assert hosts == [CONTAINER], f"{where}: play {name!r} targets {hosts}"
    else:
        assert playbook == "playbooks/node.yml", f"{where}: {playbook} is neither a GPU playbook nor node.yml"
        assert [hosts for _name, hosts in on_nodes] == [[PROXMOX_HOST], [CONTAINER]], plays


def test_the_proxmox_host_named_on_purpose_is_refused_before_anything_runs(tmp_path):
    """-e bench_hosts=all reaches pve1 (no engine, not in specbench_nodes): the run stops at its first
    task on the hosts, naming pve1 and the fix; the container passes that check, and nothing else runs."""
    inventory = loopback_inventory(tmp_path)
    run = run_playbook(tmp_path, "playbooks/teardown.yml", inventory, {"bench_hosts": "all"}, check=True)
    assert run.rc != 0, run.stdout[-3000:]
    failed = run.failed_hosts()
    assert list(failed) == [PROXMOX_HOST], failed
    message = failed[PROXMOX_HOST]
    assert "pve1 is not a GPU node" in message and "specbench_nodes" in message and "set its engine" in message, message
    # Only the host checks ran: the localhost play's and the refusal (role run_context's inventory and targets).
    checks = {task["name"]
              for part in ("inventory", "targets")
              for task in yaml.safe_load((ROOT / "roles" / "run_context" / "tasks" / f"{part}.yml").read_text())}
    started = {task for _host, task, _res in run.events_of("runner_on_start")}
    others = {task for task in started - checks if not task.startswith("Validating arguments against arg spec")}
    assert others == {"Teardown | Use the embedded default with no inventory, and check the hosts named",
                      "Teardown | Refuse a host not meant to be a GPU node (not in group specbench_nodes, no engine set)"}, others


def test_the_readmes_one_node_inventory_targets_its_node(tmp_path):
    """README's minimal inventory: one host in group specbench_nodes with engine sglang, a documentation
    address; its documented bench.yml command targets that host (and nothing else)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Your first real node"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    assert len(block.strip().splitlines()) <= 6, block
    parsed = yaml.safe_load(block)
    (host, hostvars), = parsed["specbench_nodes"]["hosts"].items()
    assert parsed["specbench_nodes"]["vars"]["engine"] == "sglang"
    assert hostvars["ansible_host"].startswith("192.0.2."), hostvars
    inventory = tmp_path / "my-node.yml"
    inventory.write_text(block.replace(hostvars["ansible_host"], "127.0.0.1"))
    commands = re.findall(r"\.venv/bin/ansible-playbook -i my-node\.yml ([^#\n]*)", section)
    assert commands, section[:2000]
    for args in commands:
        playbook, *rest = shlex.split(args)
        run = run_playbook(tmp_path, playbook, inventory, cmdline=" ".join([*map(shlex.quote, rest), "--list-hosts"]))
        assert run.rc == 0, run.stdout[-3000:]
        on_nodes = [hosts for _name, hosts in play_hosts(run.stdout) if hosts != ["localhost"]]
        assert on_nodes and all(hosts == [host] for hosts in on_nodes), (args, on_nodes)

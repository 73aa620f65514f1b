"""playbooks/node.yml and role proxmox_lxc against a fake Proxmox host (fake pct, config folder,
/proc/devices, /dev), the container reached through community.proxmox.proxmox_pct_remote over a
real SSH connection to a test-owned sshd on 127.0.0.1."""
from __future__ import annotations

import hashlib
import sys

import pytest
from nodekit import ROOT, case_outcomes, cases_playbook, run_playbook, snapshot_sources

pytestmark = pytest.mark.slow

MOUNTS = ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidiactl"]


def _main_section(conf: str) -> list[str]:
    lines = conf.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("["))
    return lines[:end]


def test_node_yml_twice_over_real_ssh_changes_nothing_the_second_time(tmp_path, sshd, fake_proxmox):
    fake = fake_proxmox(vmid=129, running=True)
    pve = sshd["pve"]
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(sshd["known_hosts"].read_text())
    ct_node = tmp_path / "ct-node"
    inventory = {"all": {"children": {
        "proxmox_hosts": {"hosts": {"pve-test": {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            **fake,
            "proxmox_lxc_remote_host": "127.0.0.1",
            "proxmox_lxc_remote_port": sshd["port"],
            "proxmox_lxc_remote_user": "root",
            "proxmox_lxc_remote_private_key_file": str(sshd["key"]),
            "proxmox_lxc_container_python": sys.executable,
        }}},
        "gpu_containers": {"vars": {"specbench_node_dir": str(ct_node),
                                    "bench_scripts_source_root": str(snapshot_sources(tmp_path / "src"))}},
    }}}
    env = {"HOME": str(home)}
    conf = pve / "lxc" / "129.conf"
    original = conf.read_text()

    first = run_playbook(tmp_path, ROOT / "playbooks" / "node.yml", inventory, envvars=env)
    assert first.rc == 0, first.stdout[-5000:]
    text = conf.read_text()
    main = _main_section(text)
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" in main
    assert "lxc.cgroup2.devices.allow: c 508:* rwm" in main
    for node in MOUNTS:
        assert f"lxc.mount.entry: {pve}/dev/{node} dev/{node} none bind,optional,create=file" in main
    assert "nvidia-caps" not in text and "nvidia-cap1" not in text
    assert text.endswith(original[original.index("[before-gpu]"):]), "the snapshot section is kept as it was"
    assert original.splitlines()[0] == text.splitlines()[0] == "#GPU node for specbench"
    # Config changed while running: stopped once, started once.
    assert (pve / "calls.log").read_text().splitlines() == [
        "shutdown 129 --forceStop 1 --timeout 60", "start 129"]
    # The second play ran in the container through pct_remote over SSH and shipped the scripts.
    assert "Accepted publickey for root" in sshd["log"].read_text()
    assert (pve / "ct" / "129" / "rootfs").is_dir()
    shipped = ct_node / "sglang_emulator" / "cli.py"
    source = tmp_path / "src" / "files" / "sglang_emulator" / "cli.py"
    assert hashlib.sha256(shipped.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    hosts = {h for h, _unused, _unused in first.results("runner_on_ok")}
    assert "pve-test-ct129" in hosts

    second = run_playbook(tmp_path, ROOT / "playbooks" / "node.yml", inventory, envvars=env)
    assert second.rc == 0, second.stdout[-5000:]
    assert second.changed() == []
    assert conf.read_text() == text
    assert len((pve / "calls.log").read_text().splitlines()) == 2, "no restart without a config change"
    assert {h for h, _unused, _unused in second.results("runner_on_ok")} >= {"pve-test", "pve-test-ct129"}


def test_proxmox_lxc_refuses_what_it_cannot_fix(tmp_path, fake_proxmox):
    fake = fake_proxmox(vmid=129, running=True)
    fake_proxmox(vmid=130, running=True, container_driver="580.95.05")
    no_uvm = tmp_path / "proc-devices-no-uvm"
    no_uvm.write_text("Character devices:\n195 nvidia-frontend\n\nBlock devices:\n  8 sd\n")
    node = tmp_path / "node"
    (node / "cases").mkdir(parents=True)
    cases = {
        "driver_mismatch": {"vars": {"proxmox_lxc_vmid": 130}},
        "no_nvidia_smi": {"vars": {"proxmox_lxc_container_nvidia_smi": "nvidia-smi-absent"}},
        "no_uvm": {"vars": {"proxmox_lxc_proc_devices": str(no_uvm)}},
        "unknown_container": {"vars": {"proxmox_lxc_vmid": 131}},
        "bad_vmid": {"vars": {"proxmox_lxc_vmid": 42}},
    }
    inventory = {"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "specbench_node_dir": str(node), **fake}}}}
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "cases.yml", cases, role="specbench.core.proxmox_lxc"),
                       inventory)
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node)

    def refused(name, *needles):
        assert out[name]["failed"], f"{name} was not refused"
        for needle in needles:
            assert needle in out[name]["msg"], f"{name}: {needle!r} not in {out[name]['msg']!r}"

    refused("driver_mismatch", "Driver/library version mismatch", "590.48.01", "--no-kernel-module")
    refused("no_nvidia_smi", "has no nvidia-smi", "590.48.01")
    refused("no_uvm", "nvidia-uvm is not in", "nvidia-modprobe")
    refused("unknown_container", "131.conf does not exist", "pct list")
    refused("bad_vmid", "proxmox_lxc_vmid=42")

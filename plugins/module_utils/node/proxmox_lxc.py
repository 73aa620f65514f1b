# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Proxmox VE container config (/etc/pve/lxc/<vmid>.conf) and NVIDIA device facts; stdlib only.

A container config has a main section followed by snapshot sections (``[name]`` headers); a
line appended at the end of the file would land in the last snapshot, so lines are placed at
the end of the main section. Comment lines are the container's description: left alone.
"""
from __future__ import annotations

import os
import re

SECTION = re.compile(r"^\s*\[[^\]]+\]\s*$")
UVM = re.compile(r"^\s*(\d+)\s+nvidia-uvm\s*$", re.MULTILINE)
KERNEL_MODULE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def _norm(line: str) -> str:
    """A config line compared loosely: one space after the key's colon, no trailing blanks."""
    key, sep, value = line.strip().partition(":")
    return f"{key.strip()}: {' '.join(value.split())}" if sep else " ".join(line.split())


def ensure_lines(text: str, lines: list[str]) -> tuple[str, list[str]]:
    """(new text, lines added): every line of ``lines`` present in the main section."""
    all_lines = text.splitlines()
    end = next((i for i, line in enumerate(all_lines) if SECTION.match(line)), len(all_lines))
    main, rest = all_lines[:end], all_lines[end:]
    present = {_norm(line) for line in main}
    added = []
    for line in lines:
        if _norm(line) not in present:
            added.append(line)
            present.add(_norm(line))
    if not added:
        return text, []
    while main and not main[-1].strip():
        main.pop()
    blank = [""] if rest else []
    new = "\n".join([*main, *added, *blank, *rest]) + "\n"
    return new, added


def uvm_major(proc_devices: str) -> int | None:
    """The nvidia-uvm character major from /proc/devices text (dynamic, often 508-511)."""
    found = UVM.search(proc_devices)
    return int(found.group(1)) if found else None


def kernel_module_version(text: str) -> str | None:
    """The NVIDIA kernel module version from /proc/driver/nvidia/version text."""
    found = KERNEL_MODULE.search(text)
    return found.group(1) if found else None


class HostError(Exception):
    """The Proxmox host cannot pass its GPUs through; the text says why and what to do."""


def mount_entry(dev_dir: str, node: str) -> str:
    return f"lxc.mount.entry: {dev_dir.rstrip('/')}/{node} dev/{node} none bind,optional,create=file"


def host_info(pct: str, config_dir: str, vmid: int, proc_devices: str, dev_dir: str, device_nodes: list[str],
              nvidia_major: int, driver_version_file: str | None) -> dict:
    """What the role needs from the host: config path, majors, device nodes, lines, driver version."""
    if not (os.path.isfile(pct) and os.access(pct, os.X_OK)):
        raise HostError(f"{pct} is not an executable here: run this role on the Proxmox VE node that hosts "
                        f"container {vmid}, or set proxmox_lxc_pct.")
    config = os.path.join(config_dir, f"{vmid}.conf")
    if not os.path.isfile(config):
        raise HostError(f"{config} does not exist: container {vmid} is not defined on this node (see `pct list`); "
                        "check proxmox_lxc_vmid, or proxmox_lxc_config_dir.")
    try:
        with open(proc_devices, encoding="utf-8") as fh:
            major = uvm_major(fh.read())
    except OSError as exc:
        raise HostError(f"cannot read {proc_devices} ({exc.strerror}): set proxmox_lxc_proc_devices.") from None
    if major is None:
        raise HostError(f"nvidia-uvm is not in {proc_devices}: the host's NVIDIA driver has not loaded it. Load it on "
                        "the host (`nvidia-modprobe -u -c=0`, or `modprobe nvidia-uvm`, and make it load at boot), "
                        "then run again.")
    if device_nodes:
        nodes = list(device_nodes)
    else:
        try:
            names = sorted(os.listdir(dev_dir))
        except OSError as exc:
            raise HostError(f"cannot list {dev_dir} ({exc.strerror}): set proxmox_lxc_dev_dir.") from None
        nodes = [n for n in names if n.startswith("nvidia") and not os.path.isdir(os.path.join(dev_dir, n))]
    if not nodes:
        raise HostError(f"no nvidia* device node in {dev_dir}: is the NVIDIA driver installed and loaded on the host "
                        "(nvidia-smi there)? Or name them in proxmox_lxc_device_nodes.")
    version = None
    if driver_version_file:
        try:
            with open(driver_version_file, encoding="utf-8") as fh:
                version = kernel_module_version(fh.read())
        except OSError:
            raise HostError(f"{driver_version_file} does not exist: the NVIDIA kernel module is not loaded on this "
                            "host (modprobe nvidia; nvidia-smi should work on the host first).") from None
        if version is None:
            raise HostError(f"cannot read the kernel module version from {driver_version_file}.")
    lines = [f"lxc.cgroup2.devices.allow: c {nvidia_major}:* rwm", f"lxc.cgroup2.devices.allow: c {major}:* rwm"]
    lines += [mount_entry(dev_dir, node) for node in nodes]
    return {"config_path": config, "uvm_major": major, "nodes": nodes, "lines": lines, "host_driver": version}

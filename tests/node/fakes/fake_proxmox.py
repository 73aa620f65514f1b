"""Build a fake Proxmox VE host in a folder: the stand-in the proxmox_lxc tests run against.

    python3 tests/node/fakes/fake_proxmox.py DIR [--vmid 129] [--running]

Layout (every path the role reads is a variable, so it points here instead of /etc, /proc, /dev):

    DIR/pct                      the fake pct (a copy of tests/node/fakes/pct)
    DIR/lxc/<vmid>.conf          the container config, with a snapshot section after the main one
    DIR/proc-devices             /proc/devices with nvidia-frontend 195 and nvidia-uvm <major>
    DIR/dev/                     nvidia0..N-1, nvidiactl, nvidia-uvm, nvidia-uvm-tools,
                                 nvidia-modeset (plain files) and the folder nvidia-caps/
    DIR/driver-version           /proc/driver/nvidia/version of the host's kernel module
    DIR/ct/<vmid>/status         running | stopped
    DIR/ct/<vmid>/rootfs/bin/nvidia-smi
                                 the container's user-space driver: answers
                                 --query-gpu=driver_version like nvidia-smi, and fails with
                                 "Driver/library version mismatch" (exit 18) when its library
                                 version differs from the host's kernel module, as NVML does
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFIG = """\
#GPU node for specbench
arch: amd64
cores: 64
features: nesting=1
hostname: gpu-ct{vmid}
memory: 524288
net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth
ostype: ubuntu
rootfs: local-lvm:vm-{vmid}-disk-0,size=200G
swap: 0
unprivileged: 0

[before-gpu]
arch: amd64
cores: 64
hostname: gpu-ct{vmid}
memory: 524288
ostype: ubuntu
rootfs: local-lvm:vm-{vmid}-disk-0,size=200G
snaptime: 1767225600
"""

PROC_DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
 13 input
195 nvidia-frontend
226 drm
235 nvidia-caps
{uvm} nvidia-uvm
509 nvidia-nvswitch

Block devices:
  7 loop
  8 sd
259 blkext
"""

VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
    "(dvs-builder@U22-I3-AF03-09-1)  Tue Nov 25 10:00:00 UTC 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)\n"
)

NVIDIA_SMI = """\
#!/bin/sh
# Fake nvidia-smi in a fake container: user-space library {library}, kernel module read from
# the host's version file, {gpus} GPUs.
kernel=$(sed -n 's/.*Kernel Module.* \\([0-9][0-9]*\\.[0-9][0-9.]*\\) .*/\\1/p' '{version_file}' | head -n 1)
if [ "$kernel" != "{library}" ]; then
    echo "Failed to initialize NVML: Driver/library version mismatch"
    echo "NVML library version: {library}"
    exit 18
fi
case "$*" in
    *--query-gpu=driver_version*) i=0; while [ $i -lt {gpus} ]; do echo "$kernel"; i=$((i+1)); done ;;
    *) echo "NVIDIA-SMI {library}    Driver Version: $kernel    CUDA Version: 13.1" ;;
esac
"""


def build(folder: Path, vmid: int = 129, uvm_major: int = 508, gpus: int = 2, host_driver: str = "590.48.01",
          container_driver: str | None = None, running: bool = False) -> dict:
    """Create (or refresh) the fake host; returns the role variables pointing at it."""
    folder = Path(folder)
    (folder / "lxc").mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "pct", folder / "pct")
    (folder / "pct").chmod(0o755)
    conf = folder / "lxc" / f"{vmid}.conf"
    if not conf.exists():
        conf.write_text(CONFIG.format(vmid=vmid))
    (folder / "proc-devices").write_text(PROC_DEVICES.format(uvm=uvm_major))
    dev = folder / "dev"
    (dev / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    for name in [*(f"nvidia{i}" for i in range(gpus)), "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                 "nvidia-modeset", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"]:
        (dev / name).touch()
    version_file = folder / "driver-version"
    version_file.write_text(VERSION.format(version=host_driver))
    ct = folder / "ct" / str(vmid)
    (ct / "rootfs" / "bin").mkdir(parents=True, exist_ok=True)
    (ct / "status").write_text("running\n" if running else "stopped\n")
    smi = ct / "rootfs" / "bin" / "nvidia-smi"
    smi.write_text(NVIDIA_SMI.format(library=container_driver or host_driver, version_file=version_file, gpus=gpus))
    smi.chmod(0o755)
    return {
        "proxmox_lxc_vmid": vmid,
        "proxmox_lxc_pct": str(folder / "pct"),
        "proxmox_lxc_config_dir": str(folder / "lxc"),
        "proxmox_lxc_proc_devices": str(folder / "proc-devices"),
        "proxmox_lxc_dev_dir": str(dev),
        "proxmox_lxc_driver_version_file": str(version_file),
        "proxmox_lxc_ready_delay": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--vmid", type=int, default=129)
    parser.add_argument("--running", action="store_true")
    args = parser.parse_args()
    build(Path(args.folder), vmid=args.vmid, running=args.running)


if __name__ == "__main__":
    main()

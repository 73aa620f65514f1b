# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Preparing a node: what specbench ships to it and how a Proxmox LXC container is made GPU-ready.

- ``scripts``: the benchmark client (a zipapp built from specbench_client) and the emulator,
  listed with their sha256, verified and shipped (roles bench_scripts);
- ``proxmox_lxc``: the LXC config lines for GPU passthrough (role proxmox_lxc).

Imports: the standard library and this package only (a bottom layer).
"""

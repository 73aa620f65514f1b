# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The launch both engines share: start a server detached (a session or a systemd unit), keep its
record (state/servers/<port>.json, one per launch) for the teardown, wait until it is ready, read what it runs.

- ``process``: ports, the launcher, the record, readiness with progress lines, /server_info.

Each engine's own post-launch check lives in its folder (engines/<engine>/postlaunch.py).
Imports: the standard library, ansible's module_utils.urls, and teardown (its process and GPU
readers); nothing above it.
"""

"""Fixtures for the node-role tests (sglang_server, bench_scripts, proxmox_lxc, node.yml)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from nodekit import FAKES
from specbench_testkit import free_port, kill_node_servers, wait_gone


@pytest.fixture
def node_dir(tmp_path):
    """A node folder under this test's tmp_path; every server recorded there is killed afterwards."""
    folder = tmp_path / "node"
    folder.mkdir()
    yield folder
    wait_gone(kill_node_servers(folder))


@pytest.fixture
def sshd(tmp_path):
    """A real OpenSSH server on 127.0.0.1 for this test only, standing in for the Proxmox host.

    Its own config, host key and authorized key live in tmp_path. Every command arrives through
    ForceCommand: `/usr/sbin/pct ...` (what community.proxmox.proxmox_pct_remote runs) goes to
    the fake pct in tmp_path/pve, anything else runs as sent. Yields a dict with port, key,
    known_hosts and the pve folder.
    """
    binary = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(binary):
        if os.environ.get("CI"):
            pytest.fail("sshd is missing: apt-get install -y openssh-server (the CI installs it)")
        pytest.skip("sshd is not installed (apt-get install -y openssh-server); CI runs this test")
    if os.geteuid() != 0:
        pytest.skip("sshd needs root for public-key logins as this user's own account")
    home = tmp_path / "ssh"
    home.mkdir()
    pve = tmp_path / "pve"
    pve.mkdir(exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)], check=True)
    (home / "authorized_keys").write_text((home / "client_key.pub").read_text())
    dispatch = home / "dispatch"
    dispatch.write_text(
        "#!/bin/sh\n"
        "# The test's Proxmox host: pct_remote runs `/usr/sbin/pct ...`; hand that to the fake pct.\n"
        'case "$SSH_ORIGINAL_COMMAND" in\n'
        f"  '/usr/sbin/pct '*) exec /bin/sh -c \"'{pve}/pct'${{SSH_ORIGINAL_COMMAND#/usr/sbin/pct}}\" ;;\n"
        '  *) exec /bin/sh -c "$SSH_ORIGINAL_COMMAND" ;;\n'
        "esac\n"
    )
    dispatch.chmod(0o755)
    port = free_port()
    config = home / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {home / 'host_key'}",
        f"PidFile {home / 'sshd.pid'}",
        f"AuthorizedKeysFile {home / 'authorized_keys'}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        f"ForceCommand {dispatch}",
        "LogLevel VERBOSE",
        "",
    ]))
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation folder
    log = open(home / "sshd.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    known = home / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(home / 'host_key.pub').read_text().split(' ', 2)[0]} "
                     f"{(home / 'host_key.pub').read_text().split(' ', 2)[1]}\n")
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited {proc.returncode}: {(home / 'sshd.log').read_text()}")
        try:
            import socket

            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"sshd did not listen on 127.0.0.1:{port}: {(home / 'sshd.log').read_text()}")
            time.sleep(0.05)
    yield {"port": port, "key": home / "client_key", "known_hosts": known, "home": home, "pve": pve,
           "log": home / "sshd.log"}
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log.close()


@pytest.fixture
def fake_proxmox(tmp_path):
    """Factory: a fake Proxmox VE host (pct, config folder, /proc/devices, /dev, driver) in tmp_path/pve."""
    import fake_proxmox as fp

    def build(**kwargs):
        return fp.build(tmp_path / "pve", **kwargs)

    return build


@pytest.fixture(autouse=True, scope="session")
def _fakes_on_path():
    import sys

    sys.path.insert(0, str(FAKES))
    yield

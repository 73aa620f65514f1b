"""specbench's persistent systemd unit (issue 38): its name and place (service_unit, the function
the teardown imports), and the rendered unit file checked by systemd's own parser,
``systemd-analyze verify`` (systemd cannot run as PID 1 on this machine, so the unit is verified,
not started). A unit with a broken setting is refused by the same check, so the test can fail."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.specbench.core.plugins.module_utils.launch import unit as units
from ansible_collections.specbench.core.plugins.module_utils.launch.process import LaunchError, choose_launcher


def test_name_and_place_of_the_unit():
    root = units.service_unit("emulator", 30000, euid=0)
    assert root == {"name": "specbench-emulator-30000.service",
                    "path": "/etc/systemd/system/specbench-emulator-30000.service", "scope": "system",
                    "systemctl": ["systemctl"]}
    user = units.service_unit("vllm", "8001", euid=1000, home="/home/ops")
    assert user["path"] == "/home/ops/.config/systemd/user/specbench-vllm-8001.service"
    assert user["scope"] == "user" and user["systemctl"] == ["systemctl", "--user"]


def verify(path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                          check=False)


def test_the_rendered_unit_is_a_valid_enabled_journald_service(tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze (Debian package systemd) is needed: apt-get install systemd"
    svc = units.service_unit("emulator", 30123, euid=0)
    argv = [shutil.which("python3") or "/usr/bin/python3", "-c", 'print("50% of $HOME")', "--model-path", "/m/a b"]
    text = units.render_unit(svc["name"], argv, str(tmp_path), {"HF_HOME": "/cache/h f", "PATH": "/usr/bin"},
                             "system", "specbench test")
    path = tmp_path / svc["name"]
    path.write_text(text)
    proc = verify(path)
    # systemd only warns about a setting it cannot parse (and ignores it): a clean unit says nothing
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr
    for line in ("Restart=on-failure", "StandardOutput=journal", "WantedBy=multi-user.target", "KillMode=control-group",
                 'Environment="HF_HOME=/cache/h f"', "SyslogIdentifier=specbench-emulator-30123"):
        assert line in text.splitlines(), line
    assert '"print(\\"50%% of $$HOME\\")"' in text  # systemd's own quoting: % and $ doubled
    user = units.render_unit("specbench-vllm-1.service", argv, str(tmp_path), {}, "user")
    assert "WantedBy=default.target" in user
    broken = tmp_path / "specbench-broken-1.service"
    broken.write_text(text.replace("Type=exec", "Type=bogus"))
    proc = verify(broken)
    assert "Failed to parse service type" in proc.stderr, proc.stderr
    broken.write_text(text.replace("ExecStart=\"/", "ExecStart=\""))  # a relative executable: fatal
    assert verify(broken).returncode != 0
    with pytest.raises(ValueError, match="absolute path"):
        units.render_unit(svc["name"], argv, "relative/dir", {}, "system")


def test_the_systemd_launcher_is_refused_by_the_variable_the_user_set(monkeypatch):
    monkeypatch.setattr(units, "systemd_scope", lambda euid=None: None)
    with pytest.raises(LaunchError, match="serve_launcher is systemd.*serve_launcher: session"):
        choose_launcher("systemd", service=True, variable="serve_launcher")
    assert choose_launcher("auto", service=True) == "session"


def test_a_service_record_is_named_for_the_teardown():
    assert units.describe_service({"pid": 5, "mode": "baseline"}) is None  # a benchmark's launch, not a service
    assert units.describe_service({"service": True, "launcher": "systemd", "unit": "specbench-vllm-8000.service",
                                   "unit_path": "/etc/systemd/system/specbench-vllm-8000.service", "mode": "ngram",
                                   "base_url": "http://127.0.0.1:8000"}) == (
        "systemd unit specbench-vllm-8000.service (/etc/systemd/system/specbench-vllm-8000.service), mode ngram at "
        "http://127.0.0.1:8000")
    assert units.describe_service({"service": True, "launcher": "session", "pid": 42, "mode": "eagle3",
                                   "base_url": "http://127.0.0.1:1"}).startswith("session pid 42, mode eagle3")

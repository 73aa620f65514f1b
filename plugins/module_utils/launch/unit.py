# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""specbench's own systemd unit: the lasting service playbooks/serve.yml launches.

A persistent unit file (not a transient ``systemd-run`` unit), enabled so it starts again after a
reboot, logging to journald (rotated by journald: ``journalctl -u <unit>``), restarted on failure.

* :func:`service_unit` is the one place that names the unit and says where its file lives:
  ``specbench-<engine>-<port>.service``; ``/etc/systemd/system`` as root (the system manager),
  ``~/.config/systemd/user`` otherwise (the user's manager: ``systemctl --user``). The teardown
  imports it to stop and name the unit (``systemctl [--user] stop <name>``).
* :func:`systemd_scope` says which manager runs here for this user (``system``, ``user`` or None).
* :func:`render_unit` writes the unit's text; :func:`install` writes it, reloads, enables and
  (re)starts it; :func:`remove` stops, disables and deletes it.

Unit syntax: systemd.service(5), systemd.exec(5), systemd.unit(5) (quoting: systemd.syntax(7) and
the "Command lines" section of systemd.service(5): ``%`` doubled, ``$`` doubled, each word quoted).
Standard library only.
"""
from __future__ import annotations

import os
import pwd
import subprocess

SYSTEM_DIR = "/etc/systemd/system"
USER_DIR_IN_HOME = ".config/systemd/user"


def unit_name(engine: str, port: int | str) -> str:
    """``specbench-<engine>-<port>.service``; engine is ``sglang``, ``vllm`` or ``emulator``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in str(engine or "server"))
    return f"specbench-{safe}-{int(port)}.service"


def _home(euid: int) -> str:
    try:
        return pwd.getpwuid(euid).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def service_unit(engine: str, port: int | str, euid: int | None = None, home: str | None = None) -> dict:
    """Where specbench's unit for this engine and port lives, and how to drive it:
    ``{name, path, scope, systemctl}`` (``systemctl``: the argv prefix, ``["systemctl"]`` or
    ``["systemctl", "--user"]``). Root: a system unit in /etc/systemd/system; anyone else: a user
    unit in ~/.config/systemd/user."""
    euid = os.geteuid() if euid is None else euid
    name = unit_name(engine, port)
    if euid == 0:
        return {"name": name, "path": os.path.join(SYSTEM_DIR, name), "scope": "system", "systemctl": ["systemctl"]}
    folder = os.path.join(home or _home(euid), USER_DIR_IN_HOME)
    return {"name": name, "path": os.path.join(folder, name), "scope": "user", "systemctl": ["systemctl", "--user"]}


def systemd_scope(euid: int | None = None) -> str | None:
    """``system`` where systemd is the system manager and this is root; ``user`` where a user manager
    runs for this (non-root) user; else None (no unit can be started here)."""
    euid = os.geteuid() if euid is None else euid
    if not os.path.isdir("/run/systemd/system"):
        return None
    if euid == 0:
        return "system"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{euid}"
    return "user" if os.path.exists(os.path.join(runtime, "systemd", "private")) else None


def _quote_word(word: str) -> str:
    escaped = str(word).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    escaped = escaped.replace("\n", "\\n")
    return f'"{escaped}"'


def _env_line(key: str, value: str) -> str:
    return "Environment=" + _quote_word(f"{key}={value}")


def render_unit(name: str, argv: list[str], chdir: str, env: dict, scope: str, description: str = "") -> str:
    """The unit file's text: Type=exec, the command quoted word by word, its environment explicit,
    journald for its output, restarted on failure (at most 5 times in 10 minutes), the whole control
    group stopped with it, enabled into multi-user.target (system) or default.target (user)."""
    if not argv:
        raise ValueError("a unit needs a command")
    if not os.path.isabs(str(chdir)) or "\n" in str(chdir):
        raise ValueError(f"a unit's working directory must be an absolute path on one line, got {chdir!r}")
    ident = name[: -len(".service")] if name.endswith(".service") else name
    lines = [
        "# Written by specbench (playbooks/serve.yml); stopped by its teardown. Do not edit: serve.yml rewrites it.",
        "[Unit]",
        f"Description={(description or 'specbench served model server ' + ident).replace(chr(10), ' ')}",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=exec",
        "ExecStart=" + " ".join(_quote_word(a) for a in argv),
        "WorkingDirectory=" + str(chdir).replace("%", "%%"),  # a path, unquoted (systemd.exec(5))
    ]
    lines += [_env_line(k, v) for k, v in sorted(env.items())]
    lines += [
        "KillMode=control-group",
        "TimeoutStopSec=60",
        "Restart=on-failure",
        "RestartSec=5",
        "StandardOutput=journal",
        "StandardError=journal",
        f"SyslogIdentifier={ident}",
        "",
        "[Install]",
        "WantedBy=" + ("multi-user.target" if scope == "system" else "default.target"),
        "",
    ]
    return "\n".join(lines)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def install(unit: dict, text: str) -> None:
    """Write the unit file atomically, reload the manager, enable the unit and (re)start it. Raises
    RuntimeError with systemctl's own words when a step fails."""
    folder = os.path.dirname(unit["path"])
    os.makedirs(folder, exist_ok=True)
    tmp = f"{unit['path']}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, unit["path"])
    ctl = unit["systemctl"]
    for step in (["daemon-reload"], ["reset-failed", unit["name"]], ["enable", unit["name"]],
                 ["restart", unit["name"]]):
        proc = _run([*ctl, *step])
        if proc.returncode != 0 and step[0] != "reset-failed":
            raise RuntimeError(f"{' '.join([*ctl, *step])} failed: {(proc.stderr or proc.stdout).strip()}")


def remove(unit: dict) -> list[str]:
    """Stop and disable the unit and delete its file (then reload): what was done, in words."""
    done = []
    ctl = unit["systemctl"]
    if _run([*ctl, "stop", unit["name"]]).returncode == 0:
        done.append(f"stopped {unit['name']}")
    if _run([*ctl, "disable", unit["name"]]).returncode == 0:
        done.append(f"disabled {unit['name']}")
    if os.path.exists(unit["path"]):
        os.remove(unit["path"])
        _run([*ctl, "daemon-reload"])
        done.append(f"removed {unit['path']}")
    return done


def describe_service(record: dict | None) -> str | None:
    """A launch record (state/servers/<port>.json) of serve.yml's lasting service, in words for a refusal or
    a teardown's log ('systemd unit specbench-emulator-30000.service (/etc/systemd/system/...), mode
    eagle3-adaptive at http://...'); None when the record is not a service's."""
    if not record or not record.get("service"):
        return None
    where = (f"systemd unit {record.get('unit')} ({record.get('unit_path') or 'transient'})"
             if record.get("launcher") == "systemd" else f"session pid {record.get('pid')}")
    return f"{where}, mode {record.get('mode')} at {record.get('base_url')}"

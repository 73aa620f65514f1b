# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Respawns: a holder that comes back while the teardown runs (a server forking its successor on
SIGTERM, a supervisor restarting its worker, a systemd unit with Restart=) is traced to what
starts it: its parent, the supervisor whose children keep coming back, the systemd unit read
from /proc/<pid>/cgroup. A process that came back gets SIGKILL at once (a successor forked on
SIGTERM never gets the chance to fork again). A target running in a unit specbench itself wrote
(gpu_specbench_units, e.g. serve.yml's) has that unit stopped through systemd before any signal;
once things came back RESPAWN_LIMIT times from another unit on that list it is stopped too, and
anything else fails the teardown naming what starts it and the fix (``systemctl stop UNIT``).
While a killed process's parent lives on (a possible supervisor) or it ran in a systemd
service, the GPUs must stay clean for gpu_respawn_watch_s before they are called clean.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

RESPAWN_LIMIT = 3
# Parents that adopt orphans (an init, a subreaper) rather than start them: never a supervisor here
# (systemd's own restarts are read from the unit in the cgroup).
ADOPTERS = ("systemd", "init", "tini", "dumb-init", "catatonit", "docker-init", "conmon", "containerd-shim")
UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.service$")


def systemd_unit(pid: int) -> tuple[str | None, bool]:
    """(the systemd service pid runs in, whether it is the user's manager's), from the last
    ``.service`` in its cgroup path (cgroup v2 ``0::/system.slice/x.service``, or a v1
    ``name=systemd`` line); session scopes and the user manager itself are not units to stop."""
    try:
        with open(f"{proc_table.PROC}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None, False
    path = ""
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or parts[1] == "name=systemd"):
            path = parts[2]
            break
    found, user = None, False
    for part in path.split("/"):
        if part.startswith("user@") and part.endswith(".service"):
            user = True
            continue
        if UNIT.match(part):
            found = part
    return found, user


def boot_ticks() -> float:
    """Now, in the clock ticks since boot that /proc/<pid>/stat's start time counts."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")


def stop_unit(unit: str, user: bool) -> tuple[bool, str]:
    """``systemctl [--user] stop UNIT``: (stopped, what it said)."""
    systemctl = shutil.which("systemctl")
    if not systemctl:
        return False, "systemctl not found"
    argv = [systemctl, *(["--user"] if user else []), "stop", unit]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, (done.stderr or done.stdout).strip()[:300]


def unit_matches(unit: str, names: list[str]) -> bool:
    """A unit on the specbench list (a name with or without .service, or a glob such as specbench-*)."""
    import fnmatch  # noqa: PLC0415

    base = unit[: -len(".service")]
    return any(fnmatch.fnmatchcase(unit, n) or fnmatch.fnmatchcase(base, n) for n in names)


class Respawns:
    """Part of gpu_teardown.Teardown: what came back, from where, and what is done about it."""

    def came_back(self, fresh: list[int], table) -> list[int]:
        """Of the fresh targets, those started after this teardown began (respawns); each traced."""
        back = []
        for pid in fresh:
            info = table.get(pid)
            if info is None or info.starttime < self.began_ticks:
                continue
            back.append(pid)
            unit, user = systemd_unit(pid)
            parent = table.get(info.ppid)
            source = {"pid": pid, "cmdline": info.command[:200], "unit": unit, "user_unit": user,
                      "parent": None}
            if parent is not None and info.ppid > 1 and info.ppid not in self.protected and \
                    not parent.comm.startswith(ADOPTERS):
                source["parent"] = {"pid": parent.pid, "cmdline": parent.command[:200],
                                    "signalled": parent.pid in self.targets and bool(
                                        self.targets[parent.pid]["signals"])}
            self.respawns.append(source)
        return back

    def supervisors(self, table) -> list[int]:
        """Live parents of signalled processes that this teardown does not kill (may restart them)."""
        found = []
        for t in self.targets.values():
            if not t["signals"]:
                continue
            ppid = t["info"].ppid
            if ppid <= 1 or ppid in self.protected or ppid in self.targets or ppid in found:
                continue
            parent = table.get(ppid)
            if parent is not None and parent.starttime <= t["info"].starttime and \
                    not parent.comm.startswith(ADOPTERS):
                found.append(ppid)
        return found

    def in_services(self) -> bool:
        return any(t.get("unit") for t in self.targets.values() if t["signals"])

    def respawn_source(self) -> dict:
        """What starts them: the unit most of them ran in, else the parent most of them had."""
        units = [r["unit"] for r in self.respawns if r["unit"]]
        if units:
            unit = max(set(units), key=units.count)
            user = any(r["user_unit"] for r in self.respawns if r["unit"] == unit)
            return {"kind": "unit", "unit": unit, "user": user}
        parents = [r["parent"]["pid"] for r in self.respawns if r["parent"] and not r["parent"]["signalled"]]
        if parents:
            pid = max(set(parents), key=parents.count)
            cmd = next(r["parent"]["cmdline"] for r in self.respawns if r["parent"] and r["parent"]["pid"] == pid)
            return {"kind": "supervisor", "pid": pid, "cmdline": cmd}
        return {"kind": "itself"}

    def stop_own_unit(self, pid: int) -> bool:
        """A target running in a unit specbench wrote (gpu_specbench_units) is stopped through
        systemd, once per unit, before any signal: a unit with Restart= would start it again."""
        if not self.specbench_units:
            return False
        unit, user = systemd_unit(pid)
        if not unit or unit in self.units_stopped or not unit_matches(unit, self.specbench_units):
            return False
        ok, said = stop_unit(unit, user)
        self.units_stopped.append(unit)
        self.log.append(f"systemctl {'--user ' if user else ''}stop {unit} (pid {pid} runs in it): "
                        f"{'done' if ok else 'failed'}{': ' + said if said else ''}")
        if not ok:
            self.warnings.append(f"pid {pid} runs in specbench's unit {unit}, which systemctl could not stop ({said}); "
                                 "it is signalled instead, and a restart is traced.")
        return ok

    def handle_respawns(self) -> bool:
        """After RESPAWN_LIMIT comebacks: stop a specbench unit (True: go on), else record the
        failure naming the source (False)."""
        if len(self.respawns) < RESPAWN_LIMIT:
            return True
        source = self.respawn_source()
        if source["kind"] == "unit" and unit_matches(source["unit"], self.specbench_units) \
                and source["unit"] not in self.units_stopped:
            ok, said = stop_unit(source["unit"], source["user"])
            self.units_stopped.append(source["unit"])
            self.log.append(f"systemctl {'--user ' if source['user'] else ''}stop {source['unit']}: "
                            f"{'done' if ok else 'failed'}{': ' + said if said else ''}")
            if ok:
                self.warnings.append(f"the holders kept coming back from specbench's own unit {source['unit']}: "
                                     "stopped it through systemd (systemctl stop), as serve.yml state=absent would.")
                self.respawns = []
                return True
        self.respawn_failure = source
        return False

    def respawn_words(self) -> str:
        source = self.respawn_failure or self.respawn_source()
        count = len(self.respawns)
        pids = ", ".join(str(r["pid"]) for r in self.respawns[:8])
        head = f"holders came back {count} time(s) while the teardown ran (pids {pids})"
        if source["kind"] == "unit":
            flag = "--user " if source["user"] else ""
            return (f"{head}: they run in the systemd unit {source['unit']}, which restarts them. Fix: systemctl "
                    f"{flag}stop {source['unit']} (and systemctl {flag}disable {source['unit']} if it should stay "
                    "off), then run the teardown again")
        if source["kind"] == "supervisor":
            return (f"{head}: their parent, pid {source['pid']} ({source['cmdline']}), starts them again (a "
                    f"supervisor). Fix: stop that supervisor (kill {source['pid']}, or its service), then run the "
                    "teardown again")
        return (f"{head}: each forked its successor as it was signalled; the last ones got SIGKILL. Fix: find "
                "what starts the server (ps -o pid,ppid,cmd) and stop it")

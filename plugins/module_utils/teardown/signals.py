# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Signalling: TERM, wait, KILL, wait, each through a pidfd after checking the start time."""
from __future__ import annotations

import signal

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.respawn import systemd_unit
from ansible_collections.specbench.core.plugins.module_utils.teardown.settings import SIGNAL_NAMES


def run_as_fix(user: str) -> str:
    """The fix for a signal the kernel refused: run as root, or as the process's owner."""
    return "run the teardown as root (become: true)" + ("" if user == "root" else f" or as {user}")


class Signalling:
    """The signal rounds of gpu_teardown.Teardown; a refusal by the kernel is a result."""

    def _add(self, infos, step):
        added = []
        for info in infos:
            if info.pid in self.refused:
                continue
            if info.pid not in self.targets:
                self.targets[info.pid] = {"info": info, "step": step, "signals": []}
                self.skipped.pop(info.pid, None)
            added.append(info.pid)
        return added

    def _alive(self, pid) -> bool:
        return pid not in self.refused and not self.targets[pid]["info"].gone()

    def _signal(self, pids, sig):
        for pid in pids:
            t = self.targets[pid]
            if not self._alive(pid):
                continue
            name = SIGNAL_NAMES[sig]
            if self.stop_own_unit(pid) and not self._alive(pid):
                t.setdefault("unit", systemd_unit(pid)[0])
                continue
            if self.backend.deliverable(pid):
                outcome = proc_table.send_signal(pid, t["info"].starttime, sig)
                if outcome == proc_table.GONE:
                    continue
                if outcome == proc_table.NOT_PERMITTED:
                    info = t["info"]
                    self._refuse(info, "not_permitted",
                                 f"the kernel refused {name} to this process of {info.user} (the teardown runs as "
                                 f"{proc_table.user_name(self.uid)})",
                                 run_as_fix(info.user))
                    self.log.append(f"{name} pid {pid} ({t['step']}): not permitted")
                    continue
            if not t["signals"]:
                t["unit"] = systemd_unit(pid)[0]
            t["signals"].append(name)
            self.log.append(f"{name} pid {pid} ({t['step']}): {t['info'].command[:200]}")

    def _wait(self, pids, timeout, until=None) -> list[int]:
        """Wait until all of pids are gone or the deadline passes (``until``, when sooner); the survivors."""
        deadline = self.clock() + timeout
        if until is not None:
            deadline = min(deadline, until)
        while True:
            alive = [p for p in pids if self._alive(p)]
            if not alive or self.clock() >= deadline:
                return alive
            self.sleep(self.poll_interval)

    def _escalate(self, pids, until=None, kill_first=False, back=()):
        """TERM those not yet asked, wait; KILL the survivors not yet killed, wait. Each process is
        waited for once per signal: one that outlives its SIGKILL wait in state D is stuck in the
        driver (no signal reaches it) and never waited for again. ``until``: no wait passes it
        (the clean deadline); ``kill_first``: every one of them came back, ``back``: these did:
        SIGKILL at once (a process forking its successor on SIGTERM gets no chance to)."""
        fresh = [p for p in pids if not self.targets[p]["signals"] and not kill_first and p not in back]
        self._signal(fresh, signal.SIGTERM)
        if fresh:
            self._wait(fresh, self.term_timeout, until)
        survivors = [p for p in pids if self._alive(p) and "SIGKILL" not in self.targets[p]["signals"]]
        self._signal(survivors, signal.SIGKILL)
        left = self._wait(survivors, self.kill_timeout, until) if survivors else []
        for pid in left:
            info = proc_table.read_proc(pid)
            if self.backend.state_of(pid) == "D" or (info is not None and info.state == "D"):
                self.stuck.add(pid)
        return left

    def dying(self) -> list[int]:
        """Signalled processes still alive that may yet exit (not stuck in the driver)."""
        return [p for p in self.targets if p not in self.stuck and self.targets[p]["signals"] and self._alive(p)]

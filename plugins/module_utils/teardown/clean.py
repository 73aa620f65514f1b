# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Proving clean: every target GPU is polled until it reads clean and the recorded tree and the
engine's processes are gone, held for the settle interval, with a deadline. Each poll re-walks
what would be signalled (a server that respawns on SIGTERM leaves a child behind it) and signals
what is new; it gives up early once only memory no signal from here can free remains."""
from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table


class ProveClean:
    """The last step of gpu_teardown.Teardown."""

    def unfreeable(self, pid: int, table) -> bool:
        """A listed holder of memory that no signal from here will remove."""
        if pid not in table or pid in self.backend.hidden_pids() or pid in self.stuck:
            return True
        if pid in self.refused:
            return proc_table.alive(pid, self.refused[pid].get("starttime"))
        return pid in self.skipped and pid not in self.targets

    def _blocked(self, gpus, table) -> bool:
        """Every dirty target GPU's listed memory is held by processes that will not go: waiting
        longer cannot make it clean."""
        dirty = [g for g in gpus if g["index"] in self.target_gpus and gpu_state.is_dirty(g, self.idle_mib)]
        return bool(dirty) and all(g["processes"] and all(self.unfreeable(p["pid"], table) for p in g["processes"])
                                   for g in dirty)

    def wait_clean(self, deadline: float, rewalk: bool = True) -> float | None:
        """Poll until every target GPU reads clean with nothing of ours left, for gpu_settle_s on
        end; the clock at the first read of that clean stretch, or None (deadline, or blocked)."""
        clean_since, clean_polls = None, 0
        while True:
            table = self._refresh() if rewalk else proc_table.snapshot()
            gpus = self.read_gpus()
            if not self.target_gpus and not self.devices:
                self.target_gpus = [g["index"] for g in gpus]
            fresh = self.rewalk(table, gpus) if rewalk else []
            if fresh:
                back = self.came_back(fresh, table)
                if back and not self.handle_respawns():
                    return None  # it keeps coming back from something this teardown does not stop
                self._escalate(fresh, deadline, kill_first=bool(back))
                clean_since, clean_polls = None, 0
                if self.clock() >= deadline:
                    return None
                continue
            dirty = any(gpu_state.is_dirty(g, self.idle_mib) for g in gpus if g["index"] in self.target_gpus)
            now = self.clock()
            if dirty or self.dying():
                clean_since, clean_polls = None, 0
            else:
                clean_since = now if clean_since is None else clean_since
                clean_polls += 1
                # the settle window: longer while a killed process's parent lives on or it ran in a
                # systemd service (either may start it again)
                settle = self.settle
                if rewalk and (self.respawns or self.in_services() or self.supervisors(table)):
                    settle = max(settle, self.respawn_watch)
                # two clean re-walks at least: a child forked by a process of the tree just after
                # one snapshot (its parent then seen gone) shows in the next
                if now - clean_since >= settle and (clean_polls >= 2 or not rewalk):
                    return clean_since
            if clean_since is None and now >= deadline:
                return None
            if dirty and self._blocked(gpus, table):
                self.gave_up_at = now
                return None
            self.sleep(self.poll_interval)

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Proving clean: every target GPU is polled until it reads clean, with a deadline."""
from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils import gpu_state, proc_table


class ProveClean:
    """The last step of gpu_teardown.Teardown."""

    def _blocked(self, gpus) -> bool:
        """Every dirty target GPU holds memory of a live process this teardown refused: no point waiting."""
        dirty = [g for g in gpus if g["index"] in self.target_gpus and gpu_state.is_dirty(g, self.idle_mib)]
        if not dirty:
            return False
        for gpu in dirty:
            pids = {p["pid"] for p in gpu["processes"]}
            if not any(pid in pids and proc_table.alive(pid, r.get("starttime")) for pid, r in self.refused.items()):
                return False
        return True

    def wait_clean(self, deadline: float) -> float | None:
        """Read every target GPU each poll interval until all are clean; the clock then, or None."""
        targets = self.target_gpus
        while True:
            gpus = self.backend.read_gpus()
            if not targets and not self.devices:
                targets = [g["index"] for g in gpus]
            if not any(gpu_state.is_dirty(g, self.idle_mib) for g in gpus if g["index"] in targets):
                return self.clock()
            if self.clock() >= deadline or (self.refused and self._blocked(gpus)):
                return None
            self.sleep(self.poll_interval)

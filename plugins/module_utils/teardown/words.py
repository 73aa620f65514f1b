# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The words of the result: the structured result, the summary, and the failure text with one
structured problem per fact in it."""
from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table

D_STATE_ADVICE = (
    "stuck in the driver (state D): no signal can reach it until it leaves the driver; only a "
    "GPU reset (nvidia-smi --gpu-reset -i <gpu>, with no other process on that GPU) or a reboot "
    "of the node frees it"
)
OUTSIDE_ADVICE = (
    "held outside this PID namespace (by the Proxmox host or another container): it cannot be "
    "freed from here; tear down the container that holds it from inside it (pct exec <vmid> -- ..., "
    "the inventory's proxmox_pct_remote connection), or stop the host's process on the host"
)
UNATTRIBUTED_ADVICE = (
    "the driver attributes it to no process here (NVIDIA drivers before 565 in a container report "
    "no per-process memory); the visible holders of its node are listed"
)
OTHER_USER_FIX = (
    "stop it as its owner, or set gpu_kill_other_users: true to let the teardown kill it (the "
    "teardown must then run as root, become: true)"
)
DISPLAY_ADVICE = (
    "a display server (a graphics process, Xorg, Xwayland or a Wayland compositor such as gnome-shell) "
    "holds memory on this GPU; the teardown never signals one. Fix: stop the display manager (systemctl "
    "stop gdm, lightdm or sddm; or systemctl isolate multi-user.target), drive the display from another "
    "GPU, or leave this GPU out of gpu_devices"
)
DISPLAY_REASON = "a display server (graphics process, X server, Xwayland or Wayland compositor): never signalled"
MONITOR = "holding a device node, no memory: left running"
SHARED_ONLY = ("holds only the shared nodes (nvidiactl, nvidia-uvm), no GPU's node and no memory: a job still "
               "starting or a monitor; left running")
ELSEWHERE = "uses only GPUs outside gpu_devices (itself or its children): left running"


class ResultWords:
    """What gpu_teardown.Teardown returns and says."""

    def _result(self, before, after, started) -> dict:
        killed = []
        for t in self.targets.values():
            if not t["signals"]:
                continue
            killed.append({
                **t["info"].as_dict(),
                "step": t["step"],
                "signals": t["signals"],
                "signal": t["signals"][-1],
                "exited": t["info"].gone(),
            })
        return {
            "backend": self.backend.name,
            "scope": self.scope,
            "targets": self.target_gpus,
            "before": before,
            "after": after,
            "killed": killed,
            "would_kill": [],
            "refused": sorted(self.refused.values(), key=lambda r: r["pid"]),
            "problems": self.problems,
            "left_alone": sorted((s for p, s in self.skipped.items() if p not in self.refused),
                                 key=lambda s: s["pid"]),
            "recorded_pgid": self.pgid,
            "recorded_pgid_source": self.pgid_source,
            "recorded_server": self.server,
            "recorded_servers": [rec.as_dict() for rec in self.records],
            "log": self.log,
            "warnings": list(dict.fromkeys(self.warnings)),  # each once, though each poll re-walks
            "elapsed_s": round(self.clock() - started, 4),
        }

    def _summary(self, result) -> str:
        gpus = len(result["targets"])
        if not result["killed"]:
            text = f"{gpus} target GPU(s) clean; nothing to kill"
        else:
            names = ", ".join(f"{k['pid']} ({k['signal']})" for k in result["killed"])
            text = (f"{gpus} target GPU(s) clean, read clean {result['time_to_clean_s']}s after the signal rounds "
                    f"ended and held for the settle window; killed {names}")
        if self.respawns:
            text += f"; {len(self.respawns)} holder(s) came back while it ran and got SIGKILL at once"
        monitors = [s["pid"] for s in result["left_alone"] if s["reason"] == MONITOR]
        if monitors:
            text += f"; {len(monitors)} process(es) {MONITOR} ({', '.join(map(str, monitors))})"
        return text

    # ---- the failure text

    def _refusal_lines(self) -> list[str]:
        lines = []
        for r in sorted(self.refused.values(), key=lambda r: r["pid"]):
            lines.append(f"pid {r['pid']} (user {r['user']}): {r['reason']}: {r['cmdline'][:300]}. Fix: {r['fix']}.")
        return lines

    def describe(self, pid, table, why="") -> str:
        info = table.get(pid)
        if info is None:
            return f"pid {pid} (not in this PID namespace: a host PID or another container's)"
        state = self.backend.state_of(pid) or info.state
        if state == "D":
            text = D_STATE_ADVICE
        elif state == "Z":
            text = "defunct (state Z): it holds nothing itself; its threads or children may"
        else:
            text = f"state {state} ({proc_table.STATE_TEXT.get(state, state)})"
        extra = f"; {why}" if why else ""
        return f"pid {pid} (user {info.user}) {text}{extra}: {info.command[:300]}"

    def _kind(self, pid, table, graphics=False) -> str:
        """The problem kind of a process left holding memory (docs/CONTRACTS.md)."""
        info = table.get(pid)
        if info is None:
            return "not_visible"
        if pid in self.refused:
            return self.refused[pid]["kind"]
        if graphics:
            return "display_server"
        state = self.backend.state_of(pid) or info.state
        if state in ("D", "Z"):
            return {"D": "d_state", "Z": "zombie"}[state]
        return self.skipped.get(pid, {}).get("kind") or "alive"

    def _old_driver(self) -> bool:
        """A driver that may report no per-process memory in a container (before 565), or unknown."""
        version = str(self.backend.driver_version or "")
        try:
            return int(version.split(".", maxsplit=1)[0]) < 565
        except ValueError:
            return True

    def _problem(self, kind, text, **fields) -> None:
        self.problems.append({"kind": kind, **fields, "message": text})

    def failure(self, after, table) -> str:
        """The failure text; each fact in it is also in self.problems, one structured entry each."""
        self.problems = []
        spent = self.clock() - self.kills_done
        if self.respawn_failure is not None:
            when = (f"not clean: gave up after {spent:.1f}s of the {self.clean_timeout:g}s allowed, since "
                    f"{self.respawn_words()}")
            self._problem("respawn", self.respawn_words(), source=self.respawn_failure, respawns=self.respawns)
        elif self.gave_up_at is not None:
            when = (f"not clean: gave up after {self.gave_up_at - self.kills_done:.1f}s of the {self.clean_timeout:g}s "
                    "allowed, since only processes no signal from here removes hold their memory")
        elif self.clean_read_at is not None:
            when = (f"not clean: they read clean {self.clean_read_at - self.kills_done:.2f}s after the signal rounds, "
                    f"but the last read, {spent:.2f}s after them, shows memory in use again (something took the GPU "
                    "back)")
        else:
            when = f"not clean after {spent:.1f}s (gpu_clean_timeout_s {self.clean_timeout:g})"
            if self.respawns:
                when += f"; {self.respawn_words()}"
        lines = [
            f"Target GPUs {when} (threshold {self.idle_mib} MiB, backend {self.backend.name}, scope "
            f"{self.scope}); do not benchmark on them."
        ]
        if self.refused:
            lines.append("Refused:")
            lines += [f"  {line}" for line in self._refusal_lines()]
        hidden = self.backend.hidden_pids()
        nodes = self._gpu_nodes(after["gpus"])
        holders = {h["pid"]: h for h in after["holders"]}
        for gpu in after["gpus"]:
            if gpu["index"] not in after["targets"] or not gpu_state.is_dirty(gpu, self.idle_mib):
                continue
            index = gpu["index"]
            used = gpu["memory_used_mib"]
            visible = [p for p in gpu["processes"] if p["pid"] in table and p["pid"] not in hidden]
            count = len(gpu["processes"])
            shown = sum(p.get("type") == "graphics" for p in gpu["processes"])
            kinds = f"{count - shown} compute process(es)" + (f", {shown} graphics" if shown else "")
            lines.append(f"GPU {index} ({gpu['uuid']}): {used} MiB used, {kinds}.")
            for proc in gpu["processes"]:
                why = (self.refused.get(proc["pid"]) or self.skipped.get(proc["pid"]) or {}).get("reason", "")
                graphics = proc.get("type") == "graphics" or (self.skipped.get(proc["pid"]) or {}).get(
                    "kind") == "display_server"
                if graphics:
                    why = DISPLAY_ADVICE
                text = self.describe(proc["pid"], table, why)
                lines.append(f"  {text}")
                self._problem(self._kind(proc["pid"], table, graphics), text, gpu=index, pid=proc["pid"],
                              mib=proc.get("used_memory_mib"))
            attributed = sum(p["used_memory_mib"] or 0 for p in visible)
            node_holders = [pid for pid, h in holders.items() if nodes.get(index) in h["nodes"]]
            unexplained = (used or 0) - attributed
            if not visible and (used or 0) > self.idle_mib:
                if node_holders and self._old_driver():
                    lines.append(f"  {used} MiB used: {UNATTRIBUTED_ADVICE}:")
                    for pid in node_holders:
                        why = (self.refused.get(pid) or self.skipped.get(pid) or {}).get("reason", "")
                        lines.append(f"    {self.describe(pid, table, why)}")
                    self._problem("unattributed", f"GPU {index}: {used} MiB used: {UNATTRIBUTED_ADVICE}", gpu=index,
                                  mib=used, holders=node_holders)
                else:
                    lines.append(f"  {used} MiB with no process visible here: {OUTSIDE_ADVICE}.")
                    if node_holders:
                        lines.append(f"  (driver {self.backend.driver_version} reports per-process memory in a "
                                     "container, so the holders of its node here hold none of it:)")
                        for pid in node_holders:
                            why = (self.refused.get(pid) or self.skipped.get(pid) or {}).get("reason", "")
                            lines.append(f"    {self.describe(pid, table, why)}")
                    self._problem("outside_namespace", f"GPU {index}: {used} MiB with no process visible here: "
                                  f"{OUTSIDE_ADVICE}", gpu=index, mib=used)
            elif (all(p["used_memory_mib"] is not None for p in visible) and unexplained > self.idle_mib
                  and not node_holders):
                lines.append(f"  {unexplained} MiB not attributable to a visible process: {OUTSIDE_ADVICE}.")
                self._problem("outside_namespace", f"GPU {index}: {unexplained} MiB not attributable to a visible "
                              f"process: {OUTSIDE_ADVICE}", gpu=index, mib=unexplained)
        survivors = sorted(p for p, t in self.targets.items() if self._alive(p))
        listed = {p["pid"] for g in after["gpus"] for p in g["processes"]}
        for pid in survivors:
            if pid in listed:
                continue
            text = self.describe(pid, table)
            lines.append(f"Still alive after SIGKILL: {text}")
            self._problem(self._kind(pid, table), text, pid=pid)
        for pid, entry in sorted(self.refused.items()):
            if not any(p.get("pid") == pid for p in self.problems):
                self._problem(entry["kind"], f"pid {pid} (user {entry['user']}): {entry['reason']}. Fix: {entry['fix']}.",
                              pid=pid)
        return "\n".join(lines)

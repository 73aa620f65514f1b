# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Action sglang_ready: wait for a launched server, printing a progress line while it loads.

An Ansible module cannot print while it runs, and a 1T-parameter model loads for 10-20
minutes. So this plugin calls the module of the same name in short slices (``progress_every``
seconds, ``poll_for`` to the module): each slice either returns ready, fails at once when the
server exited (with the log's tail), or comes back with a progress snapshot, which this plugin
prints as one line (elapsed of the timeout, GPU memory used, the server log's last line) before
calling again with the time already spent (``elapsed_before``), until the module's own deadline
(``timeout``, counted across the slices) fails it.
"""
from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.launch.process import load_phase, progress_line
from ansible_collections.specbench.core.plugins.module_utils.report import progress as live

MODULE = "specbench.core.sglang_ready"
DEFAULT_EVERY = 15.0


class ActionModule(ActionBase):
    """Drive specbench.core.sglang_ready slice by slice, one progress line per slice."""

    _VALID_ARGS = frozenset((
        "base_url", "pid", "starttime", "unit", "log_path", "log_offset", "timeout", "interval", "tail_lines",
        "expected", "state_path", "extra", "gpu_backend", "gpu_device_glob", "gpu_nvidia_smi", "progress_every",
        "label", "role", "speculative_check", "mode", "args", "speculative_config", "progress_dir", "run_started",
    ))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        try:
            every = float(args.pop("progress_every", DEFAULT_EVERY))
        except (TypeError, ValueError):
            every = -1.0
        if not 1 <= every <= 30:
            result.update(failed=True, msg=f"progress_every={self._task.args.get('progress_every')!r}: give "
                                           "seconds between progress lines, from 1 to 30 "
                                           "(sglang_server_ready_progress_every).")
            return result
        label = args.pop("label", "") or ""
        # The role whose server this is, in the progress lines (vllm_server's servers are vLLM's).
        role = args.pop("role", "") or "sglang_server"
        engine = "vLLM" if role == "vllm_server" else "SGLang"
        host = (task_vars or {}).get("inventory_hostname", "?")
        prefix = f"{host} | {role}{' ' + label if label else ''} | "
        # The run's progress.jsonl (role sglang_server/vllm_server give the run's folder): one record per line.
        progress_dir = args.pop("progress_dir", "") or ""
        try:
            run_started = float(args.pop("run_started", "") or 0) or None
        except (TypeError, ValueError):
            run_started = None

        def record(line: str, log_line=None, ready=False):
            if not progress_dir:
                return
            now = time.time()
            try:
                live.append_record(progress_dir, {
                    "event": "load", "host": host, "role": role, "label": label, "mode": args.get("mode") or None,
                    "ready": ready, "phase": load_phase(log_line), "log_line": log_line, "line": line,
                    "run_elapsed_s": round(now - run_started, 1) if run_started else None,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
            except OSError as exc:
                self._display.warning(f"{host}: cannot append to {progress_dir}/{live.PROGRESS_FILE}: {exc}")

        elapsed = 0.0
        while True:
            res = self._execute_module(module_name=MODULE, task_vars=task_vars,
                                       module_args={**args, "poll_for": every, "elapsed_before": elapsed})
            if res.get("failed") or res.get("ready", True):
                if res.get("ready"):
                    line = (f"{prefix}ready after {res.get('elapsed_s', 0):.0f}s "
                            f"({res.get('probe')}), {engine} {res.get('version', '?')}")
                    self._display.display(line)
                    record(line, ready=True)
                result.update(res)
                return result
            progress = res.get("progress") or {}
            elapsed = float(res.get("elapsed_s") or progress.get("elapsed_s") or elapsed + every)
            line = prefix + progress_line(progress)
            self._display.display(line)
            record(line, progress.get("log_line"))

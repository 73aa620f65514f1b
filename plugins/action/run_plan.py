# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Action plugin run_plan: the plan of a run and its expected wall time, printed and recorded.

See plugins/modules/run_plan.py for the documentation; the estimate and the lines are
module_utils/report/progress.py's.
"""

from __future__ import annotations

import os
import time

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.report import progress as live


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # nothing runs on a node
        unused_validation, args = self.validate_argument_spec(argument_spec=live.PLAN_ARGUMENT_SPEC)
        host = (task_vars or {}).get("inventory_hostname", "localhost")
        run_dir = os.path.join(args["results_dir"], args["run_id"])
        progress_dir = args["progress_dir"] or run_dir
        if args["complete"]:  # the run's end: its state complete (a resumed run's attempts kept)
            if self._task.check_mode:
                return dict(result, changed=False, msg="check mode: the run's state is not written")
            state = live.mark_complete(run_dir)
            return dict(result, changed=state is not None, run_state=state,
                        msg=f"run {args['run_id']} complete" if state else "no run state to complete")
        try:
            interval = live.check_interval(args["interval_s"])
        except live.ProgressError as exc:
            return dict(result, failed=True, msg=str(exc))
        settings = {"warmup_s": args["warmup_s"], "window_s": args["window_s"], "repeats": args["repeats"]}
        # A plan with no run state of its own (serve.yml's) counts the run's own launches as the node's history.
        plan = live.plan(host, args["engine"], args["launches"], settings, args["results_dir"],
                         args["run_id"] if args["run_state"] else "")
        header = {k: args[k] for k in ("playbook", "hosts", "modes", "warmup_s", "window_s", "budget", "served")}
        header.update(interval_s=interval, window_max_s=args["window_max_s"] or None)
        lines = live.plan_lines(plan, header)
        for line in lines:
            self._display.display(line)
        state = None
        # The run's state once per run: the play's first host writes it (the others only print their plan).
        first = ((task_vars or {}).get("ansible_play_hosts") or [host])[0] == host
        if not self._task.check_mode and first and args["run_state"]:
            try:
                state = live.start_attempt(run_dir, args["run_id"], args["playbook"], args["fingerprint"],
                                           args["resume"])
            except live.ProgressError as exc:
                return dict(result, failed=True, msg=f"{exc}. Nothing was launched.")
            except OSError as exc:
                return dict(result, failed=True, msg=f"cannot write {run_dir}/{live.RUN_STATE_FILE}: {exc}")
            attempt = len(state["attempts"])
            more = [f"{host} | plan | if this run stops before its end (Ctrl-C, an AWX cancel), what it measured stays "
                    f"in {run_dir} and {live.resume_command(state)} resumes it (same inventory and settings)"]
            if attempt > 1:
                if state.get("resumed_from") == "running":
                    # ansible-runner's cancel (AWX's) is a SIGKILL to ansible-playbook's process group
                    # (ansible_runner/runner.py, Runner.handle_termination: os.killpg(pgroup, signal.SIGKILL)):
                    # the run could not mark itself incomplete, so its state still reads running.
                    more.append(f"{host} | plan | run {args['run_id']} still read running: it was stopped outright (an "
                                "AWX cancel, a kill or a crash leave no word), so it is resumed as interrupted; what "
                                "its levels measured is on disk, and this attempt's teardown stops any server it left")
                more.append(f"{host} | plan | resuming run {args['run_id']}, attempt {attempt}: launches whose levels "
                            "are all on disk are kept, the others measure only their missing levels")
            for line in more:
                lines.append(line)
                self._display.display(line)
        if not self._task.check_mode:
            now = time.time()
            try:
                live.append_record(progress_dir,
                                   {"event": "plan", "host": host, "playbook": args["playbook"], "plan": plan,
                                    "header": header, "lines": lines,
                                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
            except OSError as exc:
                return dict(result, failed=True, msg=f"cannot write the plan to {progress_dir}/{live.PROGRESS_FILE}: "
                                                     f"{exc}")
        result.update(changed=False, plan=plan, lines=lines, ansible_facts={"specbench_plan": plan}, run_state=state,
                      msg=f"expected wall time about {live.duration(plan['expected_s'])}")
        return result

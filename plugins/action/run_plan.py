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
        try:
            interval = live.check_interval(args["interval_s"])
        except live.ProgressError as exc:
            return dict(result, failed=True, msg=str(exc))
        settings = {"warmup_s": args["warmup_s"], "window_s": args["window_s"], "repeats": args["repeats"]}
        plan = live.plan(host, args["engine"], args["launches"], settings, args["results_dir"], args["run_id"])
        header = {k: args[k] for k in ("playbook", "hosts", "modes", "warmup_s", "window_s", "budget")}
        header.update(interval_s=interval, window_max_s=args["window_max_s"] or None)
        lines = live.plan_lines(plan, header)
        for line in lines:
            self._display.display(line)
        if not self._task.check_mode:
            now = time.time()
            try:
                live.append_record(os.path.join(args["results_dir"], args["run_id"]),
                                   {"event": "plan", "host": host, "playbook": args["playbook"], "plan": plan,
                                    "header": header, "lines": lines,
                                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
            except OSError as exc:
                return dict(result, failed=True, msg=f"cannot write the plan to {args['results_dir']}/"
                                                     f"{args['run_id']}/{live.PROGRESS_FILE}: {exc}")
        result.update(changed=False, plan=plan, lines=lines, ansible_facts={"specbench_plan": plan},
                      msg=f"expected wall time about {live.duration(plan['expected_s'])}")
        return result

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Action plugin bench_results_file: a mode's results file on the controller, in the
controller's worker process (module_utils/report/results_file.file_results).

See plugins/modules/bench_results_file.py for the documentation. The results file is the
controller's (role bench_sweep writes it there), so nothing runs on a node and no Python child
starts: one call where role bench_mode ran a copy (two modules) and up to two moves before.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.report.results_file import ARGUMENT_SPEC, file_results


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # nothing runs on a node
        unused_validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            done = file_results(args["results_file"], args["gpu"], args.get("tagged_file"), args.get("held_file"))
        except (OSError, ValueError) as exc:
            return dict(result, failed=True,
                        msg=f"cannot record the GPU state in {args['results_file']} or file it: {exc}")
        result.update(done, changed=any(done.values()))
        return result

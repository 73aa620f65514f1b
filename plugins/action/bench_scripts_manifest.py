# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Action plugin bench_scripts_manifest: the manifest (and bundle) of the files bench_scripts
ships, computed in the controller's worker process.

See plugins/modules/bench_scripts_manifest.py for the documentation. The module always runs on
the controller (delegate_to: localhost), so this plugin calls the same code
(module_utils/node/scripts.manifest_result) in place: the same result and the same errors,
without starting a Python child for each call (one per mode in playbooks/compare.yml).
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.node.scripts import (
    MANIFEST_ARGUMENT_SPEC,
    ScriptsError,
    manifest_result,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # nothing runs on a node
        unused_validation, args = self.validate_argument_spec(argument_spec=MANIFEST_ARGUMENT_SPEC)
        try:
            result.update(manifest_result(args))
        except ScriptsError as exc:
            return dict(result, failed=True, msg=str(exc))
        except OSError as exc:
            return dict(result, failed=True, msg=f"cannot read a file to ship: {exc}")
        if result["skipped"]:
            result["warnings"] = [f"not shipped: {item}" for item in result["skipped"]]
        result["changed"] = False
        return result

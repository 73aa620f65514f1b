"""Action plugin bench_scripts_install: build the bundle on the controller, move it to the node
and install it there, in one task.

See plugins/modules/bench_scripts_install.py for the documentation. As ansible.builtin.copy does
(its action plugin, lib/ansible/plugins/action/copy.py in ansible-core), the file goes into the
task's temporary folder on the node (``_transfer_file``), the module runs there with its path,
and the folder is removed afterwards; the bundle on the controller is removed whatever happens.
One task and one module run where the role had five tasks (bundle, create the folder, copy,
install, remove the bundle) and five module runs (copy alone runs stat, then copy).
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.node.scripts import ScriptsError, bundle

# What the task gives; the module's own options add the bundle's path on the node. dir stays a
# string here: the module expands it on the node (~ is the node user's home, not the controller's).
ARGUMENT_SPEC = {
    "dir": {"type": "str", "required": True},
    "entries": {"type": "list", "elements": "dict", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # the task's temporary folder on the node: self._connection._shell.tmpdir
        try:
            unused_validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
            dests = [str(entry.get("dest")) for entry in args["entries"]]
            if self._task.check_mode or not dests:  # nothing moves: what would be installed
                return dict(result, changed=bool(dests), installed=dests if self._task.check_mode else [])
            try:
                local = bundle(args["entries"])
            except (ScriptsError, OSError) as exc:
                return dict(result, failed=True, msg=f"could not bundle the scripts on the controller: {exc}")
            try:
                remote = self._connection._shell.join_path(self._connection._shell.tmpdir, "bench-scripts-bundle.tar")
                self._transfer_file(local, remote)
                self._fixup_perms2((self._connection._shell.tmpdir, remote))
                result.update(self._execute_module(
                    module_name="specbench.core.bench_scripts_install", task_vars=task_vars,
                    module_args={"dir": args["dir"], "bundle": remote, "entries": args["entries"]}))
            finally:
                os.unlink(local)
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

"""The adaptive table file a served configuration reads goes with it (issue 38, item 5): serve_status
names it from the node's launch record (launch.process.record_adaptive_file) only when specbench
wrote it in the node's state folder, so serve.yml removes it on serve_state=absent and after a
replacement started, and never a file the user gave. Unit tests and one run of the module itself
(well under a second each)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.specbench.core.plugins.module_utils.launch.process import record_adaptive_file

ROOT = Path(__file__).resolve().parents[5]
SG = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--speculative-algorithm", "EAGLE3",
      "--speculative-adaptive"]


def test_only_specbenchs_own_table_file_in_the_state_folder_is_named(tmp_path):
    state = tmp_path / "node" / "state"
    state.mkdir(parents=True)
    served = str(state / "serve-adaptive-config-7c1727cc8ef8.json")
    role = str(state / "adaptive-config.json")
    assert record_adaptive_file({"command": [*SG, "--speculative-adaptive-config", served, "--port", "1"]},
                                str(state)) == served
    assert record_adaptive_file({"command": [*SG, f"--speculative-adaptive-config={role}"]}, str(state)) == role
    # The same folder through a symlink is the same folder.
    (tmp_path / "link").symlink_to(tmp_path / "node")
    assert record_adaptive_file({"command": [*SG, "--speculative-adaptive-config", served]},
                                str(tmp_path / "link" / "state")) == served
    for command in (
        [*SG, "--speculative-adaptive-config", "/etc/team/table.json"],  # the user's own file elsewhere
        [*SG, "--speculative-adaptive-config", str(state / "my-table.json")],  # a name specbench never writes
        [*SG, "--speculative-adaptive-config", str(tmp_path / "adaptive-config.json")],  # outside the state folder
        [*SG, "--speculative-adaptive-config", "state/adaptive-config.json"],  # relative: whose?
        [*SG, "--speculative-adaptive-config"],  # no value
        SG,  # SGLang's built-in table
    ):
        assert record_adaptive_file({"command": command}, str(state)) is None, command
    assert record_adaptive_file({}, str(state)) is None and record_adaptive_file(None, str(state)) is None

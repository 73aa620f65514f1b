"""serve_status, the module itself, names the adaptive table file from the node's launch record
(issue 38, item 5): run as Ansible runs a module, read-only. (Moved from tests/unit: ansible-test
units runs a copy of the collection where the module cannot be started this way.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ansible_collections

ROOT = Path(__file__).resolve().parents[2]
SG = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--speculative-algorithm", "EAGLE3",
      "--speculative-adaptive"]


def test_serve_status_names_the_file_from_the_nodes_launch_record(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    table = state / "serve-adaptive-config-0123456789ab.json"
    table.write_text("{}\n")
    record = {"command": [*SG, "--speculative-adaptive-config", str(table)], "pid": 2**22 + 7, "starttime": 1,
              "base_url": "http://127.0.0.1:9", "mode": "eagle3-adaptive"}
    (state / "servers").mkdir()
    (state / "servers" / "30000.json").write_text(json.dumps(record))
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"state_dir": str(state / "servers")}}))
    # Wherever this collection is imported from (the checkout's collections/ link, or ansible-test's copy).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(Path(p).parent) for p in ansible_collections.__path__))
    proc = subprocess.run([sys.executable, str(ROOT / "plugins/modules/serve_status.py"), str(args)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    out = json.loads(proc.stdout)
    assert out["adaptive_config_file"] == str(table) and out["running"] is False and out["changed"] is False, out
    assert out["record_path"] == str(state / "servers" / "30000.json") and out["record"]["mode"] == "eagle3-adaptive"
    assert table.exists()  # read-only: serve.yml's tasks remove it, never this module

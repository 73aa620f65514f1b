"""One launch record per launch (issue 37): the node's records (state/servers/<port>.json, and the
single state/server.json of earlier releases) and the service a node runs among them
(launch/process.py, served_record), which serve.yml's status and the node lock read. Real processes
stand for running servers (this test's own pid and start time); records of others name dead pids."""

from __future__ import annotations

import json
import os

from ansible_collections.specbench.core.plugins.module_utils.launch.process import node_records, served_record
from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

DEAD = 2**22 + 7  # above pid_max's default: no process has it


def running(**fields) -> dict:
    return {"pid": os.getpid(), "starttime": proc_table.starttime(os.getpid()), **fields}


def write(path, record: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return str(path)


def test_a_running_service_wins_over_newer_records_that_do_not_run_or_do_not_serve(tmp_path):
    servers = tmp_path / "state" / "servers"
    write(servers / "30001.json", {"pid": DEAD, "starttime": 1, "service": True, "launched_at": 300})
    write(servers / "30002.json", {"pid": DEAD, "starttime": 1, "launched_at": 400})
    served = write(servers / "30000.json", running(service=True, launched_at=100))
    assert served_record(str(servers)) == (served, json.loads((servers / "30000.json").read_text()))
    os.remove(served)
    # none runs: the last service recorded, not the newer bench launch
    path, record = served_record(str(servers))
    assert path == str(servers / "30001.json") and record["service"] is True


def test_a_running_bench_server_is_named_when_no_service_runs(tmp_path):
    servers = tmp_path / "state" / "servers"
    write(servers / "30001.json", {"pid": DEAD, "starttime": 1, "service": True, "launched_at": 300})
    bench = write(servers / "8000.json", running(launched_at=10))
    assert served_record(str(servers))[0] == bench


def test_the_single_record_of_earlier_releases_is_read_and_untrusted_files_are_not(tmp_path):
    state = tmp_path / "state"
    legacy = write(state / "server.json", running(service=True))
    servers = state / "servers"
    servers.mkdir()
    os.symlink(legacy, servers / "30000.json")  # a link is never followed
    write(servers / "notes.txt", {"pid": DEAD})  # not a record's name
    assert [path for path, _unused in node_records(str(servers))] == [legacy]
    assert served_record(str(servers))[0] == legacy


def test_no_record_names_nothing(tmp_path):
    assert served_record(str(tmp_path / "state" / "servers")) == (None, {})

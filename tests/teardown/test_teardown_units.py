"""The pieces of the teardown that need no process tree: /proc parsing, who is off limits,
settings errors, the recorded group's sources."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown

ROOT = Path(__file__).resolve().parents[2]


def info(pid, ppid, cmdline, comm="python", state="S", pgid=None):
    return proc_table.ProcInfo(pid, comm=comm, state=state, ppid=ppid, pgid=pgid or pid, sid=pid, threads=1,
                               starttime=pid * 10, cmdline=cmdline)


def test_parse_stat_with_spaces_and_parentheses_in_comm():
    line = "4242 (sglang::(x) y) S 1 4240 4240 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 987654 0 0"
    comm, state, ppid, pgid, sid, threads, start = proc_table.parse_stat(line)
    assert (comm, state, ppid, pgid, sid, threads, start) == ("sglang::(x) y", "S", 1, 4240, 4240, 3, 987654)


def test_read_proc_of_this_process():
    me = proc_table.read_proc(os.getpid())
    assert me.pid == os.getpid() and me.ppid == os.getppid() and me.state in "RS"
    assert me.starttime == proc_table.starttime(os.getpid())
    assert proc_table.alive(os.getpid(), me.starttime)
    assert not proc_table.alive(os.getpid(), me.starttime + 1)  # another process with a reused pid


def test_protected_covers_self_ancestors_and_the_controller_tree():
    table = {p.pid: p for p in [
        info(1, 0, ["/sbin/init"]),
        info(100, 1, ["/usr/bin/python3", "/usr/bin/ansible-playbook", "-e", "gpu_kill_patterns=['sglang::']"]),
        info(110, 100, ["/usr/bin/python3", "/usr/bin/ansible-playbook", "-e", "gpu_kill_patterns=['sglang::']"]),
        info(111, 110, ["/bin/sh", "-c", "python3 && sleep 0"]),
        info(112, 111, ["python3"]),  # the module: "me"
        info(113, 112, ["nvidia-smi", "--query-gpu=index"]),
        info(120, 100, ["/usr/bin/python3", "/usr/bin/ansible-playbook", "-e", "x"]),  # another worker
        info(200, 1, ["python3", "-m", "sglang.launch_server"]),
        info(201, 200, ["sglang::scheduler_TP0"]),
    ]}
    reasons = gpu_teardown.protected(table, me=112)
    assert set(reasons) == {112, 113, 111, 110, 100, 1, 120}
    assert "own process" in reasons[112] and "child" in reasons[113]
    assert "ancestor" in reasons[100] and "worker of ansible-playbook" in reasons[120]
    assert gpu_teardown.is_controller(table[100]) and not gpu_teardown.is_controller(table[200])


def test_never_kill_matches_comm_truncation_and_argv0():
    persistenced = info(5, 1, ["/usr/bin/nvidia-persistenced", "--user", "x"], comm="nvidia-persiste")
    assert gpu_teardown.never_kill_match(persistenced, gpu_teardown.DEFAULT_NEVER_KILL) == "nvidia-persistenced"
    renamed = info(6, 1, ["python3", "x.py"], comm="nvidia-persiste")  # prctl-named stand-in
    assert gpu_teardown.never_kill_match(renamed, ["nvidia-persistenced"]) == "nvidia-persistenced"
    xorg = info(7, 1, ["/usr/lib/xorg/Xorg", ":0"], comm="Xorg")
    assert gpu_teardown.never_kill_match(xorg, gpu_teardown.DEFAULT_NEVER_KILL) == "Xorg"
    server = info(8, 1, ["python3", "-m", "sglang.launch_server"])
    assert gpu_teardown.never_kill_match(server, gpu_teardown.DEFAULT_NEVER_KILL) is None


def matcher(patterns):
    compiled = gpu_teardown.compile_patterns(patterns)

    def hit(argv, comm="python3", exe="/usr/bin/python3.11"):
        proc = info(4242, 1, argv, comm=comm)
        ident = proc_table.identity(proc, exe)
        return any(p.matches(ident, proc.command) for p in compiled)
    return hit


SGLANG = gpu_teardown.ENGINE_KILL_PATTERNS["sglang"]
VLLM = gpu_teardown.ENGINE_KILL_PATTERNS["vllm"]


@pytest.mark.parametrize(
    ("argv", "comm", "exe", "expected"),
    [
        (["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8"], "python3", None, True),
        (["/usr/bin/python3.11", "-u", "-m", "sglang.launch_server"], "python3.11", None, True),
        (["sglang::scheduler_TP3"], "sglang::schedul", None, True),
        (["sglang::detokenizer"], "sglang::detoken", None, True),
        (["sglang::scheduler_TP0 -m sglang_emulator.worker {}"], "sglang::schedul", None, True),  # one-string title
        (["/venv/bin/python3", "/venv/bin/sglang", "serve", "--model-path", "m"], "sglang", None, True),
        # what is not SGLang, whatever its arguments say
        (["tail", "-f", "/var/log/sglang.launch_server.log"], "tail", "/usr/bin/tail", False),
        (["tail", "sglang.launch_server.log"], "tail", "/usr/bin/tail", False),
        (["bash", "-c", "sleep 600; python3 -m sglang.launch_server --tp 8"], "bash", "/usr/bin/bash", False),
        (["sh", "-ec", "python3 -m sglang.launch_server"], "sh", "/usr/bin/dash", False),
        (["tmux", "new", "python3 -m sglang.launch_server --port 30000"], "tmux: server", "/usr/bin/tmux", False),
        (["python3", "-c", "import sglang.launch_server"], "python3", None, False),
        (["python3", "tools/parse.py", "sglang.launch_server.log"], "python3", None, False),
        (["grep", "sglang::", "/tmp/ps.txt"], "grep", "/usr/bin/grep", False),
        (["/venv/bin/python3", "/venv/bin/sglang", "version"], "sglang", None, False),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], "python3", None, False),
        (["/usr/bin/nvidia-persistenced", "--user", "nvidia"], "nvidia-persiste", None, False),
    ],
)
def test_sglang_patterns_match_what_a_process_is(argv, comm, exe, expected):
    assert matcher(SGLANG)(argv, comm=comm, exe=exe) is expected


def test_vllm_titles_and_entry_points():
    hit = matcher(VLLM)
    assert hit(["VLLM::EngineCore"], comm="VLLM::EngineCor")
    assert hit(["python3"], comm="VLLM::Worker_TP")  # title set through prctl only
    assert hit(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    assert hit(["/venv/bin/python3", "/venv/bin/vllm", "serve", "m"])
    assert not hit(["less", "VLLM::EngineCore.log"], comm="less", exe="/usr/bin/less")
    assert not hit(["python3", "-m", "sglang.launch_server"])


def test_emulator_patterns_are_scoped_to_one_device_folder():
    mine = "/srv/node-a/emulated-dev"
    # the role's data: gpu_emulator_folder_pattern is the escaped folder plus this boundary
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_teardown" / "defaults" / "main.yml").read_text())
    folder = re.escape(mine) + defaults["gpu_emulator_folder_pattern"].rsplit("}}", 1)[1]
    patterns = [{**p, "args": folder} for p in defaults["gpu_engine_kill_patterns"]["emulator"]]
    hit = matcher(patterns)
    longer = mine + "-2"  # another node's folder that starts with this one's path
    assert not hit(["python3", "/srv/node-a/sglang_emulator", "--emulator-device-dir", longer])
    assert not hit(["sglang::scheduler_TP0", "-m", "sglang_emulator.worker", json.dumps({"device_dir": longer})])
    assert hit(["python3", "/srv/node-a/sglang_emulator", "--emulator-device-dir", mine])
    assert hit(["sglang::scheduler_TP0", "-m", "sglang_emulator.worker", json.dumps({"device_dir": mine})],
               comm="sglang::schedul")
    other = "/srv/node-b/emulated-dev"
    assert not hit(["python3", "/srv/node-b/sglang_emulator", "--emulator-device-dir", other])
    assert not hit(["sglang::scheduler_TP0", "-m", "sglang_emulator.worker", json.dumps({"device_dir": other})])
    assert not hit(["tail", "-f", f"{mine}/../emulator.log"], comm="tail", exe="/usr/bin/tail")


def test_identity_fields():
    ident = proc_table.identity(info(1, 0, ["sglang::scheduler_TP0", "-m", "sglang_emulator.worker", "{}"]),
                                "/usr/bin/python3.11")
    assert ident["title"] == "sglang::scheduler_TP0" and ident["module"] == "sglang_emulator.worker"
    ident = proc_table.identity(info(1, 0, ["/usr/bin/python3", "-X", "dev", "/opt/x/sglang", "serve", "--tp", "2"]))
    assert (ident["program"], ident["script"], ident["subcommand"]) == ("python3", "/opt/x/sglang", "serve")
    ident = proc_table.identity(info(1, 0, ["bash", "-c", "python3 -m sglang.launch_server"], comm="bash"))
    assert ident["module"] is None and ident["script"] is None


@pytest.mark.parametrize(
    ("patterns", "text"),
    [
        ("sglang::", "must be a list"),
        ([""], "non-empty regular expression"),
        (["  "], "non-empty regular expression"),
        ([3], "each pattern is a regular expression"),
        (["sglang(::"], "not a valid regular expression"),
        (["x*"], "would match every process"),
        ([{"args": "sglang"}], "names no field of what the process is"),
        ([{"subcommand": "serve"}], "names no field of what the process is"),
        ([{"title": "^sglang::", "cmdline": "x"}], "unknown field(s) cmdline"),
        ([{"module": "sglang(("}], "gpu_kill_patterns[0].module"),
    ],
)
def test_bad_patterns(patterns, text):
    with pytest.raises(gpu_teardown.TeardownInputError) as err:
        gpu_teardown.compile_patterns(patterns)
    assert text in str(err.value) and "gpu_kill_patterns" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"idle_mib": -1}, "gpu_idle_mib is -1"),
        ({"clean_timeout_s": 0}, "gpu_clean_timeout_s is 0"),
        ({"term_timeout_s": "soon"}, "gpu_term_timeout_s is 'soon'"),
        ({"poll_interval_s": 5, "clean_timeout_s": 1}, "longer than gpu_clean_timeout_s"),
        ({"never_kill": ["Xorg", ""]}, "gpu_never_kill must be a list of non-empty process names"),
        ({"server_pgid": "abc"}, "server_pgid 'abc' is not a process group id"),
        ({"kill_scope": "everything"}, "gpu_kill_scope is 'everything'"),
        ({"kill_other_users": "yes"}, "gpu_kill_other_users is 'yes'"),
        ({"devices": [0, "first"]}, "gpu_devices item 'first'"),
        ({"devices": [-1]}, "gpu_devices item -1"),
        ({"server_record": {"pid": "x", "pgid": 5}}, "the server record's pid is 'x'"),
    ],
)
def test_bad_settings(tmp_path, kwargs, text):
    backend = gpu_state.EmulatedBackend(str(tmp_path))
    with pytest.raises(gpu_teardown.TeardownInputError) as err:
        gpu_teardown.Teardown(backend, f"{tmp_path}/nvidia*", **kwargs)
    assert text in str(err.value)


def test_resolve_devices_by_index_and_uuid():
    gpus = [{"index": 0, "uuid": "GPU-aaaa1111-0000"}, {"index": 1, "uuid": "GPU-bbbb2222-0000"}]
    assert gpu_state.resolve_devices(gpus, []) == [0, 1]
    assert gpu_state.resolve_devices(gpus, [1]) == [1]
    assert gpu_state.resolve_devices(gpus, ["GPU-bbbb2222-0000", "0"]) == [0, 1]
    assert gpu_state.resolve_devices(gpus, ["gpu-AAAA1111"]) == [0]  # a unique prefix, as nvidia-smi takes
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.resolve_devices(gpus, [2])
    assert "gpu_devices names 2" in str(err.value) and "0 (GPU-aaaa1111-0000)" in str(err.value)


def test_recorded_server_prefers_the_fact_and_reads_the_state_file(tmp_path):
    warnings = []
    state = tmp_path / "server.json"
    state.write_text(json.dumps({"pid": 4321, "pgid": 4321, "starttime": 99}))
    server, source = gpu_teardown.recorded_server(None, None, str(state), warnings)
    assert server == {"pid": 4321, "pgid": 4321, "sid": None, "starttime": 99, "boot_id": None, "gpus": None}
    assert source == str(state)
    server, source = gpu_teardown.recorded_server({"pid": 7, "pgid": 7, "starttime": 1, "port": 30000}, None,
                                                  str(state), warnings)
    assert server["pid"] == 7 and source == "specbench_server"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "other_user"])
def test_a_record_is_trusted_only_as_this_users_regular_file(tmp_path, kind):
    """A symlink is never followed, a FIFO never waited on (O_NONBLOCK), another user's file never
    believed: each names nothing, says why, and is neither signalled for nor retired."""
    import time  # noqa: PLC0415

    from ansible_collections.specbench.core.plugins.module_utils.teardown import record  # noqa: PLC0415

    state = tmp_path / "server.json"
    real = tmp_path / "theirs.json"
    real.write_text(json.dumps({"pid": 4321, "pgid": 4321, "starttime": 99}))
    if kind == "symlink":
        state.symlink_to(real)
        why = "a symbolic link"
    elif kind == "fifo":
        os.mkfifo(state)
        why = "not a regular file"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        state.write_text(real.read_text())
        os.chown(state, 65534, 65534)
        why = "owned by nobody"
    warnings = []
    began = time.monotonic()
    server, source = gpu_teardown.recorded_server(None, None, str(state), warnings)
    assert time.monotonic() - began < 1
    assert server["pid"] is None and server["pgid"] is None and "(untrusted:" in source
    assert why in warnings[-1] and f"rm {state}" in warnings[-1]
    assert not record.retire_state_file(str(state), {"pid": 4321, "pgid": 4321, "starttime": 99}, "x", warnings)
    assert "torn_down" not in real.read_text()


def test_a_record_replaced_by_another_launch_is_never_retired(tmp_path):
    from ansible_collections.specbench.core.plugins.module_utils.teardown import record  # noqa: PLC0415

    state = tmp_path / "server.json"
    state.write_text(json.dumps({"pid": 5000, "pgid": 5000, "starttime": 120}))  # job B's, written after A read
    warnings = []
    assert not record.retire_state_file(str(state), {"pid": 4321, "pgid": 4321, "starttime": 99}, "gone", warnings)
    assert "names another launch (pid 5000)" in warnings[-1] and "torn_down" not in state.read_text()
    assert record.retire_state_file(str(state), {"pid": 5000, "pgid": 5000, "starttime": 120}, "gone", warnings)
    assert json.loads(state.read_text())["torn_down"]["reason"] == "gone"


def test_recorded_group_sources(tmp_path):
    warnings = []
    state = tmp_path / "server.json"
    assert gpu_teardown.recorded_pgid(None, str(state), warnings) == (None, "none recorded")
    state.write_text(json.dumps({"pid": 4321, "pgid": 4321}))
    assert gpu_teardown.recorded_pgid(None, str(state), warnings) == (4321, str(state))
    assert gpu_teardown.recorded_pgid(777, str(state), warnings) == (777, "specbench_server.pgid")
    state.write_text("{not json")
    assert gpu_teardown.recorded_pgid(None, str(state), warnings)[0] is None
    assert "has no readable pgid" in warnings[-1] and "Delete or fix the file" in warnings[-1]
    assert gpu_teardown.recorded_pgid(1, None, warnings)[0] is None  # never init's group
    assert "recorded pgid 1" in warnings[-1] and "is not a server's" in warnings[-1]


def test_emulated_glob_must_name_one_folder():
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("emulated", "/tmp/*/nvidia*")
    assert err.value.kind == "bad_input" and "one folder" in str(err.value)


def test_emulated_folder_not_created_yet_reads_as_no_gpu(tmp_path):
    backend = gpu_state.open_backend("emulated", f"{tmp_path}/emulated-dev/nvidia*")
    state = gpu_state.read_state(backend, f"{tmp_path}/emulated-dev/nvidia*", idle_mib=64)
    assert state["gpus"] == [] and state["clean"] is True


def test_expand_nodes_includes_caps_folder_files(tmp_path):
    for name in ("nvidia0", "nvidiactl"):
        (tmp_path / name).touch()
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "nvidia-caps" / "nvidia-cap1").touch()
    nodes = proc_table.expand_nodes(f"{tmp_path}/nvidia*")
    assert {os.path.basename(n) for n in nodes} == {"nvidia0", "nvidiactl", "nvidia-cap1"}


def test_a_record_is_void_only_when_it_is_another_boots():
    """Issue 19, item 1: another boot id, or a start time later than the time since this boot;
    never a process started after the caller (the in-process API, the benchmark)."""
    import subprocess  # noqa: PLC0415

    later = subprocess.Popen(["sleep", "30"])
    try:
        start = proc_table.starttime(later.pid)
        assert start >= proc_table.starttime(os.getpid())
        assert gpu_teardown.void_reason({"starttime": start, "boot_id": proc_table.boot_id()}) is None
        assert gpu_teardown.void_reason({"starttime": start}) is None
    finally:
        later.kill()
        later.wait()
    assert "earlier boot" in gpu_teardown.void_reason({"starttime": 1, "boot_id": "another-boot"})
    assert "an earlier boot's" in gpu_teardown.void_reason({"starttime": 10**12})


def test_the_systemd_unit_is_read_from_the_cgroup_and_named_in_the_fix(tmp_path, monkeypatch):
    """/proc/<pid>/cgroup as systemd writes it (v2 and v1): the service a process runs in, whether the
    user's manager runs it; session scopes are not units to stop."""
    from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table as pt  # noqa: PLC0415
    from ansible_collections.specbench.core.plugins.module_utils.teardown import respawn  # noqa: PLC0415

    cases = {
        101: ("0::/system.slice/specbench-serve-30000.service\n", ("specbench-serve-30000.service", False)),
        102: ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/trainer.service\n",
              ("trainer.service", True)),
        103: ("12:pids:/\n1:name=systemd:/system.slice/nvidia-dcgm.service\n0::/\n", ("nvidia-dcgm.service", False)),
        104: ("0::/user.slice/user-0.slice/session-3.scope\n", (None, False)),
    }
    for pid, (text, _unused) in cases.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    monkeypatch.setattr(pt, "PROC", str(tmp_path))
    for pid, (_unused, expected) in cases.items():
        assert respawn.systemd_unit(pid) == expected, pid
    assert respawn.systemd_unit(999) == (None, False)
    assert respawn.unit_matches("specbench-serve-30000.service", ["specbench-serve-*"])
    assert respawn.unit_matches("specbench-serve-30000.service", ["specbench-serve-30000"])
    assert not respawn.unit_matches("trainer.service", ["specbench-serve-*"])

    class Words(respawn.Respawns):
        respawn_failure = {"kind": "unit", "unit": "trainer.service", "user": True}
        respawns = [{"pid": 7, "unit": "trainer.service", "user_unit": True, "parent": None}] * 3

    text = Words().respawn_words()
    assert "came back 3 time(s)" in text and "systemctl --user stop trainer.service" in text


def test_a_target_in_a_specbench_unit_has_the_unit_stopped_through_systemctl(tmp_path, monkeypatch):
    """serve.yml's unit (Restart=on-failure) is stopped with systemctl stop, once, before any signal;
    a unit not on gpu_specbench_units is left to the signals (and traced if it restarts)."""
    from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table as pt  # noqa: PLC0415
    from ansible_collections.specbench.core.plugins.module_utils.teardown import respawn  # noqa: PLC0415

    for pid, unit in ((4242, "specbench-serve-30000.service"), (4343, "trainer.service")):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cgroup").write_text(f"0::/system.slice/{unit}\n")
    monkeypatch.setattr(pt, "PROC", str(tmp_path / "proc"))
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")

    class Own(respawn.Respawns):
        specbench_units = ["specbench-serve-*"]

        def __init__(self):
            self.units_stopped, self.log, self.warnings = [], [], []

    own = Own()
    assert own.stop_own_unit(4242) and not own.stop_own_unit(4242)  # once per unit
    assert not own.stop_own_unit(4343)
    assert calls.read_text().splitlines() == ["stop specbench-serve-30000.service"]
    assert own.units_stopped == ["specbench-serve-30000.service"] and "done" in own.log[0]


def test_the_teardowns_default_units_match_every_unit_serve_writes():
    """serve.yml's unit (launch/unit.py, unit_name) for every engine is one the teardown stops
    through systemctl by default (gpu_specbench_units): the names are kept in two places, held here."""
    from ansible_collections.specbench.core.plugins.module_utils.launch import unit  # noqa: PLC0415
    from ansible_collections.specbench.core.plugins.module_utils.teardown import respawn  # noqa: PLC0415

    defaults = yaml.safe_load((ROOT / "roles/gpu_teardown/defaults/main.yml").read_text(encoding="utf-8"))
    for engine in ("sglang", "vllm", "emulator"):
        name = unit.unit_name(engine, 30000)
        assert respawn.unit_matches(name, defaults["gpu_specbench_units"]), (name, defaults["gpu_specbench_units"])
    assert not respawn.unit_matches("specbench.service", defaults["gpu_specbench_units"])

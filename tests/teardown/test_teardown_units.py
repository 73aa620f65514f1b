"""The pieces of the teardown that need no process tree: /proc parsing, who is off limits,
settings errors, the recorded group's sources."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.specbench.core.plugins.module_utils import gpu_state, gpu_teardown, proc_table


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


def test_default_patterns_match_sglang_and_the_emulator_only():
    rx = gpu_teardown.compile_patterns(gpu_teardown.DEFAULT_KILL_PATTERNS)
    def hit(cmd):
        return any(r.search(cmd) for r in rx)
    assert hit("python3 -m sglang.launch_server --model-path /models/k --tp 8")
    assert hit("sglang::scheduler_TP3")
    assert hit("sglang::detokenizer")
    assert hit("/usr/bin/python3 files/sglang_emulator --model-path m")
    assert hit("sglang serve --model-path m")
    assert not hit("python3 -m vllm.entrypoints.openai.api_server")
    assert not hit("/usr/bin/nvidia-persistenced --user nvidia")


@pytest.mark.parametrize(
    ("patterns", "text"),
    [
        ("sglang::", "must be a list"),
        ([""], "non-empty regular expression"),
        (["  "], "non-empty regular expression"),
        ([3], "non-empty regular expression"),
        (["sglang(::"], "not a valid regular expression"),
        (["x*"], "would match every process"),
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
    ],
)
def test_bad_settings(tmp_path, kwargs, text):
    backend = gpu_state.EmulatedBackend(str(tmp_path))
    with pytest.raises(gpu_teardown.TeardownInputError) as err:
        gpu_teardown.Teardown(backend, f"{tmp_path}/nvidia*", **kwargs)
    assert text in str(err.value)


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
    assert "not a server's group" in warnings[-1]


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

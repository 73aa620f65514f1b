"""Two jobs on one node, end to end through ansible-runner (as AWX runs them), in a PID namespace
of their own, on one emulated node with two GPUs:

* bench on GPU 0 (node folder A) beside bench on GPU 1 (node folder B, another job's): both
  complete, and neither job's teardowns touch the other's server;
* a second job on node folder A while the bench holds its lock: with run_context_lock_wait_s 0 it
  fails at once naming the holder (run id, playbook, user, since); with a wait it queues and runs
  once the bench has ended (the lock died with the bench's ansible-playbook).
"""
from __future__ import annotations

import json
import sys
import threading
import time

import pytest
from specbench_testkit import free_port, kill_node_servers
from specbench_testkit import run_playbook as kit_run
from td_support import ROOT

pytestmark = pytest.mark.own_pid_namespace


def _bench_vars(node_dir, dev, gpu, port, results):
    return {
        "engine": "emulator",
        "mode": "baseline",
        "specbench_node_dir": str(node_dir),
        "specbench_emulator_device_dir": str(dev),
        "sglang_server_emulator_path": str(ROOT / "files" / "sglang_emulator"),
        "sglang_server_emulator_python": sys.executable,
        "sglang_server_emulator_profile": "llama-3.1-8b-1x-h100",
        "sglang_server_emulator_time_scale": 0.05,
        "sglang_server_emulator_load_seconds": 0.2,
        "sglang_server_tp_size": 1,
        "sglang_server_port": port,
        "sglang_server_launcher": "session",
        "sglang_server_environment": {"CUDA_VISIBLE_DEVICES": str(gpu)},
        "sglang_server_emulator_args": ["--emulator-gpus", "2"],  # one node, two GPUs
        "gpu_devices": [gpu],
        "bench_concurrency": [1],
        "bench_input_len": 32,
        "bench_output_len": 32,
        "bench_warmup_s": 0.5,
        "bench_window_s": 2,
        "results_dir": str(results),
        "run_id": f"job-gpu{gpu}",
    }


def test_two_jobs_on_one_node(tmp_path):
    dev = tmp_path / "dev"
    folder_a, folder_b = tmp_path / "node-a", tmp_path / "node-b"
    results = tmp_path / "results"
    runs = {}

    def job(key, playbook, extravars):
        runs[key] = kit_run(tmp_path, playbook, None, extravars, name=f"runner-{key}")

    bench_a = _bench_vars(folder_a, dev, 0, free_port(), results)
    bench_b = _bench_vars(folder_b, dev, 1, free_port(), results)
    threads = [threading.Thread(target=job, args=(k, "bench.yml", v)) for k, v in (("a", bench_a), ("b", bench_b))]
    try:
        for thread in threads:
            thread.start()
        holder_file = folder_a / "node.lock.json"
        deadline = time.monotonic() + 120
        while not holder_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        holder = json.loads(holder_file.read_text())
        assert holder["run_id"] == "job-gpu0" and holder["playbook"] == "specbench.core.bench"
        assert "ansible-playbook" in holder["watching"]["what"]
        # a teardown on folder A while the bench holds it: at once, it fails naming the bench
        teardown = {k: bench_a[k] for k in ("engine", "specbench_node_dir", "specbench_emulator_device_dir",
                                            "gpu_devices")}
        refused = kit_run(tmp_path, "playbooks/teardown.yml", None,
                          {**teardown, "run_context_lock_wait_s": 0}, name="runner-refused")
        assert refused.rc != 0
        msg = " ".join(m for _h, _t, m in refused.failures())
        for word in ("another job holds the node lock", "run job-gpu0", "playbook specbench.core.bench", "since ",
                     "run_context_lock_wait_s"):
            assert word in msg, (word, msg)
        assert not refused.task_started("gpu_teardown |"), "the refused job tore something down"
        # ... and with a wait, it queues behind the bench and runs once the bench is over
        waiter = threading.Thread(target=job, args=("queued", "playbooks/teardown.yml",
                                                    {**teardown, "run_context_lock_wait_s": 240}))
        waiter.start()
        for thread in (*threads, waiter):
            thread.join(timeout=400)
        for key in ("a", "b"):
            assert runs[key].rc == 0, (key, runs[key].stdout[-6000:])
        # neither bench's teardowns signalled the other's server
        for key, other in (("a", "b"), ("b", "a")):
            gpu = runs[key].fact("specbench_gpu", "localhost")
            assert gpu["targets"] == [0 if key == "a" else 1], gpu["targets"]
            other_server = runs[other].fact("specbench_server", "localhost")
            killed = {k["pid"] for k in gpu["killed"]}
            assert other_server["pid"] not in killed, (key, gpu["killed"])
        for key in ("a", "b"):
            outcome = runs[key].fact("bench_mode_outcomes", "localhost")["baseline"]
            assert outcome["status"] == "ok", outcome
        queued = runs["queued"]
        assert queued.rc == 0, queued.stdout[-4000:]
        lock_task = queued.task("Hold the node lock", "localhost")
        assert lock_task["waited_s"] > 0 and not lock_task["already"], lock_task
        # its closing line counts its target GPU only, on this two-GPU node
        closing = queued.task("Report the target GPUs", "localhost")["msg"]
        assert closing.startswith("1 target GPU(s) clean (GPU 0:") and "1 other GPU(s) not looked after" in closing
        assert not holder_file.exists() or json.loads(holder_file.read_text())["run_id"] != "job-gpu0"
    finally:
        for thread in threads:
            thread.join(timeout=60)
        for folder in (folder_a, folder_b):
            kill_node_servers(folder)

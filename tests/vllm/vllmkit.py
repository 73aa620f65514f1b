"""The vLLM tests' kit: the real vLLM venv, the tiny models, a node folder per run, the
server's own counters read independently of the client, and its process tree.

Every server here is launched by the playbooks (role vllm_server) in its own session on
loopback; the tests find it through the node folder's state/server.json and kill nothing else.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import specbench_testkit as kit
from specbench_testkit import free_port, inventory, local_host, run_playbook

ROOT = kit.ROOT
VENV_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODELS = ROOT / "tests" / ".tmp" / "vllm-models"
MAKE_MODELS = Path(__file__).resolve().parent / "make_models.py"
COUNTERS = {
    b"vllm:generation_tokens_total": "generated",
    b"vllm:spec_decode_num_drafts_total": "drafts",
    b"vllm:spec_decode_num_accepted_tokens_total": "accepted",
}

__all__ = ["MODELS", "VENV_PYTHON", "Scraper", "free_port", "make_models", "node_vars", "rate_tolerance",
           "run_playbook", "session_processes", "utc"]


def venv_missing() -> str | None:
    """Why the vLLM tests cannot run here, or None."""
    if not VENV_PYTHON.exists():
        return f"no vLLM venv at {VENV_PYTHON.parent.parent}: run tests/vllm/make_venv.sh (CI does)"
    return None


def make_models() -> Path:
    """The tiny models (built once, cached under tests/.tmp; no hub access), under a lock: pytest
    workers may ask at once."""
    MODELS.parent.mkdir(parents=True, exist_ok=True)
    with open(MODELS.parent / "vllm-models.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([str(VENV_PYTHON), str(MAKE_MODELS), str(MODELS)], check=True, capture_output=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"), timeout=600)
    return MODELS


def node_vars(tmp: Path, port: int, **extra) -> dict:
    """An inventory host (local connection) that launches vLLM's CPU build with the tiny model on
    ``port``; GPUs read from an empty emulated device folder (this machine has none), so the
    teardown kills the recorded server tree and proves nothing else holds a GPU."""
    node = Path(tmp) / "node"
    hostvars = {
        "specbench_node_dir": str(node),
        "specbench_emulator_device_dir": str(node / "emulated-dev"),
        "gpu_backend": "emulated",
        "gpu_device_glob": str(node / "emulated-dev" / "nvidia*"),
        "vllm_python": str(VENV_PYTHON),
        "vllm_model_path": str(MODELS / "tiny"),
        "vllm_draft_model_path": str(MODELS / "tiny-draft"),
        "vllm_server_port": port,
        "vllm_server_served_model_name": "tiny",
        "vllm_server_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                                    "TRANSFORMERS_OFFLINE": "1"},
        # Eager (no compile) and the worker inside the engine process: one interpreter fewer to start.
        "vllm_server_extra_args": ["--enforce-eager", "--distributed-executor-backend", "uni"],
        "vllm_server_max_model_len": 1024,
        "vllm_server_max_num_seqs": 32,
        "vllm_server_max_num_batched_tokens": 2048,
        "vllm_server_ready_timeout": 300,
    }
    hostvars.update(extra)
    return inventory({"localhost": local_host(**hostvars)})


def bench_vars(tmp: Path, **extra) -> dict:
    """The sweep the tests run: C = 1, 4, 16, short windows, counters read every 0.1 s."""
    out = {"engine": "vllm", "results_dir": str(Path(tmp) / "results"), "run_id": "t1",
           "bench_concurrency": [1, 4, 16], "bench_input_len": 128, "bench_output_len": 64,
           "bench_warmup_s": 2, "bench_window_s": 8, "bench_metrics_interval_s": 0.1,
           "bench_request_timeout_s": 120}
    out.update(extra)
    return out


class Scraper(threading.Thread):
    """Reads the server's /metrics every ``interval`` s, on its own (not the client's figures):
    (wall-clock time, counters) while a playbook runs."""

    def __init__(self, port: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.samples: list[tuple[float, dict]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            sent = time.time()
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    body = resp.read()
            except OSError:
                body = None
            if body:
                values: dict = {}
                for line in body.splitlines():
                    name = line.split(b"{", 1)[0].split(b" ", 1)[0]
                    if name in COUNTERS:
                        key = COUNTERS[name]
                        values[key] = values.get(key, 0.0) + float(line.rsplit(b" ", 1)[1])
                self.samples.append(((sent + time.time()) / 2, values))
            self.stop.wait(self.interval)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(5)

    def at(self, key: str, t: float, span: float = 0.6) -> float:
        """The counter at wall-clock ``t``: a least-squares line through the samples within
        ``span`` of it (scrapes are served a little late or early on a busy machine)."""
        points = [(s, v[key]) for s, v in self.samples if key in v]
        near = [p for p in points if abs(p[0] - t) <= span]
        assert near and near[0][0] <= t <= near[-1][0], f"no samples of {key} around {t}"
        n = len(near)
        mt = sum(p[0] for p in near) / n
        mv = sum(p[1] for p in near) / n
        var = sum((p[0] - mt) ** 2 for p in near)
        slope = sum((p[0] - mt) * (p[1] - mv) for p in near) / var if var else 0.0
        return mv + slope * (t - mt)

    def over(self, level: dict) -> dict:
        """The server's own figures over a level's recorded window."""
        ws, we = utc(level["window_start_utc"]), utc(level["window_end_utc"])
        out = {"rate": (self.at("generated", we) - self.at("generated", ws)) / (we - ws)}
        if any("drafts" in v for t, v in self.samples if ws <= t <= we):  # a speculative server
            drafts = self.at("drafts", we) - self.at("drafts", ws)
            out["accept_length"] = 1 + (self.at("accepted", we) - self.at("accepted", ws)) / drafts
        return out


def rate_tolerance(level: dict, chunk_tokens: int = 5) -> float:
    """2 %, plus the resolution of the client's count at the window's two edges: one chunk each
    (up to k + 1 = 5 tokens with speculation). It matters only at low-rate levels (a few hundred
    tokens in an 8 s window): +0.22 % at 560 tok/s, +2.8 % at 44 tok/s."""
    return 0.02 + 2 * chunk_tokens / (level["output_tok_per_s"] * level["window_s"])


def utc(text: str) -> float:
    """Seconds since the epoch of an ISO 8601 UTC time with milliseconds (…Z)."""
    assert text.endswith("Z") and len(text.rsplit(".", maxsplit=1)[-1]) == 4, text
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process in session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        except (OSError, IndexError):
            continue
        if len(fields) > 4 and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            found.append((int(entry), kit.command_line(int(entry))))
    return found


def vllm_titled() -> list[tuple[int, str]]:
    """Every live process of this machine whose title starts with VLLM:: (EngineCore, Worker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and kit.alive(int(entry)) and kit.command_line(int(entry)).startswith("VLLM::"):
            found.append((int(entry), kit.command_line(int(entry))))
    return found

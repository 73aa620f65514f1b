"""The vLLM tests' kit: the real vLLM venv, the tiny models, a node folder per run, the
server's own counters read independently of the client, and its process tree.

Every server here is launched by the playbooks (role vllm_server) in its own session on
loopback; the tests find it through the node folder's launch records (state/servers/<port>.json)
and kill nothing else.
"""
from __future__ import annotations

import bisect
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import specbench_testkit as kit
from specbench_testkit import free_port, inventory, local_host, run_playbook, utc_edge

ROOT = kit.ROOT
VENV_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODELS = ROOT / "tests" / ".tmp" / "vllm-models"
# The session's cache of the parser read from .venv-vllm (vllm_server_flag_cache_dir), shared by every run
# here (set by conftest's models fixture): vLLM is imported for its parser once a session, not once a run.
PARSER_CACHE: Path | None = None
MAKE_MODELS = Path(__file__).resolve().parent / "make_models.py"
SCRAPE_METRICS = Path(__file__).resolve().parent / "scrape_metrics.py"

__all__ = ["MODELS", "VENV_PYTHON", "Scraper", "assert_client_count_within_server_bounds", "assert_overlap",
           "free_port", "in_flight_tokens", "kill_recorded", "make_models", "node_vars", "run_playbook",
           "session_processes", "utc_edge"]


def launch_record(node_dir: Path, port: int) -> dict:
    """The launch record of the server a run launched on ``port`` (state/servers/<port>.json), or {}."""
    path = Path(node_dir) / "state" / "servers" / f"{port}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def kill_recorded(node_dir: Path) -> None:
    """SIGKILL the session each launch record of a run's node folder names, only while its leader
    is the recorded one."""
    for path in sorted((Path(node_dir) / "state" / "servers").glob("*.json")):
        try:
            record = json.loads(path.read_text())
            pid, sid = int(record.get("pid") or 0), int(record.get("sid") or record.get("pgid") or 0)
        except (OSError, ValueError, TypeError):
            continue
        if pid > 1 and sid > 1 and kit.alive(pid) and str(kit.starttime(pid)) == str(record.get("starttime")):
            for member, _unused in session_processes(sid):
                try:
                    os.kill(member, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def venv_missing() -> str | None:
    """Why the vLLM tests cannot run here, or None (also while .ci/run builds the venv beside the
    tests: the session's first fixture waits for it, wait_for_venv)."""
    if not VENV_PYTHON.exists() and not kit.venv_pending("vllm"):
        return f"no vLLM venv at {VENV_PYTHON.parent.parent}: run tests/vllm/make_venv.sh (CI does)"
    return None


def wait_for_venv() -> None:
    """Wait for .ci/run's build of the vLLM venv, if one runs beside the tests; fail if it failed."""
    why = kit.wait_for_venv("vllm", VENV_PYTHON)
    if why:
        raise RuntimeError(why)


def make_models() -> Path:
    """The tiny models (built once, cached under tests/.tmp; no hub access), under a lock: pytest
    workers may ask at once."""
    wait_for_venv()
    MODELS.parent.mkdir(parents=True, exist_ok=True)
    with open(MODELS.parent / "vllm-models.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([str(VENV_PYTHON), str(MAKE_MODELS), str(MODELS)], check=True, capture_output=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"), timeout=600)
    return MODELS


# The servers' environment (vllm_server_environment): a 1 GiB KV cache, no hub.
ENVIRONMENT = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


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
        "vllm_server_environment": ENVIRONMENT,
        # Eager (no compile). The uni backend asks for the worker inside the engine process, but the
        # CPU platform turns it into mp while VLLM_ENABLE_V1_MULTIPROCESSING is on (the default;
        # vllm/platforms/cpu.py): API server, EngineCore and Worker still start, each importing vLLM.
        # Turning it off (a launch 21 instead of 30 CPU-s here) left the draft mode's levels without
        # token counts once in a full CI run: vLLM calls that setup unsupported on CPU, so it stays on.
        "vllm_server_extra_args": ["--enforce-eager", "--distributed-executor-backend", "uni"],
        "vllm_server_max_model_len": 1024,
        "vllm_server_max_num_seqs": 32,
        "vllm_server_max_num_batched_tokens": 2048,
        "vllm_server_ready_timeout": 300,
    }
    if PARSER_CACHE is not None:
        hostvars["vllm_server_flag_cache_dir"] = str(PARSER_CACHE)
    hostvars.update(extra)
    return inventory({"localhost": local_host(**hostvars)})


def bench_vars(tmp: Path, **extra) -> dict:
    """The sweep the tests run: C = 1, 4, 16, 5-s windows after a 1-s warmup, counters read every
    0.1 s. The tests bound the client's figures by the server's own counters over the same window
    in tokens (the chunks in flight at each edge, the scrapes' timing), bounds that hold for any
    window length; 8 s after 2 s made the vLLM unit, the suite's longest, 12 s longer per sweep."""
    out = {"engine": "vllm", "results_dir": str(Path(tmp) / "results"), "run_id": "t1",
           "bench_concurrency": [1, 4, 16], "bench_input_len": 128, "bench_output_len": 64,
           "bench_warmup_s": 1, "bench_window_s": 5, "bench_metrics_interval_s": 0.1,
           "bench_request_timeout_s": 120}
    out.update(extra)
    return out


# The window's edges reach the test as UTC text with milliseconds, moved from the client's
# monotonic clock by an offset read once: each edge is known to within this (0.5 ms rounding,
# the offset's read, with room).
EDGE_CLOCK_S = 0.002
# How far before an edge an answer may bound it from below: a tight bound needs a recent read.
LOW_LOOKBACK_S = 5.0


class Scraper:
    """Reads the server's /metrics every ``interval`` s, on its own (not the client's figures):
    (sent, received, counters) in wall-clock time while a playbook runs, from a process pinned to
    each of two CPUs (scrape_metrics.py says why), each appending its reads to
    ``<log>-cpu<N>.jsonl`` (kept beside the run). The server read its counters somewhere between a
    scrape's sending and its reply, so a counter's value at an instant is bounded by an answer
    received before it and a scrape sent after it and answered, whichever reader sent them."""

    def __init__(self, port: int, log: Path, interval: float = 0.1, cpus: list[int] | None = None):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.log, self.interval = Path(log), interval
        allowed = sorted(os.sched_getaffinity(0))
        # The first and the last CPU: vLLM's CPU build pins its Worker to the first ones and keeps
        # the last for its engine process (vllm/utils/ompmultiprocessing.py, reserve_cpu_num).
        self.cpus = cpus if cpus is not None else sorted({allowed[0], allowed[-1]})
        self.samples: list[tuple[float, float, dict | None]] = []  # every reader's, by time sent; None: no answer
        self.sent_by: dict[int, list[float]] = {}  # each reader's sends, by CPU
        self.skipped: list[float] = []  # ticks with every scrape slot of a reader still waiting for an answer
        self.procs: dict[int, subprocess.Popen] = {}
        self.returncodes: dict[int, int | None] = {}  # each reader's exit status: 0 when it stopped as asked

    def path(self, cpu: int) -> Path:
        return self.log.with_name(f"{self.log.name}-cpu{cpu}.jsonl")

    def __enter__(self):
        for cpu in self.cpus:
            self.path(cpu).unlink(missing_ok=True)
            self.procs[cpu] = subprocess.Popen(
                [sys.executable, str(SCRAPE_METRICS), self.url, str(self.path(cpu)), str(self.interval), str(cpu)],
                start_new_session=True)
        deadline = time.monotonic() + 30  # a reader opens its log once it can stop as asked
        for cpu, proc in self.procs.items():
            while not self.path(cpu).exists():
                assert proc.poll() is None and time.monotonic() < deadline, (
                    f"the /metrics reader on CPU {cpu} did not start: {proc.poll()}")
                time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        for proc in self.procs.values():
            proc.terminate()
        samples, skipped = [], []
        for cpu, proc in self.procs.items():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.returncodes[cpu] = proc.returncode
            path = self.path(cpu)
            records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []
            samples += [(r["sent"], r["received"], r["values"]) for r in records if "sent" in r]
            skipped += [r["skipped"] for r in records if "skipped" in r]
            self.sent_by[cpu] = sorted(r["sent"] for r in records if "sent" in r)
        self.samples = sorted(samples, key=lambda x: x[0])
        self.skipped = sorted(skipped)

    def bounds(self, key: str, t: float) -> tuple[float, float]:
        """(low, high) of counter ``key`` at wall-clock ``t`` (known to EDGE_CLOCK_S), from the same
        server (a playbook runs several servers on one port in turn: a counter going back, or
        missing, marks another server). The server reads its counters somewhere between a scrape's
        sending and its reply, and they only grow: an answer received before ``t`` is at most the
        count at ``t``, and so is every scrape sent after it was received (low: the largest such
        answer of the last LOW_LOOKBACK_S that every later scrape confirms; an answer it is not
        confirmed by came from another server), every scrape sent after ``t`` at least (high: the
        smallest of those sent before the first of them was answered; one sent later reads later
        still). Scrapes overlap, so one slow answer (12 s once, on a loaded CI machine) widens
        nothing while another reader's answers come in."""
        answered = [(s, r, v) for s, r, v in self.samples if v is not None]  # by time sent
        sent_times = [s for s, unused_r, unused_v in answered]
        before = sorted(((v[key], r) for s, r, v in answered
                         if key in v and t - LOW_LOOKBACK_S <= r <= t - EDGE_CLOCK_S), reverse=True)
        assert before, f"no scrape of {key} answered in the {LOW_LOOKBACK_S} s before {t}"
        for low, low_received in before:  # the largest first
            high, first_answer, confirmed = None, float("inf"), True
            for sent, received, values in answered[bisect.bisect_left(sent_times, low_received):]:
                if sent > first_answer:
                    break
                if key not in values or values[key] < low:
                    confirmed = False  # a later read below it: this answer was another server's
                    break
                if sent >= t + EDGE_CLOCK_S:
                    high = values[key] if high is None else min(high, values[key])
                    first_answer = min(first_answer, received)
            if confirmed:
                assert high is not None, f"no scrape of {key} sent after {t}"
                return low, high
        raise AssertionError(f"another server answered around {t}: no answer before it is confirmed by "
                             f"the scrapes after it, so its counters bound nothing here")

    def coverage(self, ws: float, we: float) -> dict:
        """How well this scraper saw the window [ws, we] (for a failure's message): its scrapes
        answered inside it; from 1 s before to 1 s after it, those unanswered (no server, or the
        2-s timeout), the ticks skipped (every slot waiting), the longest round trip and each
        reader's longest time between two sends (its CPU or process stalled); the longest time
        between two answers across it, all readers together."""
        near = [(s, r, v) for s, r, v in self.samples if ws - 1 <= s <= we + 1]
        answered = sorted(r for s, r, v in near if v is not None)
        times = [ws, *[r for r in answered if ws < r < we], we]

        def longest(points):
            return round(max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0), 3)

        return {"answered_inside": sum(1 for s, r, v in near if v is not None and ws <= s and r <= we),
                "unanswered_near": sum(1 for unused_s, unused_r, v in near if v is None),
                "skipped_near": sum(1 for t in self.skipped if ws - 1 <= t <= we + 1),
                "longest_round_trip_s": round(max((r - s for s, r, v in near), default=0.0), 3),
                "longest_send_gap_s": {cpu: longest([ws, *[s for s in sent if ws < s < we], we])
                                       for cpu, sent in self.sent_by.items()},
                "longest_gap_s": longest(times),
                "window_s": round(we - ws, 3)}

    def over(self, level: dict) -> dict:
        """The server's own figures over a level's recorded window, as bounds: generated tokens
        ``(low, high)`` and, for a speculative server, accept length ``(low, high)`` (each
        counter's extremes taken independently, so they hold whatever happened between scrapes)."""
        assert set(self.returncodes.values()) == {0}, (
            f"the test's /metrics readers exited with {self.returncodes} (by CPU): their reads are not whole")
        ws, we = utc_edge(level["window_start_utc"]), utc_edge(level["window_end_utc"])
        inside = [v for s, r, v in self.samples if v is not None and ws <= s and r <= we]
        assert inside, (f"no scrape answered inside the window {level['window_start_utc']} .. {level['window_end_utc']}: "
                        f"{self.coverage(ws, we)}")
        out = {}
        for key in ("generated", "drafts", "accepted"):
            if key in inside[0]:  # this server's counters (a plain server has no spec-decode ones)
                (lo_s, hi_s), (lo_e, hi_e) = self.bounds(key, ws), self.bounds(key, we)
                out[key] = (lo_e - hi_s, hi_e - lo_s)
        if "drafts" in out and out["drafts"][1] > 0:  # a speculative server
            drafts, accepted = out["drafts"], out["accepted"]
            # Drafts the scrapes cannot bound from below (the server answered nothing near an edge)
            # leave accept length unbounded above: the test says so (coverage) and checks the rest.
            high = 1 + accepted[1] / drafts[0] if drafts[0] > 0 else float("inf")
            out["accept_length"] = (1 + max(0.0, accepted[0]) / drafts[1], high)
            out["coverage"] = self.coverage(ws, we)
        return out


def in_flight_tokens(level: dict, k: int) -> float:
    """How far the client's count of a window may stray from the server's counter over the same
    window, in tokens, at each edge: the tokens the server had counted but the client had not yet
    received. vLLM counts a step's tokens in its output handler right after it hands them to the
    requests' streams and before those streams write (vllm/v1/engine/async_llm.py,
    output_handler: process_outputs, then the stat logger's record), and a stream that falls
    behind gets its pending outputs merged into one chunk (RequestOutputCollector.put in
    vllm/v1/engine/output_processor.py). We allow each running request two steps in flight at an
    edge (the one being written and one more while the event loop serves a scrape), each of at
    most k + 1 tokens (k drafted plus the bonus token; k = 0 without speculation)."""
    return level["concurrency"] * 2 * (k + 1)


def rounding_tokens(level: dict) -> float:
    """The recorded rate and window are rounded to 1e-3: their product is known to this many tokens."""
    return 0.0005 * level["window_s"] + 0.0005 * level["output_tok_per_s"] + 0.01


def assert_client_count_within_server_bounds(level: dict, server: dict, k: int) -> None:
    """The client's tokens over the window (rate x window) against the server's counter over the
    same window: the counter's bounds from the scrapes, widened by the tokens in flight at each
    edge (in_flight_tokens), by what the server counted before an edge and the client received
    after it (the level's ``edge_chunk_tokens``: the chunks of the first two reads after the edge, which hold it,
    worker.Worker._edge_chunks says why; the client falls short by the end's, runs over by the
    start's) and the rounding. Derived bounds, not a percentage: on a loaded machine vLLM's count
    ran 74 tokens ahead of the client's at C=4, where two steps in flight allow 8."""
    client = level["output_tok_per_s"] * level["window_s"]
    low, high = server["generated"]
    edges = level["edge_chunk_tokens"]
    assert edges and edges["end"] is not None, f"C={level['concurrency']}: no edge chunks recorded: {edges}"
    base = in_flight_tokens(level, k) + rounding_tokens(level)
    below, above = base + edges["end"], base + edges["start"]
    assert low - below <= client <= high + above, (
        f"C={level['concurrency']}: client counted {client:.1f} tokens in the window, the server "
        f"[{low:.0f}, {high:.0f}], less {below:.1f} or more {above:.1f} in flight (edge chunks {edges})")


def assert_overlap(name: str, level: dict, mine, theirs) -> None:
    """Two bounds of the same quantity (the client's scrapes and the test's own) both hold the
    truth, so they overlap (to the recorded figures' rounding)."""
    assert mine is not None and theirs is not None, (name, mine, theirs)
    assert mine[0] <= theirs[1] + 0.05 and theirs[0] <= mine[1] + 0.05, (
        f"C={level['concurrency']}: {name}: the client's bounds {mine} and the test's {list(theirs)} do not overlap")


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

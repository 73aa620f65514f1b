"""Startup, workers and shutdown: the process tree and the log lines SGLang shows.

Order, as SGLang: bind the HTTP port (health answers 503 while loading), start one worker
per tp rank (``sglang::scheduler_TP<r>``) that opens its GPU's nodes and "loads weights",
and the ``sglang::detokenizer`` process beside them, which holds no GPU (SGLang's
``_launch_subprocesses`` in srt/entrypoints/engine.py starts the schedulers, then the
detokenizer, and keeps the tokenizer manager in the server process), then warm up with one
generation and log "The server is fired up and ready to roll!".
SIGTERM or SIGINT: health turns 503, workers and the detokenizer get SIGTERM, the server waits up to one
second for them and exits; workers that ignore SIGTERM are left behind holding their GPU,
as real stubborn workers are.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from sglang_emulator import gpus, httpserver
from sglang_emulator.api import Api, HealthSink
from sglang_emulator.engine import TP0, Engine
from sglang_emulator.metrics import Metrics

LOG = logging.getLogger("sglang")


class State:
    def __init__(self):
        self.status = "starting"
        self.started = time.time()
        self.stop = asyncio.Event()
        self.workers: list[asyncio.subprocess.Process] = []
        self.detokenizer: asyncio.subprocess.Process | None = None
        self.held: list[int] = []

    def crash(self, reason: str) -> None:
        LOG.error("Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: %s", reason, extra=TP0)
        LOG.error("Received sigquit from a child process. It usually means the child failed.")
        for proc in self.workers + ([self.detokenizer] if self.detokenizer else []):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        logging.shutdown()
        os._exit(1)


async def start_workers(cfg: dict, state: State) -> None:
    args = cfg["args"]
    device_dir = args.emulator_device_dir
    if device_dir:
        prof = cfg["profile"]
        gpus.ensure_device_dir(device_dir, cfg["gpus"], prof["gpu_name"], prof["gpu_memory_total_mib"])
        # The server process itself opens the control nodes (no memory), as SGLang's does.
        state.held = [os.open(os.path.join(device_dir, node), os.O_RDWR) for node in ("nvidiactl", "nvidia-uvm")]
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    import json

    ranks = gpus.rank_gpus(args.tp_size)
    for rank in range(args.tp_size):
        name = f"sglang::scheduler_TP{rank}"
        wcfg = {
            "name": name,
            "gpu": ranks[rank],
            "device_dir": device_dir,
            "faults": args.emulator_fault,
            "leave_group": "worker-leaves-group" in args.emulator_fault and rank == args.tp_size - 1,
            "load_seconds": cfg["load_seconds"] * args.emulator_time_scale,
            "memory_mib": cfg["worker_memory_mib"],
        }
        proc = await asyncio.create_subprocess_exec(
            name,
            "-m",
            "sglang_emulator.worker",
            json.dumps(wcfg),
            executable=sys.executable,
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            env=env,
        )
        state.workers.append(proc)
    # The detokenizer: no GPU, no load time; like the schedulers it outlives a SIGKILLed server.
    dcfg = {"name": "sglang::detokenizer", "gpu": None, "device_dir": device_dir, "faults": [], "leave_group": False,
            "load_seconds": 0, "memory_mib": 0}
    state.detokenizer = await asyncio.create_subprocess_exec(
        "sglang::detokenizer", "-m", "sglang_emulator.worker", json.dumps(dcfg), executable=sys.executable,
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=env)
    LOG.info("Load weight begin. avail mem=%.2f GB", cfg["profile"]["gpu_memory_total_mib"] / 1024, extra=TP0)


async def wait_workers_ready(state: State) -> str | None:
    """None when every worker said READY, else why not."""
    for rank, proc in enumerate(state.workers):
        line = await proc.stdout.readline()
        if line.strip() != b"READY":
            code = await proc.wait()
            return f"scheduler_TP{rank} exited with code {code} while loading"
    if state.detokenizer is not None and (await state.detokenizer.stdout.readline()).strip() != b"READY":
        return f"detokenizer exited with code {await state.detokenizer.wait()} while starting"
    return None


async def stop_workers(state: State, grace: float = 1.0) -> None:
    procs = state.workers + ([state.detokenizer] if state.detokenizer else [])
    for proc in procs:
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            LOG.warning("Worker pid %d did not exit on SIGTERM; leaving it.", proc.pid)


async def run_server(cfg: dict) -> int:
    args = cfg["args"]
    loop = asyncio.get_running_loop()
    state = State()
    metrics = Metrics()
    engine = Engine(cfg, metrics)
    api = Api(cfg, engine, metrics, state)
    try:
        server = await httpserver.start(args.host, args.port, api.dispatch)
    except OSError as exc:
        LOG.error(
            "[Errno %s] error while attempting to bind on address (%r, %d): %s",
            exc.errno,
            args.host,
            args.port,
            exc.strerror.lower() if exc.strerror else exc,
        )
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, state.stop.set)
    LOG.info("Started server process [%d]", os.getpid())
    LOG.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", args.host, args.port)
    engine_task = loop.create_task(engine.run())
    await start_workers(cfg, state)
    if args.emulator_device_dir:  # the GPUs' power follows the engine's steps (gpus.PowerModel)
        try:
            engine.telemetry = gpus.Telemetry(args.emulator_device_dir, gpus.rank_gpus(args.tp_size))
        except OSError as exc:  # another user's folder: serve without power figures, and say so
            LOG.warning("No emulated GPU telemetry (%s): the GPUs' power and energy cannot be read.", exc, extra=TP0)
    scale = args.emulator_time_scale
    if "fail-start" in args.emulator_fault:
        await asyncio.sleep(cfg["load_seconds"] * scale / 2)
        LOG.error(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of %.2f GiB of which 1.12 GiB is free.",
            cfg["profile"]["gpu_memory_total_mib"] / 1024,
            extra=TP0,
        )
        await stop_workers(state, grace=0.5)
        return 1
    ready_wait = loop.create_task(wait_workers_ready(state))
    stop_wait = loop.create_task(state.stop.wait())
    await asyncio.wait({ready_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if stop_wait.done():
        ready_wait.cancel()
        await stop_workers(state)
        return 0
    stop_wait.cancel()
    failure = ready_wait.result()
    if failure:
        LOG.error("Rank 0 scheduler is dead: %s", failure)
        await stop_workers(state)
        return 1
    mem = cfg["memory_usage"]
    LOG.info(
        "Load weight end. type=%s, dtype=%s, avail mem=%.2f GB, mem usage=%.2f GB.",
        cfg["profile"]["architectures"][0],
        args.dtype,
        mem["kvcache"] + mem["graph"],
        mem["weight"],
        extra=TP0,
    )
    LOG.info("KV Cache is allocated. #tokens: %d, KV size: %.2f GB", cfg["kv_capacity_tokens"], mem["kvcache"], extra=TP0)
    LOG.info(
        "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=16384, max_running_requests=%d, context_len=%d",
        cfg["kv_capacity_tokens"],
        args.chunked_prefill_size,
        cfg["max_running_requests"],
        cfg["context_length"],
        extra=TP0,
    )
    if cfg["spec"]:
        spec = cfg["spec"]
        LOG.info(
            "Speculative decoding: algorithm=%s, num_steps=%d, eagle_topk=%d, num_draft_tokens=%d%s",
            spec.algorithm,
            spec.num_steps,
            spec.eagle_topk,
            spec.num_draft_tokens,
            ", adaptive" if spec.adaptive_table else "",
            extra=TP0,
        )
    LOG.info("Application startup complete.")
    if not args.skip_server_warmup:
        sink = HealthSink()
        engine.submit(engine.new_request(8, 1, True, sink))
        await sink.done
    engine.flush()
    state.status = "ready"
    LOG.info("The server is fired up and ready to roll!")
    await state.stop.wait()
    state.status = "shutting_down"
    LOG.info("Shutting down")
    server.close()
    await stop_workers(state)
    engine_task.cancel()
    return 0

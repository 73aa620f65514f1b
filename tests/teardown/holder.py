"""A process that holds emulated GPU device nodes, the way an SGLang server or worker does.

Started by the teardown tests only, always with ``--tag <the test's tmp_path>`` on its command
line so that kill patterns and cleanups can only ever match processes that test started.

    holder.py --tag T --dev DIR [--gpu N --mib M] [--nodes a,b] [--comm NAME]
              [--ignore-term] [--setsid] [--worker SPEC ...] [--exit-after-ready]
              [--record-extra JSON]

A worker spec may hold ``--argv0 TITLE``: the worker then runs with that process title in
argv[0] (``sglang::scheduler_TP0``), as setproctitle leaves SGLang's schedulers. Run as
``python3 -m sglang.launch_server`` through the fake package Lab.sglang_package() writes,
it is what SGLang's server is by every measure the teardown uses.

It opens its nodes, writes its memory record (sglang_emulator.gpus.write_record, plus the
fields of --record-extra), starts its workers (each ``--worker`` is a JSON list of extra
arguments for a child holder), prints READY once they all are, and waits for signals.
With --exit-after-ready it exits right after READY, leaving its workers running (a parent
that the test does not reap stays a zombie: the "defunct parent"). With --leader-exits its
main thread exits while another thread keeps the descriptors ("Zl": a defunct leader whose
own /proc/<pid>/fd is empty, its holdings visible under /proc/<pid>/task/<tid>/fd). With
--respawn GPU:MIB, SIGTERM makes it fork a child into a process group of its own (same session)
and exit; the child opens GPU's nodes and records MIB there 0.5 s later (MIB 0: it holds
nothing), then waits for signals: a server that respawns on SIGTERM. With --respawn-forever
GPU:MIB every generation does the same on its SIGTERM (at once, no delay): a server that forks
its successor on every SIGTERM. With --supervise SECONDS it is a supervisor: it runs its single
--worker, and whenever that worker exits starts it again SECONDS later (no READY wait).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "files"))

from sglang_emulator import gpus  # noqa: E402


def set_comm(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def respawn(dev: str, gpu: int, mib: int) -> None:
    """On SIGTERM: a child in a group of its own allocates 0.5 s later; this process exits."""
    if os.fork() > 0:
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setpgid(0, 0)
    time.sleep(0.5)
    if mib:
        held = [os.open(os.path.join(dev, n), os.O_RDWR) for n in ("nvidiactl", "nvidia-uvm", f"nvidia{gpu}")]
        gpus.write_record(dev, "respawned", {gpu: mib})
        assert held
    while True:
        signal.pause()


def respawn_forever(dev: str, gpu: int, mib: int) -> None:
    """On SIGTERM: fork a successor that holds GPU at once and does the same on its SIGTERM; exit."""
    if os.fork() > 0:
        os._exit(0)
    held = [os.open(os.path.join(dev, n), os.O_RDWR) for n in ("nvidiactl", "nvidia-uvm", f"nvidia{gpu}")]
    gpus.write_record(dev, "successor", {gpu: mib})
    assert held
    signal.signal(signal.SIGTERM, lambda *_unused: respawn_forever(dev, gpu, mib))
    while True:
        signal.pause()


def supervise(argv: list[str], delay: float) -> None:
    """Start argv; whenever it exits, start it again ``delay`` seconds later (a supervisor)."""
    first = True
    while True:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE if first else subprocess.DEVNULL)
        if first:
            sys.stdout.write("READY " + str(child.pid) + "\n")
            sys.stdout.flush()
            first = False
        child.wait()
        time.sleep(delay)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--gpu", type=int)
    p.add_argument("--mib", type=int, default=0)
    p.add_argument("--nodes", default="")
    p.add_argument("--comm")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--setsid", action="store_true")
    p.add_argument("--worker", action="append", default=[])
    p.add_argument("--exit-after-ready", action="store_true")
    p.add_argument("--leader-exits", action="store_true")
    p.add_argument("--record-extra", default="")
    p.add_argument("--argv0", help=argparse.SUPPRESS)
    p.add_argument("--respawn", help="GPU:MIB")
    p.add_argument("--respawn-forever", help="GPU:MIB")
    p.add_argument("--supervise", type=float)
    args = p.parse_args()

    if args.supervise is not None:
        if args.comm:
            set_comm(args.comm)
        supervise([sys.executable, os.path.abspath(__file__), "--tag", args.tag, "--dev", args.dev,
                   *json.loads(args.worker[0])], args.supervise)

    if args.comm:
        set_comm(args.comm)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.respawn_forever:
        signal.signal(signal.SIGTERM, lambda *_unused: respawn_forever(args.dev, *map(int, args.respawn_forever.split(":"))))
    if args.respawn:
        signal.signal(signal.SIGTERM, lambda *_unused: respawn(args.dev, *map(int, args.respawn.split(":"))))
    if args.setsid:
        os.setsid()
    nodes = [n for n in args.nodes.split(",") if n]
    if args.gpu is not None:
        nodes += ["nvidiactl", "nvidia-uvm", f"nvidia{args.gpu}"]
    held = [os.open(os.path.join(args.dev, n), os.O_RDWR) for n in dict.fromkeys(nodes)]
    if args.gpu is not None and args.mib:
        path = gpus.write_record(args.dev, args.comm or "holder", {args.gpu: args.mib})
        if args.record_extra:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
            record.update(json.loads(args.record_extra))
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            os.replace(path + ".tmp", path)

    children = []
    for spec in args.worker:
        extra = json.loads(spec)
        argv0 = sys.executable
        if "--argv0" in extra:
            # a process title in argv[0], as setproctitle leaves it (sglang::scheduler_TP0)
            at = extra.index("--argv0")
            argv0 = extra[at + 1]
            del extra[at : at + 2]
        # with a title in argv[0], Python cannot find its own prefix from argv[0]: name it
        env = dict(os.environ, PYTHONHOME=sys.base_prefix) if argv0 != sys.executable else None
        child = subprocess.Popen(
            [argv0, os.path.abspath(__file__), "--tag", args.tag, "--dev", args.dev, *extra],
            executable=sys.executable,
            stdout=subprocess.PIPE,
            env=env,
        )
        children.append(child)
    for child in children:
        line = child.stdout.readline()
        if line.strip() != b"READY":
            sys.stderr.write(f"worker {child.pid} did not start\n")
            return 1
    sys.stdout.write("READY " + " ".join(str(c.pid) for c in children) + "\n")
    sys.stdout.flush()
    if args.exit_after_ready:
        os._exit(0)
    if args.leader_exits:
        # the thread-group leader exits, a thread lives on with the descriptors: state "Zl"
        threading.Thread(target=lambda: time.sleep(3600)).start()
        ctypes.CDLL(None).pthread_exit(None)
    while True:
        signal.pause()
    return 0 if held else 0


if __name__ == "__main__":
    sys.exit(main())

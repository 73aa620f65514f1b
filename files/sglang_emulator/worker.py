"""A tensor-parallel worker: what SGLang's ``sglang::scheduler_TP<r>`` is to the driver (and,
with no GPU, the ``sglang::detokenizer`` beside them: the same life, no device).

Started by the server with its command line reading ``sglang::scheduler_TP<r> ...``. It
opens /dev/nvidiactl, /dev/nvidia-uvm and its GPU's node from the emulated device folder,
"loads weights" for the configured time, publishes its memory record, tells the server it
is ready, then holds everything until SIGTERM. Like SGLang's reparented schedulers it does
not follow its parent's death: a server killed with SIGKILL leaves its workers holding the
GPUs, which is what a teardown has to find.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

from sglang_emulator import gpus


def set_comm(name: str) -> None:
    """prctl(PR_SET_NAME), as setproctitle does, so ps -o comm and pgrep see the name."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    name = cfg["name"]
    set_comm(name)
    record_path = None

    def on_term(signum, frame):
        if record_path:
            try:
                os.unlink(record_path)
            except OSError:
                pass
        os._exit(0)

    if "ignore-sigterm" in cfg["faults"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    if cfg.get("leave_group"):
        os.setsid()

    held = []
    device_dir = cfg["device_dir"]
    if device_dir and cfg["gpu"] is not None:  # no device folder or no GPU: only the process tree
        for node in ("nvidiactl", "nvidia-uvm", f"nvidia{cfg['gpu']}"):
            held.append(os.open(os.path.join(device_dir, node), os.O_RDWR))
    time.sleep(cfg["load_seconds"])
    if device_dir and cfg["gpu"] is not None:
        record_path = gpus.write_record(device_dir, name, {cfg["gpu"]: cfg["memory_mib"]})
    try:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
    except OSError:
        pass  # the server is gone; hold the GPU anyway, as an orphaned scheduler does
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

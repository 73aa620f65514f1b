"""Shared test helpers: a free loopback port, HTTP, device-folder holders, the emulator process.

Every process a test starts is started here in its own session and killed here by its
process group and, for emulated GPUs, by the holders of the test's own device folder:
never by name, never anything the test did not start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "files" / "sglang_emulator"
sys.path.insert(0, str(ROOT / "files"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 30):
    """(status, headers, body bytes) of one request; never raises on HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def holders_of(device_dir: Path) -> set[int]:
    """PIDs holding any file of ``device_dir`` open (the test's own folder only)."""
    real = os.path.realpath(device_dir)
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                try:
                    if os.path.dirname(os.readlink(f"/proc/{entry}/fd/{fd}")) == real:
                        pids.add(int(entry))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return pids


class Emulator:
    """One emulator process started by a test."""

    def __init__(self, tmp: Path, args: list[str], time_scale: float, wait: bool):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.device_dir = tmp / f"dev-{self.port}"
        self.log_path = tmp / f"emulator-{self.port}.log"
        self.argv = [
            sys.executable,
            str(EMULATOR),
            "--model-path",
            "test/model",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--emulator-time-scale",
            str(time_scale),
            "--emulator-device-dir",
            str(self.device_dir),
            *args,
        ]
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited {self.proc.returncode}:\n{self.log()}")
            try:
                status, _, _ = http("GET", self.base_url + "/health_generate", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"emulator not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        """SIGKILL the group, then any holder of this test's device folder (orphans)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        if self.device_dir.exists():
            for pid in holders_of(self.device_dir):
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self._log.close()

"""tests/gpu/run_on_gpu.sh where there is no GPU: its arguments, the clear refusal without
nvidia-smi (nothing started), a stand-in nvidia-smi for the GPU-index check, shellcheck."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "run_on_gpu.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _run(*args, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path if path is not None else os.environ.get("PATH", "")}
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env,
                          check=False)


def _bin_without_nvidia_smi(tmp_path: Path) -> str:
    """A PATH with the basic tools this script uses and no nvidia-smi, whatever this machine has."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("sed", "awk", "grep", "cut", "tr", "wc", "head", "dirname", "mktemp", "python3", "date"):
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    return str(folder)


def test_without_nvidia_smi_it_refuses_clearly_and_starts_nothing(tmp_path):
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    before = set(tmp.glob("specbench-gpu-*"))
    done = _run(path=_bin_without_nvidia_smi(tmp_path))
    assert done.returncode == 2
    last = done.stdout.strip().splitlines()[-1]
    assert last == ("run_on_gpu: NOT RUN: nvidia-smi not found: this check needs an NVIDIA GPU machine with the "
                    "driver installed (nothing was started)")
    assert set(tmp.glob("specbench-gpu-*")) == before, "a work folder was made before the GPU check"


@pytest.mark.parametrize(("args", "needle"), [
    (["--gpu", "x"], "--gpu must be a GPU index"),
    (["--gib", "lots"], "--gib must be a number of GiB"),
    (["--gpu"], "--gpu needs a value"),
    (["--frobnicate"], "unknown argument --frobnicate"),
])
def test_bad_arguments_name_the_problem(args, needle):
    done = _run(*args)
    assert done.returncode == 2
    assert done.stdout.strip().splitlines()[-1].startswith("run_on_gpu: NOT RUN: ")
    assert needle in done.stdout


def test_help_describes_both_parts():
    done = _run("--help")
    assert done.returncode == 0
    assert "teardown" in done.stdout and "C = 1, 4, 16" in done.stdout and "under 8 minutes" in done.stdout


def test_a_gpu_index_the_machine_lacks_is_refused(tmp_path):
    folder = Path(_bin_without_nvidia_smi(tmp_path))
    fake = folder / "nvidia-smi"  # a stand-in that lists one idle GPU
    fake.write_text("#!/bin/sh\necho '0, NVIDIA RTX PRO 6000 Blackwell, 0, 97887, 590.48.01'\n")
    fake.chmod(0o755)
    done = _run("--gpu", "3", path=str(folder))
    assert done.returncode == 2
    assert "there is no GPU 3 here (nvidia-smi lists: 0 )" in done.stdout


def test_the_script_is_shellcheck_clean():
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install -y shellcheck)")
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout

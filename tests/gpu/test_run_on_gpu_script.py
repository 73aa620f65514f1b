"""tests/gpu/run_on_gpu.sh where there is no GPU: its arguments, the clear refusal without
nvidia-smi (nothing started), a stand-in nvidia-smi for the GPU-index check, the plan (which
engines and modes would run, what is skipped and why) with stand-in interpreters, part 1 up to
libcuda, shellcheck. About 2 s."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "run_on_gpu.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _run(*args, path: str | None = None, **extra_env) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path if path is not None else os.environ.get("PATH", ""), **extra_env}
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env,
                          check=False)


def _bin_without_nvidia_smi(tmp_path: Path) -> str:
    """A PATH with the basic tools this script uses and no nvidia-smi, whatever this machine has."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("sed", "awk", "grep", "cut", "tr", "wc", "head", "dirname", "mktemp", "date", "sort",
                 "sleep", "seq", "setsid", "tail", "timeout", "env", "bash"):
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    # The interpreter itself, not a version manager's shim (which needs more than this PATH).
    (folder / "python3").symlink_to(os.path.realpath(sys.executable))
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
    for needle in ("teardown", "cuMemAlloc via ctypes: no torch needed", "C = 1, 4", "under 10 minutes",
                   "post-launch check", "/flush_cache", "--plan", "1b. telemetry", "energy counter over the window"):
        assert needle in done.stdout, needle


def _fake_python(folder: Path, name: str, answer: str) -> str:
    """An interpreter stand-in: answers the script's engine probe with ``answer`` ("VERSION TORCH")."""
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(0o755)
    return str(path)


def test_the_plan_names_every_engine_its_modes_and_every_skip(tmp_path):
    sglang = _fake_python(tmp_path, "sglang-python", "0.5.23 torch")
    vllm_cpu = _fake_python(tmp_path, "vllm-python", "0.32.0 cpu-torch")
    done = _run("--plan", "--sglang-python", sglang, "--vllm-python", vllm_cpu)
    assert done.returncode == 0, done.stdout
    assert f"plan: part 2 sglang 0.5.23 ({sglang}): modes ngram standalone" in done.stdout
    assert "plan: part 1 teardown on GPU 0 (4 GiB through libcuda cuMemAlloc)" in done.stdout
    assert "plan: part 1b telemetry on GPU 0" in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("run_on_gpu: PLAN ONLY (nothing started): engines: sglang 0.5.23 | skipped: ")
    assert "vllm 0.32.0 at" in last and "its torch is a CPU build, it cannot serve on the GPU" in last
    assert "sglang eagle3, eagle, nextn, eagle3-adaptive: they need a trained EAGLE/MTP head" in last
    gone = _run("--plan", "--sglang-python", str(tmp_path / "nope"), "--vllm-python", sglang.replace("sglang", "x"))
    assert "sglang: not installed for " + str(tmp_path / "nope") + " (pass --sglang-python)" in gone.stdout
    skipped = _run("--plan", "--skip-bench")
    assert "skipped: part 2, every engine (--skip-bench)" in skipped.stdout.strip().splitlines()[-1]


def test_part_one_without_libcuda_fails_naming_it(tmp_path):
    """Up to the GPU: a stand-in nvidia-smi lists an idle GPU, the holder then cannot load
    libcuda and the script says so (exit 1); its bystander is cleaned up."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("libcuda is here: this machine would really allocate")
    except OSError:
        pass
    folder = Path(_bin_without_nvidia_smi(tmp_path))
    fake = folder / "nvidia-smi"
    fake.write_text('#!/bin/sh\ncase "$*" in\n  *index,name*) echo "0, FAKE GPU, 0, 1000, 1.0" ;;\n'
                    '  *compute-apps*) ;;\n  *) echo 0 ;;\nesac\n')
    fake.chmod(0o755)
    done = _run("--skip-bench", path=str(folder), TMPDIR=str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith(
        "run_on_gpu: FAILED: part 1 could not hold GPU memory through libcuda: libcuda.so.1 cannot be loaded")


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


sys.path.insert(0, str(SCRIPT.parent))
import telemetry_check  # noqa: E402


def _window(counter_scale: float, counter: bool = True) -> dict:
    """A 10-s window of 400 W sampled every 0.1 s through the collection's reader code; the counter scaled."""
    tl = telemetry_check.load_telemetry()
    times = [0.1 * i for i in range(121)]
    samples = [[{"index": 0, "t": t, "power_w": 400.0, "energy_j": 400.0 * t * counter_scale if counter else None,
                 "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "util_pct": 100.0, "mem_used_mib": 2048,
                 "temperature_c": 60.0, "throttle": 0}] for t in times]
    return tl.window_telemetry(samples, 1.0, 11.0, 0.1, "nvml")


def test_part_1b_checks_the_counter_against_integrated_power():
    """The verdict part 1b prints: the counter within NVML's +-5 W over the window passes, 10% off fails (400 W,
    10 s: 4000 J, tolerance 50 J), no counter is said to be unchecked, an unloaded GPU fails."""
    passed, words = telemetry_check.energy_verdict(_window(1.0), idle_w=70.0)
    assert passed is True and "counter 4000.0 J, integrated power 4000.0 J" in words and "tolerance 50.0 J" in words
    passed, words = telemetry_check.energy_verdict(_window(1.1), idle_w=70.0)
    assert passed is False and words.startswith("the energy counter disagrees with the power samples")
    passed, words = telemetry_check.energy_verdict(_window(1.0, counter=False))
    assert passed is None and "no energy counter here" in words
    passed, words = telemetry_check.energy_verdict(_window(1.0), idle_w=395.0)
    assert passed is False and "did not load the GPU" in words


def test_part_1b_without_nvml_says_not_run():
    done = subprocess.run([sys.executable, str(SCRIPT.parent / "telemetry_check.py"), "--seconds", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    try:
        import pynvml
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML answers here: part 1b would really run")
    except Exception:  # noqa: BLE001 - no pynvml or no driver: the check must say NOT RUN
        pass
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("telemetry: NOT RUN: ")

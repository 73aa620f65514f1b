"""tests/sglang_cpu/run_real_sglang.sh without SGLang's source: its arguments, the refusals before
anything starts (no source, no CPU kernel in it, no kernel package, a kernel source that matches no
supported release or not the one named), the release picked from the kernel's signature, the plan
with what it skips and why, the kernel cache keyed by the source's hash, the launcher's one change
to SGLang's argument resolution (against SGLang 0.5.23's own code in .venv-sglang), the results
check, shellcheck. About 5-10 s, most of it importing SGLang. The end-to-end run needs the source,
which no package registry carries: it runs when SPECBENCH_SGLANG_SRC names a tree, and is the one
skip tests/conftest.py allows in CI for it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "run_real_sglang.sh"
BASH = shutil.which("bash") or "/bin/bash"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

import check_results  # noqa: E402
import specbench_testkit as kit  # noqa: E402

SGLANG_PYTHON = Path(os.environ.get("SPECBENCH_SGLANG_VENV") or ROOT / ".venv-sglang") / "bin" / "python"


def _run(*args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **env})


ARGS = {19: "std::optional<at::Tensor> tree_mask", 20: "bool is_causal", 21: "bool extra_a", 22: "bool extra_b"}


def _source(tmp_path: Path, args: int = 22) -> Path:
    """A stand-in source tree: the kernel folder's layout, its Python package's marker, and the one
    signature the script reads, with ``args`` arguments (19: 0.5.18, 20: 0.5.19, 22: 0.5.20-0.5.23)."""
    root = tmp_path / f"src{args}"
    kdir = root / "python" / "sglang" / "kernels" / "aot" / "csrc" / "cpu"
    kdir.mkdir(parents=True)
    (kdir / "CMakeLists.txt").write_text("project(common_ops)\n")
    params = [f"    at::Tensor& a{i}" for i in range(18)] + [f"    {ARGS[n]}" for n in range(19, args + 1)]
    (kdir / "torch_extension_cpu.cpp").write_text("void extend_attention_cpu(\n" + ",\n".join(params) + ");\n")
    package = root / "python" / "sglang" / "kernels" / "aot" / "python" / "sgl_kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return root


def _last(done: subprocess.CompletedProcess) -> str:
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("args", "needle"), [
    ([], "NOT RUN: give the path of SGLang's source tree (a release from 0.5.18 to 0.5.23"),
    (["/nonexistent/sglang"], "NOT RUN: the source tree /nonexistent/sglang is not a folder"),
    (["--frobnicate"], "NOT RUN: unknown argument --frobnicate"),
    (["--venv"], "NOT RUN: --venv needs a value"),
])
def test_bad_arguments_name_the_problem(args, needle):
    done = _run(*args)
    assert done.returncode == 2 and _last(done).startswith(f"run_real_sglang: {needle}"), done.stdout


def test_a_tree_without_the_kernel_or_of_no_supported_release_is_refused_before_anything_starts(tmp_path):
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    before = set(tmp.glob("specbench-sglang-cpu-*"))
    (tmp_path / "empty").mkdir()
    done = _run(str(tmp_path / "empty"))
    assert done.returncode == 2 and "holds no CPU kernel source" in _last(done)
    done = _run(str(_source(tmp_path, 21)))
    assert done.returncode == 2
    assert "extend_attention_cpu takes 21 arguments, which no supported release (0.5.18 to 0.5.23)" in _last(done)
    # A release named that the source is not: refused, naming what the source matches.
    done = _run(str(_source(tmp_path, 19)), "--sglang-version", "0.5.23")
    assert done.returncode == 2 and "the kernel source is not 0.5.23's: its extend_attention_cpu takes 19" in _last(done)
    assert "it matches 0.5.18" in _last(done)
    done = _run(str(_source(tmp_path, 22)), "--sglang-version", "0.5.17")
    assert done.returncode == 2 and "--sglang-version 0.5.17 is not a supported release (0.5.18 to 0.5.23)" in _last(done)
    # The C++ without its Python package (sgl_kernel's wrappers, which sglang imports): refused.
    bare = _source(tmp_path / "bare", 22)
    shutil.rmtree(bare / "python" / "sglang" / "kernels" / "aot" / "python")
    done = _run(str(bare))
    assert done.returncode == 2 and "not its Python package sgl_kernel" in _last(done)
    assert set(tmp.glob("specbench-sglang-cpu-*")) == before, "a work folder was made before the checks"


@pytest.mark.parametrize(("args", "extra", "release", "torch"), [
    (19, [], "0.5.18", "2.13.0"),
    (20, [], "0.5.19", "2.13.0"),
    (22, [], "0.5.23", "2.14.1"),
    (22, ["--sglang-version", "0.5.20"], "0.5.20", "2.13.0"),
])
def test_the_release_is_picked_by_the_kernels_signature(tmp_path, args, extra, release, torch):
    done = _run(str(_source(tmp_path, args)), "--plan", *extra, "--cache", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"takes {args} arguments in extend_attention_cpu: sglang {release}" in done.stdout
    assert f"plan: venv {ROOT}/.venv-sglang-cpu-{release}: " in done.stdout
    assert f"(torch {torch} CPU wheel, sglang {release} --no-deps" in done.stdout


def test_the_plan_names_what_runs_what_is_skipped_and_the_kernel_cache_key(tmp_path):
    src = _source(tmp_path)
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = _run(str(src), "--plan", "--cache", str(cache), "--venv", str(tmp_path / "venv"), **env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    key = next(line for line in out.splitlines() if "sha256 key" in line).split("sha256 key ")[1].rstrip(")")
    assert f"plan: kernel {cache}/{key}: to build" in out
    assert f"plan: venv {tmp_path / 'venv'}: to build (torch 2.14.1 CPU wheel, sglang 0.5.23 --no-deps" in out
    assert "plan: compare.yml baseline against ngram, standalone and eagle3 at C=1,4,16; serve.yml, serve.yml again" in out
    assert "plan: bench.yml engine=sglang on the tiny models, modes: baseline ngram standalone eagle3" in out
    assert f"plan: EAGLE-3 head: make_eagle3_head.py trains one on the target (minutes), cached in {cache}/eagle3-KEY" in out
    assert "skipped: eagle (EAGLE-1/2 heads are another architecture" in out and "nextn (needs the target's own MTP" in out
    assert _last(done).startswith("run_real_sglang: PLAN ONLY (nothing started)")
    assert not cache.exists() and not (tmp_path / "venv").exists()
    # What the machine lacks is listed, not hidden: here, no libnuma header.
    done = _run(str(src), "--plan", "--cache", str(cache), SPECBENCH_NUMA_HEADER=str(tmp_path / "no-numa.h"))
    assert "CANNOT RUN HERE: " in _last(done) and "apt-get install libnuma-dev" in _last(done)
    # The same source, the same key; one byte changed, another key; a built key reads cached.
    again = _run(str(src), "--plan", "--cache", str(cache), **env).stdout
    assert f"sha256 key {key})" in again
    (cache / key / "sgl_kernel").mkdir(parents=True)
    (cache / key / "sgl_kernel" / "__init__.py").write_text("")
    assert f"plan: kernel {cache}/{key}: cached" in _run(str(src), "--plan", "--cache", str(cache)).stdout
    with (src / "python/sglang/kernels/aot/csrc/cpu/CMakeLists.txt").open("a") as handle:
        handle.write("# changed\n")
    assert f"sha256 key {key})" not in _run(str(src), "--plan", "--cache", str(cache)).stdout
    done = _run(str(src), "--plan", "--skip-bench", "--skip-serve", "--modes", "baseline")
    assert "modes: none" in _last(done) and "part 5, every mode (--skip-bench)" in _last(done)
    assert "parts 6 and 7, compare and serve (--skip-serve)" in _last(done)
    done = _run(str(src), "--plan", "--modes", "nextn")
    assert done.returncode == 2 and "mode nextn cannot run on a tiny model here" in _last(done)


def test_the_launcher_keeps_intel_amx_on_the_cpu_and_nothing_else():
    """Against SGLang 0.5.23's own resolution pass (.venv-sglang, which CI builds): unwrapped, the pass
    swaps intel_amx for torch_native where the platform reports no AMX (here: no kernel loaded, so
    has_amx is False whatever the CPU); wrapped by launch_cpu.py, intel_amx stays on the CPU device,
    and the XPU case still reaches SGLang's own code."""
    why = kit.wait_for_venv("sglang", SGLANG_PYTHON)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    probe = f"""
import sys, types
sys.path.insert(0, {str(HERE)!r})
from sglang.srt.arg_groups import overrides
def run(backend, device):
    fn = next(p for p in overrides.POST_PROCESS_PASSES if p.__name__ == "_attention_backend_platform_fallbacks")
    return fn(types.SimpleNamespace(attention_backend=backend, device=device))
before = run("intel_amx", "cpu")
count = len(overrides.POST_PROCESS_PASSES)
import launch_cpu
assert launch_cpu.keep_intel_amx()
print(before, run("intel_amx", "cpu"), run("triton", "cpu"), len(overrides.POST_PROCESS_PASSES) == count)
"""
    done = subprocess.run([str(SGLANG_PYTHON), "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "{'attention_backend': 'torch_native'} {} {} True"


def test_the_results_check():
    level = {"concurrency": 1, "error": None, "output_tok_per_s": 107.0, "server_count_check": {"agree": True},
             "accept_length": 2.7, "accept_length_source": "chat API per request: sum(completion_tokens) / ..."}
    doc = {"status": "complete", "server": {"post_launch_check": {"ok": True}}, "levels": [level]}
    assert check_results.verdict(doc, "ngram") == "ok (107 tok/s at C=1/4, accept 2.70 from sglext)"
    assert check_results.verdict(doc, "baseline") == "ok (107 tok/s at C=1/4)"
    metrics_only = dict(level, accept_length_source="/metrics over the window")
    assert "accept length 2.7 (/metrics over the window)" in check_results.verdict(dict(doc, levels=[metrics_only]),
                                                                                   "ngram")
    # A release without per-request details on the chat API (0.5.18): the fallback the product takes is right.
    assert check_results.verdict(dict(doc, levels=[metrics_only]), "ngram", "0.5.18") == \
        "ok (107 tok/s at C=1/4, accept 2.70 from /metrics)"
    assert "accept length 2.7 (/metrics" in check_results.verdict(dict(doc, levels=[metrics_only]), "ngram", "0.5.19")
    failed = dict(doc, server={"post_launch_check": {"ok": False, "mismatches": ["speculative_algorithm"]}})
    assert check_results.verdict(failed, "ngram").startswith("FAILED post-launch check ['speculative_algorithm']")
    summary = {"recommendation": "Speculate (ngram) ...", "status": "complete", "comparisons": {
        "ngram": {"levels": [{"concurrency": 1, "verdict": "pays", "speedup": 2.41},
                             {"concurrency": 16, "verdict": "unclear", "speedup": None}]}}}
    assert check_results.compare_verdict(summary) == "ok (ngram: C=1 pays 2.41x, C=16 unclear; status complete)"
    summary["comparisons"]["ngram"]["levels"][1]["verdict"] = None
    assert check_results.compare_verdict(summary) == "FAILED ngram C=16: no verdict"
    served = {"mode": "ngram", "service": {"pid": 7}, "verified": True, "state": "serving",
              "levels": [{"concurrency": 1, "verdict": "matches", "ratio": 1.01}]}
    assert check_results.serve_verdict(served, "serve") == "ok (ngram pid 7: C=1 matches 1.01; verified True)"
    assert check_results.serve_verdict(served, "absent").startswith("FAILED state serving")
    assert check_results.serve_verdict(dict(served, state="retired"), "absent") == "ok (retired)"


def test_shellcheck():
    tool = shutil.which("shellcheck")
    if not tool:
        pytest.fail("shellcheck is not installed (.ci/run installs it)")
    done = subprocess.run([tool, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_end_to_end_with_a_source_tree():
    """The whole check (venv, kernel, models, every mode through bench.yml): ~10 minutes the first
    time on 2 cores, given SGLang's source tree at the commit of 0.5.23 in SPECBENCH_SGLANG_SRC."""
    src = os.environ.get("SPECBENCH_SGLANG_SRC")
    if not src:
        pytest.skip("needs SGLang's source tree (SPECBENCH_SGLANG_SRC): its CPU kernel is on no package registry")
    done = subprocess.run([BASH, str(SCRIPT), src], capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout[-4000:]


def test_the_fidelity_diff_holds_the_emulator_to_sglangs_source(emulator, capsys):
    """fidelity_diff.py (issue 40, item 4) with the emulator (EAGLE-3) on one side and SGLang 0.5.23's
    installed code on the other: every sglang: metric the emulator serves is declared by SGLang with
    the same type, sglext.spec_tokens_details has SpecTokensDetails' fields on both OpenAI APIs, the
    readiness lines are SGLang's, and /generate's speculative meta_info keys differ only by the three
    SGLang sets under DSpark's capped verify alone (deliberate: no such mode is emulated)."""
    why = kit.wait_for_venv("sglang", SGLANG_PYTHON)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    import fidelity_diff

    package = next((SGLANG_PYTHON.parent.parent / "lib").glob("python3*/site-packages/sglang"))
    emu = emulator("--tp-size", "8", "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", time_scale=0.2)
    out_json = Path(os.environ.get("TMPDIR", "/tmp")) / f"fidelity-{os.getpid()}.json"
    assert fidelity_diff.main(["--left", emu.base_url, "--left-name", "emulator", "--left-log", str(emu.log_path),
                               "--source", str(package), "--json", str(out_json)]) == 0
    rows = {row["item"]: row for row in json.loads(out_json.read_text())}
    out_json.unlink()
    assert rows["/metrics names served but not declared by the source, or of another type"]["verdict"] == "same"
    for api in ("/v1/chat/completions", "/v1/completions"):
        assert rows[f"POST {api} sglext.spec_tokens_details"]["verdict"] == "same", rows
    spec = rows["POST /generate meta_info speculative keys (last chunk)"]
    assert set(spec["source site-packages"]) - set(spec["emulator"]) == {
        "spec_block_accept_length", "spec_cap_length", "spec_cap_lens_histogram"}
    assert rows["readiness log lines"]["verdict"] == "same"
    assert "5 items, 4 same, 1 differ, 0 on one side only" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["standalone", "eagle3"])
def test_the_scripts_launch_settings_pass_sglangs_own_parser_in_check_mode(tmp_path, mode):
    """The settings run_real_sglang.sh launches with (cpu_vars.py: the flags of issue 40, no GPU),
    through bench.yml --check with engine=sglang and SGLang 0.5.23's interpreter (.venv-sglang): the
    role renders the mode's command (standalone with the noisy copy as draft, eagle3 with the head
    make_eagle3_head.py trains) and checks every flag against SGLang's real parser. Nothing is
    launched; the model folders are stand-ins (only their files are checked). A bad flag fails this
    same check (tests/sglang_parser). About 20 s each."""
    why = kit.wait_for_venv("sglang", SGLANG_PYTHON)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    import cpu_vars

    for name, arch in (("tiny", "LlamaForCausalLM"), ("tiny-draft", "LlamaForCausalLM"),
                       ("tiny-eagle3", "LlamaForCausalLMEagle3")):
        folder = tmp_path / "models" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
        (folder / "model.safetensors").write_text("")
    extra = cpu_vars.cpu_vars(mode, str(tmp_path), str(tmp_path / "models"), kit.free_port(), str(SGLANG_PYTHON))
    playbook = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or "ansible-playbook"
    done = subprocess.run([playbook, "bench.yml", "--check", "-e", json.dumps(extra)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False, env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Check every flag against the node's SGLang" in done.stdout

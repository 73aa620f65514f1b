"""Bad inputs to bench.yml -e engine=vllm: each a clear error before or at launch that names the
fix, with nothing measured lost (an earlier results file stays as it was) and nothing left running."""
from __future__ import annotations

import socket

import pytest
import vllmkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def earlier_results(folder):
    """A results file of an earlier run in the same results folder: it must survive untouched."""
    path = folder / "results" / "t0" / "localhost" / "baseline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"levels": [{"concurrency": 1, "output_tok_per_s": 123.0}]}\n')
    return path, path.read_text()


def assert_refused(run, *fragments, launched=False):
    assert run.run.rc != 0
    text = run.run.stdout
    for fragment in fragments:
        assert fragment in text, (fragment, text[-3000:])
    assert not run.run.results_file("localhost", run.mode).exists() or launched
    if run.record:
        assert not vllmkit.session_processes(run.record["pgid"])


@pytest.fixture(scope="module")
def refused(vllm_run):
    def go(name, mode, extra=None, **hostvars):
        run = vllm_run(name, "bench.yml", dict({"mode": mode}, **(extra or {})), **hostvars)
        run.mode = mode
        return run
    return go


def test_an_unknown_speculative_method_is_refused_by_the_installed_vllm(refused):
    run = refused("bad-method", "typo", vllm_server_extra_modes={
        "typo": {"speculative": {"method": "ngramm", "num_speculative_tokens": 2}}})
    assert_refused(run, "speculative method 'ngramm' is unknown to vLLM 0.32.0", "Did you mean ngram",
                   "vllm_server_modes")
    assert not (run.node / "state" / "server.json").exists()


def test_a_model_path_that_does_not_exist(refused):
    run = refused("bad-model", "baseline", vllm_model_path="/nonexistent/tiny-model")
    assert_refused(run, "the model /nonexistent/tiny-model does not exist on this node",
                   "set vllm_server_model_path")


def test_a_draft_model_with_another_vocabulary(refused, models):
    run = refused("bad-draft", "draft", vllm_draft_model_path=str(models / "other-vocab"))
    assert_refused(run, "has a vocabulary of", "must share the target's tokenizer", "vllm_server_draft_model_path")


def test_a_flag_the_installed_vllm_does_not_know(refused):
    run = refused("bad-flag", "baseline", vllm_server_extra_args=["--enforce-eager", "--max-num-seqz", "4"])
    assert_refused(run, "--max-num-seqz is not a flag of vLLM 0.32.0", "Did you mean --max-num-seqs",
                   "vllm_server_extra_args")


def test_a_busy_port_stops_the_launch_and_leaves_the_holder_alone(refused, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path, before = earlier_results(tmp_path)
        run = refused("busy-port", "baseline", {"results_dir": str(tmp_path / "results")}, port=port)
        assert_refused(run, f"port {port} on 127.0.0.1 is already in use", "vllm_server_port")
        assert holder.fileno() >= 0 and path.read_text() == before
    assert "vllm.entrypoints" not in " ".join(cmd for unused, cmd in vllmkit.vllm_titled())

"""Bad inputs to bench.yml -e engine=vllm: each a clear error before or at launch that names the
fix, with nothing measured lost (an earlier results file stays as it was) and nothing left running.

All five cases run as five hosts of ONE bench.yml run (each host its own node folder, port and bad
input; the mode is a host variable): a host that fails leaves the others running, so each host's
own failure is read from its own events, and the run's Ansible start-up is paid once."""
from __future__ import annotations

import json
import os
import socket

import pytest
import specbench_testkit as kit
import vllmkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

CASES = {
    # host: (mode, host variables)
    "bad-method": ("typo", {"vllm_server_extra_modes": {
        "typo": {"speculative": {"method": "ngramm", "num_speculative_tokens": 2}}}}),
    "bad-model": ("baseline", {"vllm_model_path": "/nonexistent/tiny-model"}),
    "bad-draft": ("draft", {"vllm_draft_model_path": str(vllmkit.MODELS / "other-vocab")}),
    "bad-flag": ("baseline", {"vllm_server_extra_args": ["--enforce-eager", "--max-num-seqz", "4"]}),
    "busy-port": ("baseline", {}),
}


class Refusal:
    """One host's part of the shared run: what it printed, its node folder, its record."""

    def __init__(self, run, host: str, mode: str, node):
        self.run, self.host, self.mode, self.node = run, host, mode, node
        self.text = "\n".join(str(ev.get("stdout", "")) for ev in run.events
                              if (ev.get("event_data") or {}).get("host") == host)
        found = sorted((node / "state" / "servers").glob("*.json"))  # one record per launch, by port
        assert len(found) <= 1, found
        self.record = json.loads(found[0].read_text()) if found else {}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory, models):
    """The shared run, with a socket holding the busy-port host's port the whole time and an earlier
    results file of that host in the shared results folder."""
    del models
    folder = tmp_path_factory.mktemp("bad-inputs")
    earlier = folder / "results" / "t0" / "busy-port" / "baseline.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"levels": [{"concurrency": 1, "output_tok_per_s": 123.0}]}\n')
    before = earlier.read_text()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        hosts, nodes, ports = {}, {}, {}
        for host, (mode, extra) in CASES.items():
            port = busy if host == "busy-port" else vllmkit.free_port()
            hostvars = vllmkit.node_vars(folder / host, port, mode=mode, **extra)["all"]["hosts"]["localhost"]
            hosts[host], nodes[host], ports[host] = hostvars, folder / host / "node", port
        run = vllmkit.run_playbook(folder, "bench.yml", kit.inventory(hosts),
                                   vllmkit.bench_vars(folder), timeout=1700)
        holder_alive = holder.fileno() >= 0
    out = {host: Refusal(run, host, CASES[host][0], nodes[host]) for host in CASES}
    yield out, {"busy_port": busy, "earlier": (earlier, before), "holder_alive": holder_alive, "ports": ports}
    for node in nodes.values():
        vllmkit.kill_recorded(node)


def serving_on(port: int) -> list[str]:
    """Command lines of live processes started to serve on ``port`` (vLLM's API server carries
    ``--port N``; its engine core is in the same session, which assert_refused checks by record)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and kit.alive(int(entry)):
            cmd = kit.command_line(int(entry))
            if f"--port {port}" in cmd or f"--port={port}" in cmd:
                found.append(cmd)
    return found


def assert_refused(refusal: Refusal, *fragments):
    assert refusal.run.rc != 0
    assert refusal.host in refusal.run.failed_hosts(), (refusal.host, refusal.run.failed_hosts())
    for fragment in fragments:
        assert fragment in refusal.text, (fragment, refusal.text[-3000:])
    assert not refusal.run.results_file(refusal.host, refusal.mode).exists()
    if refusal.record:
        assert not vllmkit.session_processes(refusal.record["pgid"])


def test_an_unknown_speculative_method_is_refused_by_the_installed_vllm(refusals):
    run = refusals[0]["bad-method"]
    assert_refused(run, "speculative method 'ngramm' is unknown to vLLM 0.32.0", "Did you mean ngram",
                   "vllm_server_modes")
    assert not list((run.node / "state").glob("**/*.json")), "a refused launch left a record"


def test_a_model_path_that_does_not_exist(refusals):
    assert_refused(refusals[0]["bad-model"], "the model /nonexistent/tiny-model does not exist on this node",
                   "set vllm_server_model_path")


def test_a_draft_model_with_another_vocabulary(refusals):
    assert_refused(refusals[0]["bad-draft"], "has a vocabulary of", "must share the target's tokenizer",
                   "vllm_server_draft_model_path")


def test_a_flag_the_installed_vllm_does_not_know(refusals):
    assert_refused(refusals[0]["bad-flag"], "--max-num-seqz is not a flag of vLLM 0.32.0",
                   "Did you mean --max-num-seqs", "vllm_server_extra_args")


def test_a_busy_port_stops_the_launch_and_leaves_the_holder_alone(refusals):
    found, extra = refusals
    port = extra["busy_port"]
    assert_refused(found["busy-port"], f"port {port} on 127.0.0.1 is already in use", "vllm_server_port")
    path, before = extra["earlier"]
    assert extra["holder_alive"] and path.read_text() == before
    assert not serving_on(port)


def test_no_host_measured_anything_and_none_left_a_server(refusals):
    found, extra = refusals
    for refusal in found.values():
        assert not refusal.run.results_file(refusal.host, refusal.mode).exists(), refusal.host
        port = extra["ports"][refusal.host]
        assert not serving_on(port), (refusal.host, serving_on(port))

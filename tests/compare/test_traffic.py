"""Weighed by real traffic (specbench_compare/traffic.py, traffic_prometheus.py): the expected gain on a
hand-computed example, unknown and outside traffic, bad inputs, Prometheus's query_range read from a
real HTTP server on loopback, and the gain interval's coverage by simulation (fixed seed)."""

from __future__ import annotations

import http.server
import json
import math
import random
import threading
import urllib.parse

import pytest

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp


def lv(conc, r, w=0.1, verdict="pays"):
    """A comparison row: speedup r with the symmetric log interval r * exp(+-w)."""
    return {"concurrency": conc, "speedup": r, "speedup_ci95": [r * math.exp(-w), r * math.exp(w)], "verdict": verdict}


SERIES = [lv(1, 2.0), lv(4, 1.5), lv(16, 0.8, verdict="loses")]
EVEN = [{"concurrency": c, "share": 1} for c in (1, 2, 8, 32)]


def test_the_gain_on_a_hand_computed_example():
    """Shares 1/4 each at C = 1, 2, 8, 32 over levels 1 (2.0x), 4 (1.5x), 16 (0.8x), each +-0.1 on the log scale.
    C=1: 2.0; C=2: halfway in log C from 1 to 4, 1.75; C=8: halfway from 4 to 16, 1.15; C=32: outside.
    Gain = (2.0 + 1.75 + 1.15) / 3 = 1.63333; level weights 1/2, 1/3, 1/6. se_j = r_j * 0.1 / 1.96, so
    se(G) = 0.1 / 1.96 * sqrt((2/2)^2 + (1.5/3)^2 + (0.8/6)^2) = 0.1 / 1.96 * 1.125956; the log half-width
    1.96 se / G = 0.068936 and the interval 1.63333 * exp(-+0.068936) = [1.5245, 1.7499]."""
    gain = cmp.traffic_gain(SERIES, cmp.parse_traffic(EVEN), "eagle3")
    assert gain["gain"] == pytest.approx(1.63333, abs=1e-4)
    assert gain["gain_ci95"] == pytest.approx([1.5245, 1.7499], abs=1e-4)
    assert gain["weights"] == {"1": 0.5, "4": 0.3333, "16": 0.1667}
    assert (gain["known_share"], gain["unknown_share"], gain["outside_share"], gain["above_share"]) == (0.75, 0, 0.25, 0.25)
    assert gain["verdict"] == "pays"
    assert "25% outside the measured range" in gain["text"] and "never extrapolated" in gain["text"]


def test_an_unclear_level_counts_with_its_uncertainty_and_a_failed_one_makes_its_traffic_unknown():
    """C=4 unclear (1.02 +-0.2 on the log scale): never dropped, it counts with its estimate and its width.
    C=1: 2.0; C=2: (2.0 + 1.02) / 2 = 1.51; C=8: (1.02 + 0.8) / 2 = 0.91; gain (2.0 + 1.51 + 0.91) / 3 = 1.47333
    (no baseline throughput in this series: weighed by time)."""
    series = [lv(1, 2.0), lv(4, 1.02, w=0.2, verdict="unclear"), lv(16, 0.8, verdict="loses")]
    gain = cmp.traffic_gain(series, cmp.parse_traffic(EVEN))
    assert (gain["known_share"], gain["unknown_share"], gain["outside_share"]) == (0.75, 0, 0.25)
    assert gain["gain"] == pytest.approx(1.47333, abs=1e-4) and gain["weighed"] == "time"
    sharp = cmp.traffic_gain([lv(1, 2.0), lv(4, 1.02), lv(16, 0.8, verdict="loses")], cmp.parse_traffic(EVEN))
    assert gain["gain_ci95"][1] / gain["gain_ci95"][0] > sharp["gain_ci95"][1] / sharp["gain_ci95"][0]
    failed = [lv(1, 2.0), {"concurrency": 4, "speedup": None, "speedup_ci95": None, "verdict": "failed"}]
    gain = cmp.traffic_gain(failed, cmp.parse_traffic([{"concurrency": 2, "share": 1}]))
    assert gain["gain"] is None and gain["verdict"] == "unknown" and gain["unknown_share"] == 1.0
    assert "no expected gain" in gain["text"]


def test_the_gain_is_by_tokens_served_so_a_busy_losing_level_outweighs_an_idle_paying_one():
    """Half the time at C=1 (1.3x, the baseline serves 100 tok/s), half at C=30 (0.8x, 1200 tok/s): speculation
    serves 0.5*100*1.3 + 0.5*1200*0.8 = 545 tokens a second where the baseline serves 650: 0.8385x, it loses
    (a time-weighted mean, (1.3 + 0.8) / 2 = 1.05, read "pays")."""
    series = [dict(lv(1, 1.3, w=0.02), baseline_tok_per_s=100.0),
              dict(lv(30, 0.8, w=0.02, verdict="loses"), baseline_tok_per_s=1200.0)]
    gain = cmp.traffic_gain(series, cmp.parse_traffic([{"concurrency": 1, "share": 1}, {"concurrency": 30, "share": 1}]))
    assert gain["weighed"] == "tokens" and gain["gain"] == pytest.approx(545 / 650, abs=1e-4)
    assert gain["verdict"] == "loses" and gain["weights"] == {"1": round(50 / 650, 4), "30": round(600 / 650, 4)}
    assert "tokens served" in gain["text"]


def test_a_served_schedule_series_is_read_by_its_ratio_fields():
    """Any series with ratio/ratio_ci95 (the served schedule's proof rows) weighs the same way."""
    rows = [{"concurrency": r["concurrency"], "ratio": r["speedup"], "ratio_ci95": r["speedup_ci95"],
             "verdict": r["verdict"]} for r in SERIES]
    assert cmp.traffic_gain(rows, cmp.parse_traffic(EVEN))["gain"] == pytest.approx(1.63333, abs=1e-4)


@pytest.mark.parametrize(("value", "words"), [
    (5, "non-empty list"),
    ([{"concurrency": 0, "share": 1}], "compare_traffic[0].concurrency must be a number above 0"),
    ([{"concurrency": 4, "share": -1}], "compare_traffic[0].share must be a number of 0 or more"),
    ([{"concurrency": 4, "share": 0}], "every share is 0"),
    ([{"concurrency": 4, "shares": 1}], "unknown key(s) shares"),
    ("not json", "must be JSON"),
    ({"start": 1, "end": 2}, "needs prometheus: URL"),
    ({"prometheus": "ftp://x", "start": 1, "end": 2}, "compare_traffic.prometheus must be the Prometheus server's"),
    ({"prometheus": "http://p:9090", "start": "yesterday", "end": 2}, "compare_traffic.start must be a Unix time"),
    ({"prometheus": "http://p:9090", "start": 5, "end": 2}, "must come before end"),
    ({"prometheus": "http://p:9090", "start": 1, "end": 2, "step": "soon"}, "compare_traffic.step must be"),
    ({"prometheus": "http://p:9090", "start": 0, "end": 86400, "step": 1}, "more than the 11000 points"),
    ({"prometheus": "http://p:9090", "start": 1, "end": 2, "when": 3}, "unknown key(s) when"),
])
def test_bad_traffic_is_refused_naming_the_field_and_the_fix(value, words):
    with pytest.raises(cmp.TrafficError) as err:
        cmp.check_traffic_input(value)
    assert words in str(err.value)


def test_shares_are_normalised_and_a_survey_json_string_is_read():
    got = cmp.check_traffic_input('[{"concurrency": 8, "share": 3}, {"concurrency": 1, "share": 1}]')
    assert got == [{"concurrency": 1, "share": 0.25}, {"concurrency": 8, "share": 0.75}]
    assert cmp.check_traffic_input([]) is None and cmp.check_traffic_input("") is None


class Prometheus(http.server.BaseHTTPRequestHandler):
    """Answers /api/v1/query_range as Prometheus documents it (a matrix of [time, "value"] pairs)."""

    answer: dict = {}
    status = 200
    seen: list = []

    def do_GET(self):  # noqa: N802 - the http.server hook
        url = urllib.parse.urlparse(self.path)
        type(self).seen.append((url.path, dict(urllib.parse.parse_qsl(url.query))))
        body = json.dumps(self.answer).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Prometheus.seen = []
    Prometheus.status = 200
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def matrix(*series):
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"instance": f"n{i}"}, "values": [[1000 + 60 * k, str(v)] for k, v in enumerate(values)]}
        for i, values in enumerate(series)]}}


def test_prometheus_history_is_read_and_binned_into_concurrency_shares(prometheus):
    """Two series (two DP ranks) summed per time: 1+0, 1+1, 2+2, 0+0, 3.6+0.1 -> C = 1, 2, 4, idle, 4 (rounded);
    the idle sample leaves the shares: 1/4 at C=1, 1/4 at 2, 1/2 at 4, and 20% idle."""
    Prometheus.answer = matrix([1, 1, 2, 0, 3.6], [0, 1, 2, 0, 0.1])
    spec = {"prometheus": prometheus, "start": 1000, "end": 1240, "step": 60}
    got = cmp.resolve_traffic(spec, "vllm")
    assert got["traffic"] == [{"concurrency": 1, "share": 0.25}, {"concurrency": 2, "share": 0.25},
                              {"concurrency": 4, "share": 0.5}]
    assert (got["samples"], got["idle_share"], got["source"]["kind"]) == (5, 0.2, "prometheus")
    path, query = Prometheus.seen[0]
    assert path == "/api/v1/query_range"
    assert query == {"query": "sum(vllm:num_requests_running)", "start": "1000", "end": "1240", "step": "60"}
    cmp.resolve_traffic(dict(spec, start="2026-11-30T00:00:00Z", end="2026-11-30T01:00:00Z", step="1m"), "sglang")
    assert Prometheus.seen[1][1]["query"] == "sum(sglang:num_running_reqs)"
    assert Prometheus.seen[1][1]["start"] == "2026-11-30T00:00:00Z"


def test_prometheus_failures_name_the_cause(prometheus):
    spec = {"prometheus": prometheus, "start": 1000, "end": 1240, "step": 60, "query": "up"}
    Prometheus.answer = {"status": "success", "data": {"resultType": "vector", "result": []}}
    with pytest.raises(cmp.TrafficError, match="not a range vector"):
        cmp.resolve_traffic(spec, "vllm")
    Prometheus.answer = matrix([0, 0])
    with pytest.raises(cmp.TrafficError, match="only idle samples"):
        cmp.resolve_traffic(spec, "vllm")
    Prometheus.status, Prometheus.answer = 400, {"status": "error", "error": "parse error"}
    with pytest.raises(cmp.TrafficError, match="answered 400"):
        cmp.resolve_traffic(spec, "vllm")
    closed = dict(spec, prometheus="http://127.0.0.1:9")
    with pytest.raises(cmp.TrafficError, match="cannot read"):
        cmp.resolve_traffic(closed, "vllm", timeout=2)


def batch_mean_estimate(rng: random.Random, truth: float, rel_sd: float, batches: int = 10):
    """A level's throughput as the client gives it: the mean of ``batches`` batch means and its t interval."""
    xs = [truth * (1 + rng.gauss(0.0, rel_sd)) for _dummy in range(batches)]
    mean = sum(xs) / batches
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (batches - 1))
    half = 2.262157 * sd / math.sqrt(batches)  # t(0.975, 9)
    return mean, [mean - half, mean + half]


def test_the_gain_interval_covers_the_interpolated_truth():
    """400 simulated comparisons (seed 23): levels C = 1, 2, 4, 8, 16, 32, true speedups from 2.2x falling to
    0.6x, each side 10 batch means with 3-8% noise per batch (the client's t intervals), the speedups' intervals
    by ratio_ci, traffic drawn at random over C = 1..40. The truth is sum_j a_j r_j(true) with the weights the
    gain used (the interpolated truth the interval claims). It must cover at least 90% of the time: a true 95%
    interval shows 95 +- 1.1% (one standard deviation, sqrt(0.95 * 0.05 / 400)) over 400 draws, so 90% is 4.6
    standard deviations below it; with the fixed seed the count is the same on every run."""
    rng = random.Random(23)
    levels = [1, 2, 4, 8, 16, 32]
    hits = n = 0
    for _dummy in range(400):
        truth = {c: 2.2 * (0.6 / 2.2) ** (math.log(c) / math.log(32)) * rng.uniform(0.95, 1.05) for c in levels}
        series = []
        for c in levels:
            base, base_ci = batch_mean_estimate(rng, 1000.0, rng.uniform(0.03, 0.08))
            spec, spec_ci = batch_mean_estimate(rng, 1000.0 * truth[c], rng.uniform(0.03, 0.08))
            ratio, ci = cmp.ratio_ci(spec, spec_ci, base, base_ci)
            series.append({"concurrency": c, "speedup": ratio, "speedup_ci95": ci,
                           "verdict": cmp.level_verdict(ratio, ci)})
        traffic = cmp.parse_traffic([{"concurrency": rng.randint(1, 40), "share": rng.random()} for _k in range(6)])
        gain = cmp.traffic_gain(series, traffic)
        if gain["gain"] is None:
            continue
        n += 1
        true_gain = sum(w * truth[int(float(c))] for c, w in gain["weights"].items())
        lo, hi = list(gain["gain_ci95"])
        hits += lo - 1e-4 <= true_gain <= hi + 1e-4
    assert n >= 300, n
    assert hits / n >= 0.90, (hits, n)

"""The emulator against a real SGLang, side by side, on everything specbench reads (issue 40, item 4).

    python3 tests/sglang_cpu/fidelity_diff.py --left http://127.0.0.1:30001 --left-name emulator \\
        --right http://127.0.0.1:30000 --right-name sglang [--left-log FILE --right-log FILE] \\
        [--source .venv-sglang/lib/python3.11/site-packages/sglang] [--json OUT]

Each side is a running server (a URL: loopback only) or, with --source, SGLang's installed package
read as text: what its code declares (metric names and types, SpecTokensDetails' fields, the
speculative figures meta_info gets, the readiness log lines). Items compared:

* endpoints: status and the key paths (with JSON types) of /health, /v1/models, /server_info (the
  keys specbench reads; the rest counted), /tokenize, /flush_cache;
* streams: the shape of every kind of chunk of /v1/chat/completions and /v1/completions (with
  continuous usage and return_spec_tokens_details, as the client asks) and of /generate's
  meta_info in its first, middle and last chunk;
* /metrics: the type of every sglang: metric, and whether the generated-token and verify-call
  counters move while a request runs or only when it finishes;
* processes (--left-pid/--right-pid, or found by the port): the server's tree, names and titles;
* logs (--left-log/--right-log): the lines the readiness check and the post-launch check read.

Prints one line per item: ``same``, ``DIFF`` or ``only left/right``, then a count. Exit 0 (a
report, not a test). Standard library only; sends a few short greedy requests to each server.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

READ_KEYS = ("version", "launch_command", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "speculative_adaptive", "max_running_requests", "tp_size", "dp_size",
             "internal_states", "model_path", "served_model_name", "enable_metrics", "decode_log_interval")
# Lines the readiness check (plugins/modules/sglang_ready.py: the server's log on failure) and the
# post-launch check (engines/sglang/postlaunch.py) read, as SGLang 0.5.23 writes them.
LOG_LINES = ("Uvicorn running on", "The server is fired up and ready to roll!", "speculative_adaptive disabled",
             "will fallback to torch_native backend")
COUNTERS = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total")


def shape(obj, prefix: str = "", depth: int = 3) -> list[str]:
    """Key paths with JSON types: ``choices[].delta.content:str``."""
    kind = {dict: "obj", list: "list", str: "str", bool: "bool", int: "int", float: "float", type(None): "null"}
    if isinstance(obj, dict) and depth:
        out = []
        for key in sorted(obj):
            out += shape(obj[key], f"{prefix}.{key}" if prefix else key, depth - 1)
        return out or [f"{prefix}:obj"]
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and depth:
        return shape(obj[0], prefix + "[]", depth)
    return [f"{prefix}:{kind.get(type(obj), type(obj).__name__)}"]


class Side:
    def __init__(self, url: str, api_key: str = ""):
        parts = urllib.parse.urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit(f"{url}: this script talks to loopback servers only")
        self.host, self.port, self.key = parts.hostname, parts.port or 80, api_key

    def call(self, method: str, path: str, body=None, timeout: float = 120.0):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            return None, str(exc).encode()
        finally:
            conn.close()

    def stream(self, path: str, body: dict, on_chunk=None) -> list[dict]:
        """The SSE chunks of a streamed POST, parsed; ``on_chunk(i)`` after each."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        chunks: list[dict] = []
        try:
            conn.request("POST", path, body=json.dumps(body), headers=headers)
            resp = conn.getresponse()
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"data: {"):
                    chunks.append(json.loads(line[6:]))
                    if on_chunk:
                        on_chunk(len(chunks))
        except (OSError, http.client.HTTPException, ValueError):
            pass  # what arrived is the answer: an empty list reads as a difference
        finally:
            conn.close()
        return chunks


def metrics(side: Side) -> dict:
    status, data = side.call("GET", "/metrics")
    out = {}
    if status != 200:
        return out
    for line in data.decode(errors="replace").splitlines():
        m = re.match(r"# TYPE (sglang:\S+) (\w+)", line)
        if m:
            out.setdefault("types", {})[m.group(1)] = m.group(2)
        elif line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            try:
                out.setdefault("values", {})[name] = out.get("values", {}).get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                pass
    return out


def chunk_kinds(chunks: list[dict]) -> list[str]:
    """Each distinct chunk shape in stream order, consecutive repeats folded."""
    kinds: list[str] = []
    for chunk in chunks:
        text = " ".join(shape(chunk))
        if not kinds or kinds[-1] != text:
            kinds.append(text)
    return kinds


def live(side: Side, model: str) -> dict:
    items: dict = {}
    for path in ("/health", "/v1/models", "/server_info"):
        status, data = side.call("GET", path)
        items[f"GET {path} status"] = status
        try:
            obj = json.loads(data) if data else None
        except ValueError:
            obj = None
        if path == "/v1/models" and isinstance(obj, dict):
            items["GET /v1/models shape"] = shape(obj)
            model = model or ((obj.get("data") or [{}])[0].get("id") or "")
        if path == "/server_info" and isinstance(obj, dict):
            items["GET /server_info keys specbench reads"] = sorted(k for k in obj if k in READ_KEYS)
            items["GET /server_info keys (count)"] = len(obj)
            states = obj.get("internal_states") or [{}]
            items["GET /server_info internal_states[0] shape"] = shape(states[0], depth=1)
            for key in READ_KEYS[2:7]:
                items[f"GET /server_info {key}"] = obj.get(key)
    status, data = side.call("POST", "/tokenize", {"model": model, "prompt": "the cat"})
    items["POST /tokenize shape"] = shape(json.loads(data)) if status == 200 else status
    words = " ".join(["the cat sat on the mat"] * 6)
    common = {"model": model, "max_tokens": 48, "temperature": 0, "ignore_eos": True, "stream": True,
              "stream_options": {"include_usage": True, "continuous_usage_stats": True},
              "return_spec_tokens_details": True}
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": words}]}),
                       ("/v1/completions", {"prompt": words})):
        chunks = side.stream(path, {**common, **body})
        items[f"POST {path} chunk kinds"] = chunk_kinds(chunks)
        ext = [c for c in chunks if "sglext" in c]
        items[f"POST {path} sglext.spec_tokens_details"] = \
            sorted((ext[0]["sglext"].get("spec_tokens_details") or {}).keys()) if ext else None
    before = metrics(side).get("values", {})
    mid: dict = {}

    def read_mid(i: int) -> None:
        if i == 4:
            mid.update(metrics(side).get("values", {}))
    chunks = side.stream("/generate", {"text": words, "stream": True,
                                       "sampling_params": {"max_new_tokens": 200, "temperature": 0, "ignore_eos": True}},
                         read_mid)
    time.sleep(0.5)
    after = metrics(side).get("values", {})
    for where, chunk in (("first", chunks[0] if chunks else {}), ("middle", chunks[len(chunks) // 2] if chunks else {}),
                         ("last", chunks[-1] if chunks else {})):
        items[f"POST /generate meta_info keys ({where} chunk)"] = sorted((chunk.get("meta_info") or {}).keys())
    for name in COUNTERS:
        if name in before and name in after:
            moved_mid = mid.get(name, before[name]) != before[name]
            items[f"/metrics {name} moves"] = ("while a request runs" if moved_mid else
                                               "when a request finishes" if after[name] != before[name] else "never")
    types = metrics(side).get("types", {})
    items["/metrics sglang: metric names and types"] = sorted(f"{k} {v}" for k, v in types.items())
    status, _unused = side.call("POST", "/flush_cache")
    items["POST /flush_cache status (idle)"] = status
    return items


def processes(pid: int | None, port: int | None) -> list[str] | None:
    """The tree under ``pid`` (or the process listening on ``port``): 'comm | argv[0..1]' each."""
    if pid is None and port:
        pid = listener(port)
    if pid is None:
        return None
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/comm", encoding="utf-8") as handle:
                comm = handle.read().strip()
            with open(f"/proc/{p}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        out.append(f"{comm} | {' '.join(a.decode(errors='replace') for a in argv[:3])}".strip())
        todo += children.get(p, [])
    return sorted(out)


def listener(port: int) -> int | None:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="utf-8") as handle:
                for line in handle.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(entry)
        except OSError:
            continue
    return None


def log_lines(path: str | None) -> list[str] | None:
    if not path:
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    return [line for line in LOG_LINES if line in text]


def source(package: str) -> dict:
    """What SGLang's own code declares, read as text from the installed package."""
    def read(rel: str) -> str:
        with open(os.path.join(package, rel), encoding="utf-8") as handle:
            return handle.read()
    items: dict = {}
    collector = read("srt/observability/metrics_collector.py")
    kinds = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}
    found = re.findall(r"(Counter|Gauge|Histogram|Summary)\(\s*name=\"(sglang:[^\"]+)\"", collector)
    items["/metrics sglang: metric names and types"] = sorted(f"{name} {kinds[k]}" for k, name in found)
    protocol = read("srt/entrypoints/openai/protocol.py")
    body = protocol.split("class SpecTokensDetails", 1)[1].split("\nclass ", 1)[0]
    fields = sorted(re.findall(r"^\s+(spec_\w+):", body, re.M))
    for path in ("/v1/chat/completions", "/v1/completions"):
        items[f"POST {path} sglext.spec_tokens_details"] = fields
    manager = read("srt/managers/tokenizer_manager.py")
    spec = sorted(set(re.findall(r"meta_info\[\"(spec_\w+)\"\]", manager)))
    items["POST /generate meta_info speculative keys (last chunk)"] = spec
    items["readiness log lines"] = [line for line in LOG_LINES[:2]
                                    if line in read("srt/entrypoints/http_server.py") or line.startswith("Uvicorn")]
    return items


METRICS_ITEM = "/metrics sglang: metric names and types"
DECLARED_ITEM = "/metrics names served but not declared by the source, or of another type"


def declared(items: dict, source_items: dict) -> dict:
    """A live side's metrics held against what the source declares: the names it serves that the
    source does not declare, or declares with another type (a live server registers only some of the
    declared ones, so the rest is no difference)."""
    served = items.get(METRICS_ITEM) or []
    known = dict(entry.split(" ", 1) for entry in source_items.get(METRICS_ITEM) or [])
    return {DECLARED_ITEM: sorted(e for e in served if known.get(e.split(" ", 1)[0]) != e.split(" ", 1)[1])}


def compare(left: dict, right: dict, names: tuple[str, str]) -> list[tuple[str, str, object, object]]:
    rows = []
    for key in sorted(set(left) | set(right)):
        if key not in right:
            rows.append((key, f"only {names[0]}", left[key], None))
        elif key not in left:
            rows.append((key, f"only {names[1]}", None, right[key]))
        else:
            rows.append((key, "same" if left[key] == right[key] else "DIFF", left[key], right[key]))
    return rows


def with_spec_keys(items: dict) -> dict:
    """A live side's /generate last-chunk speculative keys, for comparison with --source."""
    last = items.get("POST /generate meta_info keys (last chunk)")
    if isinstance(last, list):
        items["POST /generate meta_info speculative keys (last chunk)"] = sorted(k for k in last if k.startswith("spec_"))
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--left", required=True, help="the first server's URL (e.g. the emulator)")
    p.add_argument("--left-name", default="left")
    p.add_argument("--right", help="the second server's URL (e.g. a real SGLang)")
    p.add_argument("--right-name", default="right")
    p.add_argument("--source", help="SGLang's installed package folder: compare with what its code declares")
    p.add_argument("--left-pid", type=int)
    p.add_argument("--right-pid", type=int)
    p.add_argument("--left-log")
    p.add_argument("--right-log")
    p.add_argument("--model", default="")
    p.add_argument("--api-key", default="")
    p.add_argument("--json", help="write the rows here as JSON")
    args = p.parse_args(argv)
    sides = []
    for url, name, pid, log in ((args.left, args.left_name, args.left_pid, args.left_log),
                                (args.right, args.right_name, args.right_pid, args.right_log)):
        if not url:
            continue
        side = Side(url, args.api_key)
        items = with_spec_keys(live(side, args.model))
        items["processes"] = processes(pid, side.port)
        items["readiness log lines"] = log_lines(log)
        sides.append((name, items))
    if args.source:
        sides.append((f"source {os.path.basename(os.path.dirname(args.source.rstrip('/')))}", source(args.source)))
    if len(sides) < 2:
        raise SystemExit("give --right URL or --source PACKAGE_DIR: two sides to compare")
    (lname, left), (rname, right) = sides[0], sides[1]
    if args.source:
        src = sides[-1][1]
        for _name, items in sides[:-1]:
            items.update(declared(items, src))
        if len(sides) == 2:  # a server against the source: only what the source can say
            right = dict(src, **declared(src, src))
            right.pop(METRICS_ITEM, None)
            left = {k: v for k, v in left.items() if k in right}
        else:  # two servers, and the source's verdict on each
            print(f"source: {sides[0][0]}: {json.dumps(left[DECLARED_ITEM])}; {sides[1][0]}: "
                  f"{json.dumps(right[DECLARED_ITEM])}")
    rows = compare({k: v for k, v in left.items() if v is not None}, {k: v for k, v in right.items() if v is not None},
                   (lname, rname))
    for key, verdict, lv, rv in rows:
        print(f"{verdict:>14}  {key}")
        if verdict != "same":
            for label, value in ((lname, lv), (rname, rv)):
                if value is not None:
                    print(f"{'':16}{label}: {json.dumps(value)[:2000]}")
    diffs = sum(1 for row in rows if row[1] == "DIFF")
    alone = len(rows) - diffs - sum(1 for row in rows if row[1] == "same")
    print(f"fidelity_diff: {len(rows)} items, {len(rows) - diffs - alone} same, {diffs} differ, {alone} on one side only "
          f"({lname} against {rname})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([{"item": k, "verdict": v, lname: lv, rname: rv} for k, v, lv, rv in rows], handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

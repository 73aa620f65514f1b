"""Prompt sets (specbench_client/prompts.py): every format read into one record shape, every
malformed entry refused with its file, line and field, the built-in set, the seeded order every
mode and launch shares, and the output lengths under ``lengths: data``. No server, no timing."""
from __future__ import annotations

import json

import pytest
from benchlib import sc
from specbench_client import prompts as ps  # noqa: E402 - benchlib puts the package on the path
from specbench_client.request import RequestFactory  # noqa: E402

SHAREGPT = [
    {"id": "a", "category": "code", "conversations": [
        {"from": "human", "value": "Write a sort."}, {"from": "gpt", "value": "def sort(x): return sorted(x)"}]},
    {"id": "b", "conversations": [
        {"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hello there"}, {"from": "human", "value": "How are you?"}]},
]
CHAT = [
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4 is the answer"}],
     "category": "maths", "output_len": 7},
    {"messages": [{"role": "user", "content": "Tell me a story"}]},
]
PLAIN = [{"prompt": "one", "category": "chat"}, {"text": "two"}]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def jsonl(items):
    return "\n".join(json.dumps(i) for i in items) + "\n"


def test_each_format_is_read(tmp_path):
    records, fmt = ps.load(write(tmp_path, "s.json", json.dumps(SHAREGPT)))
    assert fmt == "sharegpt"
    assert records[0] == {"messages": [{"role": "user", "content": "Write a sort."}], "category": "code",
                          "reply_words": 4, "output_len": None}
    # multi-turn: the whole history up to the last user turn, roles mapped
    assert [m["role"] for m in records[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert records[1]["reply_words"] is None and records[1]["category"] is None
    records, fmt = ps.load(write(tmp_path, "s.jsonl", jsonl(SHAREGPT)))  # ShareGPT as JSONL too
    assert fmt == "sharegpt" and len(records) == 2
    records, fmt = ps.load(write(tmp_path, "c.jsonl", jsonl(CHAT)))
    assert fmt == "chat" and records[0]["category"] == "maths" and records[0]["output_len"] == 7
    assert records[0]["messages"] == [{"role": "user", "content": "2+2?"}] and records[0]["reply_words"] == 4
    records, fmt = ps.load(write(tmp_path, "p.jsonl", jsonl(PLAIN)))
    assert fmt == "prompt" and [r["messages"][0]["content"] for r in records] == ["one", "two"]
    # the format forced: a chat file read as plain is refused on its first line
    with pytest.raises(ps.PromptsError, match='line 1: field "prompt" is missing'):
        ps.load(write(tmp_path, "c2.jsonl", jsonl(CHAT)), "prompt")


@pytest.mark.parametrize(("text", "fmt", "message"), [
    ('{"prompt": "ok"}\n{"prompt": \n', "auto", "line 2 is not JSON"),
    ('{"prompt": "ok"}\n{"prompt": ""}\n', "auto", 'line 2: field "prompt" is missing or not a non-empty'),
    ('{"prompt": "ok", "category": 3}\n', "auto", 'line 1: field "category" is 3'),
    ('{"prompt": "ok", "output_len": 0}\n', "auto", 'line 1: field "output_len" is 0'),
    ('{"other": 1}\n', "auto", 'line 1 has no field "conversations"'),
    ('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": "x"}\n', "auto",
     'line 2: field "messages" is missing or not a list'),
    ('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"role": "robot", "content": "a"}]}\n',
     "auto", 'line 2: field "messages[0].role" is \'robot\''),
    ('{"messages": [{"role": "user"}]}\n', "auto", 'line 1: field "messages[0].content" is missing'),
    ('{"messages": [{"role": "assistant", "content": "a"}]}\n', "auto", 'line 1: field "messages" has no user turn'),
    ('{"messages": []}\n', "auto", 'line 1: field "messages" is empty'),
    ('[{"conversations": [{"from": "human", "value": "a"}]}, {"conversations": [{"from": "robot", "value": "a"}]}]', "auto",
     'entry 1: field "conversations[0].from"'),
    ('[{"conversations": [{"from": "human", "value": "a"}]}, {"conversations": [{"from": "human"}]}]', "auto",
     'entry 1: field "conversations[0].value" is missing'),
    ('[{"conversations": 1', "auto", "line 1 is not JSON"),
    ("\n\n", "auto", "holds no prompts"),
])
def test_malformed_entries_are_refused_with_line_and_field(tmp_path, text, fmt, message):
    path = write(tmp_path, "bad.jsonl", text)
    with pytest.raises(ps.PromptsError) as err:
        ps.load(path, fmt)
    assert message in str(err.value) and repr(path) in str(err.value)


def test_settings_name_the_role_variable_and_the_file(tmp_path):
    path = write(tmp_path, "bad.jsonl", '{"prompt": "ok"}\n{"prompt": 5}\n')
    with pytest.raises(sc.SettingsError, match=r"^bench_prompts_file: .*bad.jsonl' line 2: field \"prompt\""):
        sc.normalize_settings({"prompts_file": path}, label=lambda k: f"bench_{k}")
    with pytest.raises(sc.SettingsError, match="cannot be read"):
        sc.normalize_settings({"prompts_file": str(tmp_path / "missing.json")})
    with pytest.raises(sc.SettingsError, match="lengths is data, but no prompts are given"):
        sc.normalize_settings({"lengths": "data"}, label=str)
    with pytest.raises(sc.SettingsError, match="prompts_format is 'xml'"):
        sc.normalize_settings({"prompts_format": "xml"}, label=str)


def test_builtin_set():
    records, fmt = ps.load("builtin")
    names = ps.categories(records)
    assert fmt == "builtin"
    assert names == ["code", "maths", "summarisation", "translation", "open_chat", "retrieval"]
    assert all(sum(r["category"] == n for r in records) >= 12 for n in names)
    from specbench_client.prompts_builtin import OPENINGS
    for r in records:  # every prompt opens with its category's words (what the emulator reads)
        assert r["messages"][0]["content"].startswith(OPENINGS[r["category"]])
    long = [len(r["messages"][0]["content"].split()) for r in records if r["category"] == "retrieval"]
    assert min(long) > 500  # retrieval-style: long input
    s = sc.normalize_settings({"prompts_file": "builtin"})
    public = sc.public_settings(s)
    assert public["prompts_source"] == "builtin" and public["prompt_set"]["count"] == 72


def factory(api, seed=42, prompts=None, lengths="fixed"):
    s = sc.normalize_settings({"api": api, "seed": seed, "prompts_file": "builtin" if prompts is None else "",
                               "prompts": prompts, "lengths": lengths, "output_len": 64})
    return RequestFactory(s, "m", "127.0.0.1", 1, "")


def test_same_prompts_same_order_for_every_mode_and_launch():
    """Request k of a level takes the k-th record of the seed's order: two factories (two modes,
    two launches, two APIs) give the same sequence; another seed another one."""
    def texts(f, n=200):
        return [ps.flatten(f.record(k)["messages"]) for k in range(n)]
    first = texts(factory("chat"))
    assert first == texts(factory("completions")) == texts(factory("native"))
    assert first == texts(factory("chat"))  # a second launch
    assert first != texts(factory("chat", seed=7))
    assert sorted(set(first)) == sorted(set(texts(factory("chat", seed=7))))  # same prompts, other order
    # worker processes share the sequence: worker w of W takes k = counter x W + w
    workers = 3
    interleaved = [None] * 60
    for w in range(workers):
        for counter in range(20):
            interleaved[counter * workers + w] = first[counter * workers + w]
    assert interleaved == first[:60]


def test_multi_turn_on_each_api():
    records = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye?"}]}]
    chat = factory("chat", prompts=records)
    assert chat.body(chat.prompt("k", 0), 8)["messages"] == records[0]["messages"]
    comp = factory("completions", prompts=records)
    assert comp.body(comp.prompt("k", 0), 8)["prompt"] == (
        "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello\n\nUser: Bye?\n\nAssistant:")
    native = factory("native", prompts=records)
    assert native.body(native.prompt("k", 0), 8)["text"].endswith("User: Bye?\n\nAssistant:")


def test_lengths_data_and_fixed():
    records = [{"messages": [{"role": "user", "content": "a"}], "output_len": 10},
               {"messages": [{"role": "user", "content": "b"}], "output_len": 500},
               "plain prompt"]
    data = factory("chat", prompts=records, lengths="data")
    by_text = {data.prompt("k", k)[0]["content"]: data.output_len_of(k) for k in range(3)}
    assert by_text == {"a": 10, "b": 64, "plain prompt": 64}  # own length, capped at output_len 64
    fixed = factory("chat", prompts=records)
    assert {fixed.output_len_of(k) for k in range(3)} == {64}
    assert ps.output_len_of({"reply_words": 30}, "data", 256) == 40  # ceil(30 x 4/3)


def test_categories_separate_runs_every_level_once_per_category():
    records = [{"messages": [{"role": "user", "content": t}], "category": c}
               for t, c in (("a", "code"), ("b", "chat"), ("c", "code"))]
    s = sc.normalize_settings({"prompts": records, "categories": "separate", "concurrency": [1, 4]})
    seen = []

    def measure(concurrency, run_settings):
        seen.append((concurrency, [r["messages"][0]["content"] for r in run_settings["prompts"]]))
        return {"concurrency": concurrency, "error": None}

    levels = sc.sweep(s, {}, measure=measure)
    assert seen == [(1, ["a", "c"]), (4, ["a", "c"]), (1, ["b"]), (4, ["b"])]
    assert [lv["category"] for lv in levels] == ["code", "code", "chat", "chat"]
    with pytest.raises(sc.SettingsError, match="categories is separate, but no prompts are given"):
        sc.normalize_settings({"categories": "separate"}, label=str)


def test_every_stretch_of_the_order_holds_the_categories_in_proportion():
    """Categories spread evenly: any k consecutive requests of the built-in set (6 categories of
    12) hold each category k / 6 times give or take one (so counts differ by at most 2)."""
    seq = [r["category"] for r in ps.order(ps.load("builtin")[0], 42)]
    for size in (6, 12, 30):
        for start in range(0, len(seq) - size + 1):
            window = seq[start:start + size]
            counts = [window.count(name) for name in set(seq)]
            assert max(counts) - min(counts) <= 2 and min(counts) >= size // 6 - 1, (size, start, counts)
    skewed = [{"messages": [{"role": "user", "content": str(i)}], "category": "a" if i < 30 else "b"}
              for i in range(40)]
    first = [r["category"] for r in ps.order(skewed, 1)[:8]]
    assert first.count("b") == 2  # 10 of 40: a quarter of any stretch

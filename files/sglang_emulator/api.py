"""SGLang's HTTP API: routes, auth, request parsing and response shapes.

Shapes follow SGLang 0.5.23 (../shared/docs/sglang.md): OpenAI chat and completions with
SSE chunks and the usage chunk (in every chunk with continuous_usage_stats), the native /generate
with meta_info, /server_info (and the deprecated /get_server_info) with internal_states per DP
rank, /tokenize, /flush_cache, /metrics. Prompt length is counted in whitespace-separated words
(a chat template adds 3 tokens per message plus 1, as a real template adds tokens);
every output token is one word, so clients can count what a chunk carries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid

from sglang_emulator import REPORTED_VERSION, gpus, model
from sglang_emulator.engine import VOCAB, QueueFull, Request
from sglang_emulator.profiles import category_of

LOG = logging.getLogger("sglang")
AUTH_EXEMPT = ("/health", "/ready", "/metrics")


def error(message: str, code: int = 400, err_type: str = "BadRequestError") -> dict:
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def words(text: str) -> int:
    return len(text.split())


def detok(ids: list[int]) -> str:
    return "".join(" " + VOCAB[i] for i in ids)


class BadRequest(Exception):
    pass


# -- sinks: how tokens reach each API's client -----------------------------------------------
class Sink:
    def __init__(self, resp, stream: bool):
        self.resp = resp
        self.stream = stream
        self.done = asyncio.get_running_loop().create_future()

    def on_tokens(self, req: Request, new_ids: list[int]) -> None:
        if self.stream and new_ids:
            try:
                self.resp.chunk(b"data: " + json.dumps(self.chunk(req, new_ids)).encode() + b"\n\n")
            except ConnectionError:
                self._finish()
                raise

    def on_finish(self, req: Request) -> None:
        if self.stream:
            try:
                for body in self.closing_chunks(req):
                    self.resp.chunk(b"data: " + json.dumps(body).encode() + b"\n\n")
                self.resp.chunk(b"data: [DONE]\n\n")
            except ConnectionError:
                pass
        self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def chunk(self, req, new_ids):  # pragma: no cover - overridden
        raise NotImplementedError

    def closing_chunks(self, req):
        return []


def spec_details(req: Request, spec) -> dict:
    """A finished request's speculative figures as SGLang 0.5.23 puts them in meta_info
    (srt/managers/tokenizer_manager.py, _calculate_spec_decoding_metrics: only once the request
    has finished, only under speculation, only after a verify step; proposed drafts count the
    server's draft tokens less the bonus one, the accept length divides every output token,
    the prefill's first included). The OpenAI APIs return the same as
    sglext.spec_tokens_details (srt/entrypoints/openai/utils.py, spec_tokens_details_from_meta_info)."""
    if not spec or not req.verify_ct:
        return {}
    proposed = req.verify_ct * (spec.num_draft_tokens - 1)
    correct = req.spec_accepted - req.verify_ct
    out = {"spec_verify_ct": req.verify_ct, "spec_num_correct_drafts": correct}
    if proposed > 0:
        out.update(spec_accept_rate=correct / proposed, spec_accept_length=len(req.generated) / req.verify_ct,
                   spec_num_proposed_drafts=proposed)
    if req.spec_hist:
        out["spec_correct_drafts_histogram"] = list(req.spec_hist)
    return out


def spec_tokens_details(req: Request, spec) -> dict | None:
    """sglext.spec_tokens_details (srt/entrypoints/openai/protocol.py, SpecTokensDetails: every
    field, zero or empty where meta_info had none); None without speculative figures."""
    found = spec_details(req, spec)
    if not found:
        return None
    return {"spec_accept_rate": found.get("spec_accept_rate") or 0.0,
            "spec_accept_length": found.get("spec_accept_length") or 0.0,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": found.get("spec_num_correct_drafts") or 0,
            "spec_num_proposed_drafts": found.get("spec_num_proposed_drafts") or 0,
            "spec_verify_ct": found["spec_verify_ct"],
            "spec_correct_drafts_histogram": found.get("spec_correct_drafts_histogram") or [],
            "spec_cap_lens_histogram": []}


class OpenAISink(Sink):
    def __init__(self, resp, stream, model_name, chat, include_usage, prompt_tokens):
        super().__init__(resp, stream)
        self.model = model_name
        self.chat = chat
        self.include_usage = include_usage
        self.prompt_tokens = prompt_tokens
        self.id = uuid.uuid4().hex
        self.created = int(time.time())
        self.sent_role = False
        self.continuous = False  # stream_options.continuous_usage_stats: usage in every chunk
        self.return_token_ids = False  # return_token_ids: the output's ids in the unstreamed answer
        # return_spec_tokens_details: the engine's speculative settings, else None
        self.spec_details_of = None

    def _envelope(self, choice: dict) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": None,
        }

    def chunk(self, req, new_ids):
        text = detok(new_ids)
        if self.chat:
            delta = {"content": text}
            if not self.sent_role:
                delta = {"role": "assistant", "content": text}
                self.sent_role = True
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "matched_stop": None}
        out = self._envelope(choice)
        if self.continuous:  # srt/entrypoints/openai/serving_chat.py and serving_completions.py
            out["usage"] = self.usage(req)
        return out

    def usage(self, req) -> dict:
        n = len(req.generated)
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + n,
            "completion_tokens": n,
            "prompt_tokens_details": None,
        }

    def closing_chunks(self, req):
        if self.chat:
            last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": req.finish_reason, "matched_stop": None}
        else:
            last = {"index": 0, "text": "", "logprobs": None, "finish_reason": req.finish_reason, "matched_stop": None}
        out = [self._envelope(last)]
        if self.continuous:
            out[0]["usage"] = self.usage(req)
        details = spec_tokens_details(req, self.spec_details_of) if self.spec_details_of else None
        if details:
            # After the finish chunk, before the usage chunk: one chunk with no choices and the
            # response-level sglext (serving_chat.py and serving_completions.py, the stream's end).
            out.append(dict(self._envelope(last), choices=[], sglext={"spec_tokens_details": details}))
        if self.include_usage:
            out.append(dict(self._envelope(last), choices=[], usage=self.usage(req)))
        return out

    def full(self, req) -> dict:
        text = detok(req.generated)
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "matched_stop": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason, "matched_stop": None}
        if self.return_token_ids:
            # srt/entrypoints/openai/serving_chat.py: choices[].response_token_ids (chat);
            # serving_completions.py: choices[].token_ids (completions)
            choice["response_token_ids" if self.chat else "token_ids"] = list(req.generated)
        out = {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(req),
        }
        details = spec_tokens_details(req, self.spec_details_of) if self.spec_details_of else None
        if details:  # serving_chat.py / serving_completions.py: sglext at the response level
            out["sglext"] = {"spec_tokens_details": details}
        return out


class NativeSink(Sink):
    def __init__(self, resp, stream, spec, prompt_tokens):
        super().__init__(resp, stream)
        self.spec = spec
        self.prompt_tokens = prompt_tokens

    def meta(self, req, final: bool) -> dict:
        n = len(req.generated)
        info = {
            "id": req.rid,
            "finish_reason": None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": n,
            "cached_tokens": 0,
        }
        if final:
            # The speculative figures come with the finished request only (spec_details).
            info.update(spec_details(req, self.spec))
            if req.finish_reason == "length":
                info["finish_reason"] = {"type": "length", "length": req.max_new}
            else:
                info["finish_reason"] = {"type": "stop", "matched": 2}
            info["e2e_latency"] = req.finished_at - req.created
        return info

    def chunk(self, req, new_ids):
        final = req.finished_at is not None
        return {"text": detok(req.generated), "output_ids": list(req.generated), "meta_info": self.meta(req, final)}

    def on_tokens(self, req, new_ids):
        if req.finished_at is not None and self.stream:
            return  # the last tokens go out in the final chunk, with finish_reason
        super().on_tokens(req, new_ids)

    def closing_chunks(self, req):
        return [self.chunk(req, [])]

    def full(self, req) -> dict:
        return self.chunk(req, [])


class HealthSink(Sink):
    def __init__(self):
        super().__init__(None, False)


# -- the routes --------------------------------------------------------------------------------
class Api:
    def __init__(self, cfg, engine, metrics, state):
        self.cfg = cfg
        self.args = cfg["args"]
        self.engine = engine
        self.metrics = metrics
        self.state = state  # .status: starting | ready | shutting_down; .crash()
        self.model_name = cfg["served_model_name"]
        self.generation_requests = 0
        self.routes = {
            ("GET", "/health"): self.health,
            ("GET", "/health_generate"): self.health,
            ("GET", "/ready"): self.ready,
            ("GET", "/v1/models"): self.models,
            ("GET", "/get_model_info"): self.model_info,
            ("GET", "/model_info"): self.model_info,
            ("GET", "/get_server_info"): self.get_server_info,
            ("GET", "/server_info"): self.server_info,
            ("GET", "/flush_cache"): self.flush_cache,
            ("POST", "/flush_cache"): self.flush_cache,
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/generate"): self.generate,
            # srt/entrypoints/http_server.py: both paths, TokenizeRequest/TokenizeResponse of
            # srt/entrypoints/openai/protocol.py (vLLM's shapes).
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/v1/tokenize"): self.tokenize,
            ("GET", "/emulator/analytic"): self.analytic,
            ("GET", "/emulator/counters"): self.counters,
        }
        if self.args.enable_metrics:
            self.routes[("GET", "/metrics")] = self.prom

    async def dispatch(self, req, resp) -> None:
        handler = self.routes.get((req.method, req.path))
        if handler is None:
            known = any(route[1] == req.path for route in self.routes)
            resp.send(405 if known else 404, {"detail": "Method Not Allowed" if known else "Not Found"})
            return
        key = self.args.api_key
        if key and not req.path.startswith(AUTH_EXEMPT):
            if req.headers.get("authorization", "") != f"Bearer {key}":
                resp.send(401, {"error": "Unauthorized"})
                return
        starting_ok = ("/get_server_info", "/server_info")
        if self.state.status != "ready" and not req.path.startswith(AUTH_EXEMPT) and req.path not in starting_ok:
            resp.send(503, error("The server is not ready yet.", 503, "ServiceUnavailableError"))
            return
        try:
            await handler(req, resp)
        except BadRequest as exc:
            if resp.streaming:
                resp.end_stream()
            else:
                resp.send(400, error(str(exc)))

    # health and info
    async def health(self, req, resp):
        if self.state.status != "ready":
            resp.send(503, b"", "text/plain")
            return
        sink = HealthSink()
        self.engine.submit(self.engine.new_request(4, 1, True, sink))
        try:
            await asyncio.wait_for(asyncio.shield(sink.done), 20)
        except TimeoutError:
            resp.send(503, b"", "text/plain")
            return
        resp.send(200 if self.state.status == "ready" else 503, b"", "text/plain")

    async def ready(self, req, resp):
        resp.send(200 if self.state.status == "ready" else 503, {"status": self.state.status})

    async def models(self, req, resp):
        resp.send(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": int(self.state.started),
                        "owned_by": "sglang",
                        "root": self.model_name,
                        "parent": None,
                        "max_model_len": self.cfg["context_length"],
                    }
                ],
            },
        )

    async def model_info(self, req, resp):
        prof = self.cfg["profile"]
        resp.send(
            200,
            {
                "model_path": self.args.model_path,
                "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
                "served_model_name": self.model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": None,
                "architectures": prof["architectures"],
            },
        )

    async def get_server_info(self, req, resp):
        # Deprecated in 0.5.23: a warning on every call (srt/entrypoints/http_server.py).
        LOG.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        await self.server_info(req, resp)

    def _internal_state(self, rank: int) -> dict:
        """One DP rank's entry of internal_states; avg_spec_accept_length only once the decode log
        has folded a speculative step (srt/managers/scheduler_components/internal_state.py)."""
        state = {
            "last_gen_throughput": self.engine.last_gen_throughput,
            "effective_max_running_requests_per_dp": self.cfg["max_running_requests"],
            "memory_usage": self.cfg["memory_usage"],
            "dp_rank": rank,
        }
        accept = self.engine.rank_accept_length(rank) if self.engine.spec else None
        if accept is not None:
            state["avg_spec_accept_length"] = accept
        return state

    async def server_info(self, req, resp):
        info = dict(self.cfg["server_args"])
        info.update(
            {
                "version": REPORTED_VERSION,
                "launch_command": self.cfg["launch_command"],
                "startup_time": self.state.started,
                "status": self.state.status,
                "max_running_requests": self.cfg["max_running_requests"],
                "internal_states": [self._internal_state(rank) for rank in range(self.engine.ranks)],
                "emulator": {
                    "profile": self.cfg["profile_name"],
                    "time_scale": self.args.emulator_time_scale,
                    "seed": self.args.emulator_seed,
                    "launch_sd": getattr(self.args, "emulator_launch_sd", 0.0),
                    "launch_factor": getattr(self.args, "emulator_launch_factor", 1.0),
                    "pid": os.getpid(),
                    # where a client on the node reads this server's GPUs' power and energy
                    "device_dir": self.args.emulator_device_dir,
                    "gpus": gpus.rank_gpus(self.args.tp_size) if self.args.emulator_device_dir else [],
                },
            }
        )
        resp.send(200, info)

    async def flush_cache(self, req, resp):
        if self.engine.busy():
            resp.send(
                400,
                "Cache not flushed. Please check backend logs for more details. (When there are running "
                "or waiting requests, the operation will not be performed.)",
                "text/plain",
            )
            return
        self.engine.flush()
        resp.send(
            200,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
            "waiting requests, the operation will not be performed.)",
            "text/plain",
        )

    async def prom(self, req, resp):
        resp.send(200, self.metrics.render(self.engine, self.model_name), "text/plain; version=0.0.4; charset=utf-8")

    async def counters(self, req, resp):
        """The emulator's own per-step counters (SGLang's generation counter moves only when a
        request finishes): ``generated_tokens`` counts every token as it is emitted;
        ``decode_batch_sum`` the requests in each decode step, summed; ``schedule_lost_s`` and
        ``lag_resyncs`` the schedule time given up and how often; ``behind_s`` how late the schedule
        runs now (caught up while busy); ``idle_s`` the wall-clock seconds with nothing to run,
        the current stretch included; ``scheduled_s`` the modelled seconds of every step emitted;
        ``monotonic_s`` the instant they were read (CLOCK_MONOTONIC, the same clock across the
        machine's processes). A window's rise in scheduled_s is the time the engine ran its modelled
        schedule: its rise in monotonic_s less its rise in idle, lost and behind, except that
        behind_s is as of the last wake (a stall the loop has not woken from yet is in none of them)."""
        engine = self.engine
        now = time.monotonic()
        idle = engine.idle_s + (now - engine.idle_since if engine.idle_since is not None else 0.0)
        resp.send(200, {"monotonic_s": now, "generated_tokens": engine.emitted_tokens, "decode_steps": engine.decode_steps,
                        "decode_batch_sum": engine.decode_batch_sum,
                        "schedule_lost_s": round(engine.schedule_lost_s, 6), "lag_resyncs": engine.lag_resyncs,
                        "behind_s": round(engine.behind_s, 6), "idle_s": round(idle, 6),
                        "scheduled_s": round(engine.scheduled_s, 6)})

    async def analytic(self, req, resp):
        try:
            conc = int(req.query.get("concurrency", ["1"])[0])
            in_len = int(req.query.get("input_len", ["256"])[0])
            out_len = int(req.query.get("output_len", ["256"])[0])
            if conc < 1 or in_len < 0 or out_len < 1:
                raise ValueError
        except ValueError:
            resp.send(400, error("concurrency >= 1, input_len >= 0 and output_len >= 1 are integers"))
            return
        truth = model.steady_state(
            self.cfg["costs"],
            self.cfg["spec"],
            conc,
            in_len,
            out_len,
            self.cfg["max_running_requests"],
            self.cfg["kv_capacity_tokens"],
        )
        # This launch's own model: the time scale and its launch speed factor (--emulator-launch-sd).
        factor = getattr(self.args, "emulator_launch_factor", 1.0) or 1.0
        scale = self.args.emulator_time_scale * factor
        truth["model_output_tok_per_s"] = truth["output_tok_per_s"]
        truth["output_tok_per_s"] = truth["output_tok_per_s"] / scale
        truth["request_per_s"] = truth["request_per_s"] / scale
        truth["per_stream_tok_per_s"] = truth["per_stream_tok_per_s"] / scale
        truth["step_s"] = truth["step_s"] * scale
        truth["prefill_s"] = truth["prefill_s"] * scale
        truth.update(time_scale=self.args.emulator_time_scale, launch_factor=round(factor, 6),
                     input_len=in_len, output_len=out_len, profile=self.cfg["profile_name"])
        resp.send(200, truth)

    # generation
    def _body(self, req) -> dict:
        try:
            body = req.json()
        except ValueError as exc:
            raise BadRequest(f"Invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        return body

    def _check_len(self, prompt_tokens: int, max_new: int | None) -> None:
        if max_new is not None and (not isinstance(max_new, int) or max_new < 1):
            raise BadRequest("max_tokens must be a positive integer.")
        ctx = self.cfg["context_length"]
        if prompt_tokens + (max_new or 0) > ctx:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested a "
                f"total of {prompt_tokens + (max_new or 0)} tokens: {prompt_tokens} tokens from the input messages and "
                f"{max_new or 0} tokens for the completion. Please reduce the number of tokens in the input messages "
                "or the completion to fit within the limit."
            )

    async def _run(self, resp, sink, prompt_tokens, max_new, ignore_eos, full, prompt=None, text: str = "") -> None:
        self.generation_requests += 1
        crash_after = self.args.emulator_crash_after
        if crash_after is not None and self.generation_requests > crash_after:
            self.state.crash(f"emulated crash after {crash_after} requests")
        self.metrics.requests += 1
        # The request's category, from its own text (profiles.category_of): what a real server sees.
        request = self.engine.new_request(prompt_tokens, max_new, ignore_eos, sink, prompt, category_of(text))
        try:
            self.engine.submit(request)
        except QueueFull as exc:
            resp.send(503, error(str(exc), 503, "ServiceUnavailableError"))
            return
        if self.args.log_requests:
            LOG.info(
                "Receive: obj=GenerateReqInput(rid=%s, prompt_tokens=%d, max_new_tokens=%s)", request.rid, prompt_tokens, max_new
            )
        if sink.stream:
            resp.start_stream()
        await sink.done
        if sink.stream:
            resp.end_stream()
        else:
            resp.send(200, full(request))

    async def _openai(self, req, resp, chat: bool):
        body = self._body(req)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list.")
            prompt_tokens = self._chat_tokens(messages)
            users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            text = users[0] if users and isinstance(users[0], str) else ""
        else:
            prompt = body.get("prompt")
            text = prompt if isinstance(prompt, str) else ""
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                prompt_tokens = len(prompt)
            elif isinstance(prompt, str):
                prompt_tokens = words(prompt)
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt_tokens = words(prompt[0])
            else:
                raise BadRequest("prompt must be a string or a list of token ids.")
        max_new = body.get("max_completion_tokens", body.get("max_tokens"))
        self._check_len(prompt_tokens, max_new)
        stream = bool(body.get("stream", False))
        opts = body.get("stream_options") or {}
        # srt/entrypoints/openai/utils.py, should_include_usage: continuous_usage_stats only
        # inside stream_options; include_usage or the server default.
        include_usage = bool(opts.get("include_usage") or self.args.stream_response_default_include_usage)
        sink = OpenAISink(resp, stream, body.get("model") or self.model_name, chat, include_usage, prompt_tokens)
        sink.continuous = bool(opts.get("continuous_usage_stats"))
        sink.return_token_ids = bool(body.get("return_token_ids"))
        if body.get("return_spec_tokens_details"):
            sink.spec_details_of = self.engine.spec
        prompt = json.dumps(body.get("messages") if chat else body.get("prompt"), sort_keys=True)
        await self._run(resp, sink, prompt_tokens, max_new, bool(body.get("ignore_eos", False)), sink.full, prompt,
                        text)

    async def tokenize(self, req, resp):
        """POST /tokenize: {"model", "prompt"} or {"model", "messages"} -> {"tokens", "count",
        "max_model_len"}; counted as the generation endpoints count a prompt (words, and the chat
        template's tokens for messages)."""
        body = self._body(req)
        if isinstance(body.get("messages"), list):
            count = self._chat_tokens(body["messages"])
        elif isinstance(body.get("prompt"), str):
            count = words(body["prompt"])
        elif isinstance(body.get("prompt"), list) and all(isinstance(p, str) for p in body["prompt"]):
            counts = [words(p) for p in body["prompt"]]
            resp.send(200, {"tokens": [[0] * n for n in counts], "count": counts,
                            "max_model_len": self.cfg["context_length"]})
            return
        else:
            raise BadRequest("Either prompt or messages should be provided.")
        known = {w: i for i, w in enumerate(VOCAB)}
        ids = [known.get(w, 0) for w in body["prompt"].split()] if "prompt" in body else [0] * count
        resp.send(200, {"tokens": ids, "count": count, "max_model_len": self.cfg["context_length"]})

    @staticmethod
    def _chat_tokens(messages: list) -> int:
        """A chat prompt's tokens: 1, plus 3 and the content's words per message (the template)."""
        return 1 + sum(
            3 + words(m.get("content") or "") if isinstance(m.get("content"), str) else 3
            for m in messages
            if isinstance(m, dict)
        )

    async def chat(self, req, resp):
        await self._openai(req, resp, True)

    async def completions(self, req, resp):
        await self._openai(req, resp, False)

    async def generate(self, req, resp):
        body = self._body(req)
        if isinstance(body.get("input_ids"), list):
            prompt_tokens = len(body["input_ids"])
        elif isinstance(body.get("text"), str):
            prompt_tokens = words(body["text"])
        else:
            raise BadRequest("Either text or input_ids should be provided.")
        params = body.get("sampling_params") or {}
        max_new = params.get("max_new_tokens", 128)
        self._check_len(prompt_tokens, max_new)
        sink = NativeSink(resp, bool(body.get("stream", False)), self.engine.spec, prompt_tokens)
        prompt = json.dumps(body.get("input_ids") if isinstance(body.get("input_ids"), list) else body.get("text"))
        await self._run(resp, sink, prompt_tokens, max_new, bool(params.get("ignore_eos", False)), sink.full, prompt,
                        body.get("text") if isinstance(body.get("text"), str) else "")

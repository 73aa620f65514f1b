# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The request side of the transport and the tally: one epoll loop per worker process.

C streams, each a keep-alive HTTP/1.1 connection that sends its next request the moment the
previous one ends (closed loop); the window opens once every stream has finished a request
after the warmup. Each read is stamped with the kernel's receive time (SO_TIMESTAMPNS, moved
onto the monotonic clock). Responses are read by http1.ResponseReader; every finished request
is tallied here into fine time bins and latency lists (``_account``).
"""
from __future__ import annotations

import errno
import heapq
import json
import math
import os
import random
import resource
import select
import socket
import struct
import time
from array import array

from .apis import ADAPTERS
from .http1 import BODY, CONNECTING, HEAD, IDLE, SENDING, ResponseReader, Stream
from .request import Req, RequestFactory
from .settings import parse_base_url
from .summary import window_interval

__all__ = ["BODY", "CONNECTING", "HEAD", "IDLE", "SENDING", "Req", "Stream", "Worker", "arrival", "snap"]

READ_SIZE = 256 * 1024
PROGRESS_EVERY_S = 1.0  # how often a worker rewrites its progress file (when asked to)
ADAPT_BINS = 250  # an adaptive window judges its interval on at most this many bins (a few ms a check)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it
_TIMESPEC = struct.Struct("@ll")  # struct timespec


def arrival(t: float, stamp: float, wall_now: float, sent: float | None, prev: float | None) -> float:
    """When a read's data reached the socket, on the monotonic clock: the kernel's CLOCK_REALTIME
    ``stamp`` moved by the wall clock's offset read now (``wall_now`` at monotonic ``t``, the read's
    time), so a step of the wall clock (NTP, a paused VM resuming) misplaces at most the data that
    arrived before it and was read after. A stamp not in the 30 s before the read, or before its
    request was sent (``sent``), is such data, and keeps the read time ``t``. Never before the
    request's previous token-carrying read (``prev``): a read that came without a stamp, or whose
    stamp was refused, was timed when it was read, and a later read's stamp can fall before that
    (seen beside the suite at C=1: a request's chunks out of order, and the worker's binning of them
    raised IndexError)."""
    tk = stamp - (wall_now - t)
    if not t - 30.0 < tk < t or (sent is not None and tk < sent):
        return t
    return tk if prev is None or tk >= prev else prev


def snap(t: float, t0: float, bin_w: float) -> float:
    """``t`` rounded down to the fine-bin grid that starts at ``t0`` (so the request a stream
    sends right after the window opens is measured)."""
    return t0 + math.floor((t - t0) / bin_w + 1e-9) * bin_w


class Worker(ResponseReader):
    """One process's share of a level's streams, on one epoll loop."""

    def __init__(self, plan: dict, stream_ids: list[int], ctrl_fd: int = -1, status_fd: int = -1):
        self.plan = plan
        self.ctrl_fd = ctrl_fd  # parent -> worker: the window's start, once every worker is ready
        self.status_fd = status_fd  # worker -> parent: ready (and, at the end, the result)
        settings = plan["settings"]
        self.settings = settings
        self.api = settings["api"]
        host, port, prefix = parse_base_url(settings["base_url"])
        self.addr_text = f"{host}:{port}"
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        self.family, self.sockaddr = infos[0][0], infos[0][4]
        self.factory = RequestFactory(settings, plan["model"], host, port, prefix)
        self.timeout = settings["request_timeout_s"]
        self.output_len = settings["output_len"]
        # Given prompts: request k of the level (k counted over its worker processes, this one's
        # counter x workers + its index) takes the k-th prompt of the seeded order.
        self.widx, self.nworkers = plan.get("widx", 0), plan.get("nworkers", 1)
        self.t0 = plan["t0"]
        self.min_ws = plan["t0"] + settings["warmup_s"]
        self.window_s = settings["window_s"]
        # Adaptive window (level.adaptive_plan): stop once the interval is narrow enough, or at its maximum.
        self.adaptive = plan.get("adaptive")
        self.next_adapt = 0.0
        self.ws = None  # the window opens when every stream has finished a request, after the warmup
        self.we = math.inf
        self.reported = False
        self.turned = 0
        self.count_mode = plan["budget"] is not None
        self.budget = plan["budget"]
        self.drain = settings["drain"]
        self.bin_w = plan["bin_w"]
        self.inv_bw = 1.0 / plan["bin_w"]
        self.bins: list[float] = []
        self.streams = {sid: Stream(sid) for sid in stream_ids}
        self.trace_n = plan.get("trace", 0)
        if self.trace_n:
            for st in self.streams.values():
                st.trace = []
        self.fdmap: dict[int, Stream] = {}
        self.cut_pending = False
        self.next_timeout_scan = 0.0
        self.kernel_stamps = True  # SO_TIMESTAMPNS receive stamps, while the kernel gives them
        self.ep = select.epoll()
        if ctrl_fd >= 0:
            self.ep.register(ctrl_fd, select.EPOLLIN)
        self.heap = [(plan["starts"][sid], sid) for sid in stream_ids]
        heapq.heapify(self.heap)
        self.active = 0
        self.stopping = False
        self.stop_reason = None
        self.counter = 0
        self.full_end = None  # count mode: first time a stream found no work after ws
        # aggregates
        self.ok = 0
        self.failed = 0
        self.cut = 0
        self.consecutive_failures = 0
        self.kinds: dict[str, int] = {}
        self.examples: dict[str, str] = {}
        self.whole_tokens = 0
        self.first_send = None
        self.last_end = None
        self.ends = array("d")
        # Per finished request, beside ``ends``: its tokens and verify steps (an engine whose token
        # counter moves only at a request's finish is compared with the requests finished in the
        # window; SGLang's accept length over the window is theirs).
        self.end_tokens = array("d")
        self.end_verify = array("d")
        # ... and for per-category figures: its category (index in the factory's categories, -1
        # none) and the tokens its verify steps produced (SGLang: its output; vLLM: steps + accepted).
        self.end_category = array("i")
        self.end_spec_tokens = array("d")
        self.exact = 0  # measured requests whose per-chunk counts were the server's (usage or meta_info)
        # The tokens of the first two chunks that arrived after each edge of a fixed window, over the
        # requests sent before it: what the server may have counted before the edge and the client
        # received after it (see _account); None where the window's end moves (adaptive, counts).
        self.edge_tokens: list | None = None if self.adaptive or self.count_mode else [0.0, 0.0]
        # Requests that finished after the warmup but before the window's start reached this worker
        # (the parent sends it once every worker is ready): (sent, stamps, tokens), for the start edge.
        self.pre_window: list = []
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.tpot: list[float] = []
        self.decode: list[float] = []
        self.itl = array("d")
        self.out_tokens: list[int] = []
        # (ttft s or None, tpot s or None, e2e s, output tokens) of each measured request, in step:
        # what goodput under latency targets counts (specbench_compare.slo.goodput)
        self.requests: list[tuple] = []
        self.in_tokens: list[int] = []
        self.short = 0
        self.spec_ct = 0
        self.spec_verify = 0
        self.traces: list = []
        self.cpu0 = None
        self.cpu1 = None
        self.busy_from = None
        self.busy_to = None
        self.lag_sum = 0.0  # read time minus the kernel's arrival stamp, summed over reads
        self.lag_n = 0
        # The wall clock's offset from the monotonic one, read at the window's opening and at its close:
        # each UTC edge uses its own, so a step of the wall clock in between (NTP, a VM paused for a
        # snapshot or a migration) moves neither edge.
        self.wall_open = None
        self.wall_close = None
        adapter = ADAPTERS[self.api]
        self.handle = adapter.handle  # one streamed event into the request (False: an error object)
        self.fast = adapter.fast  # the API's parse of a plain chunk straight from the text, or None
        self.scale_to_usage = adapter.SCALE_TO_USAGE
        # Live progress (the action plugin's lines while a level runs): this worker's tally, written
        # once a second to <_progress_path>.w<index> when the caller asked for it (write_progress).
        self.progress_path = settings.get("_progress_path") or None
        self.next_progress = 0.0
        self.ok_seconds = 0.0  # the requests answered, their send-to-end seconds summed (the level's ETA)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        ep = self.ep
        fdmap = self.fdmap
        heap = self.heap
        monotonic = time.monotonic
        # One preallocated read buffer: a fresh 256 KiB object per recv would cost an mmap each.
        rbuf = memoryview(bytearray(READ_SIZE))
        bufs = [rbuf]
        kernel = self.kernel_stamps
        wall = time.time
        unpack_ts = _TIMESPEC.unpack_from
        next_check = 0.0
        while True:
            now = monotonic()
            while heap and heap[0][0] <= now:
                sid = heapq.heappop(heap)[1]
                self._start(self.streams[sid], now)
            if now >= next_check:
                self._housekeeping(now)
                next_check = now + 0.02
                if self.stopping and self.active == 0:
                    break
            wake = heap[0][0] if heap else next_check
            timeout = min(wake, next_check) - now
            events = ep.poll(timeout if timeout > 0 else 0, 1024)
            for fd, _ev in events:
                st = fdmap.get(fd)
                if st is None:
                    if fd == self.ctrl_fd:
                        self._control()
                    continue
                phase = st.phase
                if phase >= HEAD:
                    try:
                        if kernel:
                            n, anc, unused_flags, unused_addr = st.sock.recvmsg_into(bufs, 64)
                        else:
                            n = st.sock.recv_into(rbuf)
                            anc = None
                        data = rbuf[:n].tobytes()
                    except BlockingIOError:
                        continue
                    except OSError as exc:
                        if not st.got and not st.retried:
                            self._retry_fresh(st)
                        else:
                            self._fail(st, "disconnected", f"read failed: {exc}")
                        continue
                    t = monotonic()
                    if anc:
                        # When the data reached the socket (the kernel's stamp), not when this loop
                        # got to it: a busy or descheduled client does not stamp late (arrival).
                        sec, nsec = unpack_ts(anc[0][2])
                        req = st.req
                        tk = arrival(t, sec + nsec * 1e-9, wall(), None if req is None else req.t_send,
                                     req.ts[-1] if req is not None and req.ts else None)
                        if tk < t:
                            self.lag_sum += t - tk
                            self.lag_n += 1
                            t = tk
                    if data:
                        self._feed(st, data, t)
                    else:
                        self._eof(st, t)
                elif phase == CONNECTING:
                    err = st.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self._connect_failed(st, OSError(err, os.strerror(err)))
                    else:
                        st.phase = SENDING
                        self._send(st)
                elif phase == SENDING:
                    self._send(st)
            if self.cut_pending:  # the window closed: what had arrived is read, cut the rest
                self.cut_pending = False
                for st in list(self.streams.values()):
                    if st.req is not None:
                        self._finish(st, False, cut=True)
        self._housekeeping(monotonic(), final=True)
        self.ep.close()
        return self._result()

    def _write_progress(self, now: float) -> None:
        """This worker's requests done and failed and tokens read so far, one JSON line replaced whole
        (a reader never sees half of it); a file that cannot be written costs only the progress."""
        in_window = self.ws is not None and now >= self.ws
        record = {"worker": self.widx, "ok": self.ok, "failed": self.failed, "tokens": self.whole_tokens,
                  "window": in_window, "wall": time.time(), "repeat": int(self.settings.get("_repeat") or 0),
                  "repeats": int(self.settings.get("repeats") or 1)}
        # The seconds left, on this node's clock, for the level's ETA: of the warm-up's minimum before the
        # window opens (it opens once every stream also finished a request), of the timed window once open
        # (an adaptive window's maximum; a window closed by a request count has none); the drain expected
        # after it (the requests in flight at its end finish: up to one request's seconds, the longest in
        # flight now at its rate so far; none when they are cut); once it is over, the drain left.
        whole, left = self._in_flight(now)
        if whole is not None:
            record["drain_s"] = round(whole, 2) if self.drain else 0.0
        if not in_window:
            record["warmup_left_s"] = round(max(0.0, (self.min_ws if self.ws is None else self.ws) - now), 2)
        elif not self.count_mode and math.isfinite(self.we):
            record["window_left_s"] = round(max(0.0, self.we - now), 2)
        if self.stopping:
            record["drain_left_s"] = round(left or 0.0, 2)
        path = f"{self.progress_path}.w{self.widx}"
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
            os.replace(path + ".tmp", path)
        except OSError:
            self.progress_path = None

    def _in_flight(self, now: float) -> tuple[float | None, float | None]:
        """(the longest whole request's seconds, the longest seconds left) of the requests in flight, each
        at its own token rate so far (a request with no token yet: the mean answered request's seconds);
        the mean answered request's seconds and None with none in flight, (None, None) with nothing known."""
        mean = self.ok_seconds / self.ok if self.ok else None
        whole = left = None
        for st in self.streams.values():
            req = st.req
            if req is None:
                continue
            age = max(1e-6, now - req.t_send)
            got = sum(req.ks)
            if got > 0 and req.expect:
                total = max(age, req.expect * age / got)
            elif mean is not None:
                total = max(age, mean)
            else:
                continue
            whole = total if whole is None else max(whole, total)
            left = total - age if left is None else max(left, total - age)
        if whole is None:
            whole = mean
        return whole, left

    def _control(self) -> None:
        data = os.read(self.ctrl_fd, 8)
        self.ep.unregister(self.ctrl_fd)
        if len(data) == 8:
            self._open_window(struct.unpack("d", data)[0])
        elif not self.stopping:
            self._stop_early("the parent process went away")

    def _open_window(self, ws: float) -> None:
        if self.ws is not None:
            return
        self.ws = ws
        if not self.count_mode:
            self.we = ws + (self.adaptive["max_s"] if self.adaptive else self.window_s)
        if self.edge_tokens is not None:
            # A request that straddled the start and finished before the parent's message came (on
            # a loaded machine, vLLM at C=1: its chunks after the edge were never counted, and the
            # client read 40 tokens more than vLLM's counter with no start edge allowed for them).
            for sent, ts, ks in self.pre_window:
                self._edge_chunks(sent, ts, ks)
        self.pre_window = []
        self.cpu0 = _cpu_seconds()
        self.busy_from = time.monotonic()
        self.wall_open = time.time() - self.busy_from

    def _report_ready(self, now: float) -> None:
        """Every stream here has finished a request, after the warmup: say so (or open the window)."""
        self.reported = True
        if self.status_fd >= 0:
            os.write(self.status_fd, b"R" + struct.pack("d", now))
        else:
            self._open_window(snap(now, self.t0, self.bin_w))

    def _housekeeping(self, now: float, final: bool = False) -> None:
        if self.progress_path and (final or now >= self.next_progress):
            self.next_progress = now + PROGRESS_EVERY_S
            self._write_progress(now)
        if not self.reported and (final or (self.turned >= len(self.streams) and now >= self.min_ws)):
            self._report_ready(now)
        if self.adaptive and self.ws is not None and not self.stopping and now >= self.next_adapt:
            self._adapt(now)
        if self.ws is None:
            window_over = False
        elif self.count_mode:
            window_over = self.full_end is not None
        else:
            window_over = now >= self.we
        if self.cpu1 is None and self.cpu0 is not None and (window_over or final):
            self.cpu1 = _cpu_seconds()
            self.busy_to = now
            self.wall_close = time.time() - time.monotonic()
        if not self.count_mode and window_over and not self.stopping:
            self.stopping = True
            self.stop_reason = self.stop_reason or "window"
            if not self.drain:
                self.cut_pending = True
        if self.stopping:
            self.heap.clear()
        # per-request timeout (a scan of every stream: four times a second is plenty)
        if now < self.next_timeout_scan and not final:
            return
        self.next_timeout_scan = now + 0.25
        limit = now - self.timeout
        for st in self.streams.values():
            req = st.req
            if req is not None and req.t_send < limit:
                got = sum(req.ks)
                self._fail(st, "timeout", f"no complete response after {self.timeout:g} s ({got} of "
                                          f"{req.expect} tokens arrived)")

    def _adapt(self, now: float) -> None:
        """An adaptive window closes once it has lasted ``min_durations`` mean request durations and
        its rate's interval (summary.window_interval) is within ``target`` of its figure, judged on
        the bins before the oldest request still in flight was sent (those bins are final).

        The mean duration counts each of the window's requests still in flight as the longer of its
        age so far (it will take at least that) and the finished ones' mean: the level's record
        (level.window_record) judges the mean over every request sent in the window, and a mean of
        the finished ones alone leaves out the slow ones, so that on a loaded machine the window
        closed on a mean its record then found too short. Never below the finished ones' mean."""
        plan = self.adaptive
        self.next_adapt = now + plan["check_s"]
        durations, tokens = self.e2e, self.out_tokens
        if not durations:
            return
        sends = [st.req.t_send for st in self.streams.values() if st.req is not None]
        finished = sum(durations) / len(durations)
        pending = [max(now - sent, finished) for sent in sends if sent >= self.ws]
        if now - self.ws < plan["min_durations"] * (sum(durations) + sum(pending)) / (len(durations) + len(pending)):
            return
        end = min(sends + [now])
        first, last = int(round((self.ws - self.t0) * self.inv_bw)), int((end - self.t0) * self.inv_bw)
        if last - first < 8:
            return
        fine = self.bins[first:last] + [0.0] * max(0, last - len(self.bins))
        group = max(1, len(fine) // ADAPT_BINS)
        rates = [sum(fine[i:i + group]) * self.inv_bw / group for i in range(0, len(fine) - group + 1, group)]
        span = len(rates) * group * self.bin_w
        step = sum(self.tpot) / len(self.tpot) if self.tpot else 0.0
        mean = sum(rates) / len(rates)
        ci = window_interval(rates, span, (tokens, durations), step)["ci"]
        if ci and mean > 0 and (ci[1] - ci[0]) / 2 <= plan["target"] * mean:
            self.we = min(self.we, snap(now, self.t0, self.bin_w) + self.bin_w)

    def _stop_early(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        self.heap.clear()
        for st in list(self.streams.values()):
            if st.req is not None:
                self._finish(st, False, cut=True)

    # -- issuing ------------------------------------------------------------------------------
    def _start(self, st: Stream, now: float) -> None:
        if self.stopping:
            return
        measured = self.ws is not None and now >= self.ws
        if self.count_mode and measured:
            if self.budget <= 0:
                if self.full_end is None:
                    self.full_end = now
                if self.active == 0:
                    self.stopping = True
                    self.stop_reason = "requests"
                return
            self.budget -= 1
        elif not self.count_mode and now >= self.we:
            return
        index = self.counter
        self.counter += 1
        pindex = index * self.nworkers + self.widx
        length = self.factory.output_len_of(pindex)
        if not st.turned and not st.fails and length > 1:
            # A stream's first request stops after a random share of the output, so streams reach
            # steady state at phases spread evenly over a request (no lockstep, no bursts).
            length = random.Random(f"{self.plan['key']}:first:{st.sid}").randint(1, length)
        st.req = Req(index, now, measured, length)
        st.req.category = self.factory.category_of(pindex)
        self.active += 1
        if self.first_send is None:
            self.first_send = now
        payload = self.factory.build(f"{self.plan['key']}:{st.sid}:{index}", pindex, length)
        if st.sock is not None and st.keepalive and st.body_done:
            st._reset()
            st.out = payload
            st.retried = False
            st.phase = SENDING
            self._send(st, reused=True)
        else:
            self._close(st)
            st._reset()
            st.out = payload
            self._connect(st)

    def _connect(self, st: Stream) -> None:
        try:
            sock = socket.socket(self.family, socket.SOCK_STREAM)
        except OSError as exc:
            self._fail(st, "client_error", f"cannot open a socket: {exc} (raise the open-file limit?)")
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.kernel_stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.kernel_stamps = False
        st.sock = sock
        st.fd = sock.fileno()
        self.fdmap[st.fd] = st
        err = sock.connect_ex(self.sockaddr)
        if err in (0, errno.EINPROGRESS):
            st.phase = CONNECTING
            self.ep.register(st.fd, select.EPOLLOUT)
        else:
            self._connect_failed(st, OSError(err, os.strerror(err)))

    def _connect_failed(self, st: Stream, exc: OSError) -> None:
        kind = "connect_refused" if exc.errno == errno.ECONNREFUSED else "connect_failed"
        self._fail(st, kind, f"connect to {self.addr_text}: {exc.strerror or exc}")

    def _send(self, st: Stream, reused: bool = False) -> None:
        try:
            n = st.sock.send(st.out)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            if reused and not st.retried:
                self._retry_fresh(st)
            else:
                self._fail(st, "disconnected", f"send failed: {exc}")
            return
        st.out = st.out[n:]
        if st.out:
            if st.phase != SENDING or reused:
                st.phase = SENDING
                self._modify(st, select.EPOLLOUT)
            return
        st.phase = HEAD
        st.retried = st.retried or not reused
        self._modify(st, select.EPOLLIN)

    def _modify(self, st: Stream, mask: int) -> None:
        try:
            self.ep.modify(st.fd, mask)
        except FileNotFoundError:
            self.ep.register(st.fd, mask)

    def _retry_fresh(self, st: Stream) -> None:
        """A kept-alive connection the server had closed: send once more on a new one."""
        req, out = st.req, st.out
        self._close(st)
        st._reset()
        st.req = req
        st.retried = True
        st.out = self.factory.build(f"{self.plan['key']}:{st.sid}:{req.index}", req.index * self.nworkers + self.widx,
                                    req.expect)
        del out
        self._connect(st)

    def _close(self, st: Stream) -> None:
        if st.sock is not None:
            self.fdmap.pop(st.fd, None)
            try:
                self.ep.unregister(st.fd)
            except (FileNotFoundError, ValueError, OSError):
                pass
            st.sock.close()
            st.sock = None
            st.fd = -1
        st.phase = IDLE

    # -- reading ------------------------------------------------------------------------------

    def _fail(self, st: Stream, kind: str, message: str, keep: bool = False) -> None:
        if st.req is None:
            self._close(st)
            return
        self._finish(st, False, kind=kind, message=message, keep=keep)

    def _finish(self, st: Stream, ok: bool, kind: str = "", message: str = "", cut: bool = False,
                keep: bool = True) -> None:
        req = st.req
        st.req = None
        self.active -= 1
        now = time.monotonic()
        if not st.turned:
            st.turned = True
            self.turned += 1
            if not self.reported and self.turned >= len(self.streams) and now >= self.min_ws:
                self._report_ready(now)
        if not (ok and keep and st.keepalive and st.body_done):
            self._close(st)
        self._account(req, ok)
        if cut:
            self.cut += 1
            return
        if ok:
            self.ok += 1
            self.ok_seconds += now - req.t_send
            self.consecutive_failures = 0
            st.fails = 0
            if not self.stopping:
                self._start(st, now)
            elif self.count_mode and self.active == 0:
                pass
            return
        self.failed += 1
        self.consecutive_failures += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.examples.setdefault(kind, message)
        st.fails += 1
        limit = max(10, len(self.streams))
        if self.consecutive_failures >= limit:
            self._stop_early(f"the last {self.consecutive_failures} requests all failed")
            return
        if not self.stopping:
            delay = min(1.0, 0.05 * (2 ** min(st.fails - 1, 5)))
            heapq.heappush(self.heap, (now + delay, st.sid))

    def _account(self, req: Req, ok: bool) -> None:
        ts, ks = req.ts, req.ks
        n = sum(ks)
        if ok and req.usage_ct and n and req.usage_ct != n and self.scale_to_usage:
            # Scale the per-chunk word counts so the total is the server's token count.
            scale = req.usage_ct / n
            cum = 0.0
            prev = 0
            scaled = []
            for k in ks:
                cum += k * scale
                now = int(round(cum))
                scaled.append(now - prev)
                prev = now
            ks = scaled
            n = req.usage_ct
        if ts:
            t0 = self.t0
            inv = self.inv_bw
            bins = self.bins
            last = int((ts[-1] - t0) * inv)
            if last >= len(bins):
                bins.extend([0.0] * (last + 1 - len(bins)))
            for t, k in zip(ts, ks):  # noqa: B905 - the node may run Python < 3.10
                bins[int((t - t0) * inv)] += k
            if self.edge_tokens is not None:
                if self.ws is not None:
                    self._edge_chunks(req.t_send, ts, ks)
                elif ts[-1] >= self.min_ws - self.bin_w:  # may straddle the start, not yet known (_open_window)
                    self.pre_window.append((req.t_send, ts, ks))
        if not ok:
            return
        end = req.end
        self.whole_tokens += n
        if self.last_end is None or end > self.last_end:
            self.last_end = end
        self.ends.append(end)
        self.end_tokens.append(n)
        self.end_verify.append(req.verify or 0)
        self.end_category.append(req.category)
        self.end_spec_tokens.append((req.verify + req.accepted) if req.accepted is not None and req.verify
                                    else (n if req.verify else 0))
        if n != req.expect:
            self.short += 1
        if not (req.measured or (not self.count_mode and self.ws is not None and self.ws <= req.t_send < self.we)):
            return
        self.out_tokens.append(n)
        if req.ct:  # the server's own running count arrived with the chunks
            self.exact += 1
        if req.prompt_tokens is not None:
            self.in_tokens.append(req.prompt_tokens)
        if req.verify:
            self.spec_ct += n
            self.spec_verify += req.verify
        e2e = end - req.t_send
        self.e2e.append(e2e)
        if req.first is None:
            self.requests.append((None, None, e2e, n))
            return
        ttft = req.first - req.t_send
        self.ttft.append(ttft)
        tpot = (e2e - ttft) / (n - 1) if n > 1 else None
        self.requests.append((ttft, tpot, e2e, n))
        if tpot is not None:
            self.tpot.append(tpot)
        span = ts[-1] - ts[0]
        if len(ts) > 1 and span > 0:
            self.decode.append((n - ks[0]) / span)
        itl = self.itl
        prev = ts[0]
        for t, k in zip(ts[1:], ks[1:]):  # noqa: B905
            if k > 0:
                gap = (t - prev) / k
                if k == 1:
                    itl.append(gap)
                else:
                    itl.extend([gap] * k)
            prev = t

    def _edge_chunks(self, sent: float, ts: list, ks: list) -> None:
        """Add a request's token-carrying chunks of its first two reads after each window edge it
        straddles (the chunks of one read share its stamp).

        A server's count runs ahead of its streams: vLLM's output handler counts each engine step's
        tokens (logger record) after pushing them to the requests' collectors, and pulls the next
        step from its queue without yielding while steps are queued (vllm/v1/engine/async_llm.py,
        output_handler; core_client.py, get_output_async), so on a busy server several steps are
        counted before any stream writes; a collector merges whatever is pending into one output
        (RequestOutputCollector.put, vllm/v1/engine/output_processor.py). So a token counted before
        an edge and received after it is in the chunk in flight at the edge or in the next one,
        the merged one (seen: 74 tokens at C=4 on a loaded 2-core machine, 18 steps a stream). And
        the kernel stamps a read with its last segment's arrival (tcp_recvmsg reports the receive
        time of the last skb it copied), so what reached the socket before an edge and was read with
        what came after it carries a stamp after the edge: every chunk of that read. Both fit in the
        first two reads after the edge, which bound what the two counts may differ by there (seen:
        vLLM at C=16 beside a loaded suite, the client 219 tokens above the server's count and its
        first two chunks, 37 tokens, while its reads lagged)."""
        for i, edge in enumerate((self.ws, self.we)):
            if sent < edge < ts[-1]:
                reads, stamp = 0, None
                for t, k in zip(ts, ks):  # noqa: B905 - the node may run Python < 3.10
                    if t > edge and k > 0:
                        if t != stamp:
                            if reads == 2:
                                break
                            reads, stamp = reads + 1, t
                        self.edge_tokens[i] += k

    def _result(self) -> dict:
        for st in self.streams.values():
            self._close(st)
            if st.trace:
                self.traces.append(st.trace)
        cpu = None
        lag = self.lag_sum / self.lag_n if self.lag_n else None
        if self.cpu0 is not None and self.cpu1 is not None and self.busy_to and self.busy_to > self.busy_from:
            span = self.busy_to - self.busy_from
            cpu = (self.cpu1 - self.cpu0) / span
        return {
            "ws": self.ws, "we": self.we, "ok": self.ok, "failed": self.failed, "cut": self.cut, "kinds": self.kinds,
            "examples": self.examples,
            "bins": self.bins, "whole_tokens": self.whole_tokens, "first_send": self.first_send,
            "last_end": self.last_end, "ends": self.ends, "end_tokens": self.end_tokens,
            "end_verify": self.end_verify, "end_category": self.end_category,
            "end_spec_tokens": self.end_spec_tokens, "categories": self.factory.categories, "exact": self.exact,
            "ttft": self.ttft, "e2e": self.e2e,
            "tpot": self.tpot, "decode": self.decode, "itl": self.itl, "out_tokens": self.out_tokens,
            "requests": self.requests, "in_tokens": self.in_tokens, "short": self.short, "spec_ct": self.spec_ct,
            "spec_verify": self.spec_verify, "stop_reason": self.stop_reason, "full_end": self.full_end,
            "cpu": cpu, "lag": lag, "streams": len(self.streams), "traces": self.traces, "edge_tokens": self.edge_tokens,
            "wall_open": self.wall_open, "wall_close": self.wall_close,
        }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

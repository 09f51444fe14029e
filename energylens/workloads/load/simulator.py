"""Replay requests through a vLLM-style scheduler, one replica, iteration by iteration.

Policy (vLLM V1's scheduler with its defaults): continuous batching; every step first
gives each running decode one token, then running prompts and, first come first served,
waiting prompts their share of the step's token budget (chunked prefill); at most
``max_sequences`` requests run at once; the KV cache is a pool of tokens, and when a
step's tokens do not fit, the last admitted request is preempted (its cache freed, its
prompt and generated tokens recomputed later, ahead of the queue). A prompt's last chunk
yields its first token. The runtime's ``prefill_scheduling`` varies how prompts enter
steps: ``mixed-chunked`` as above; ``mixed-whole`` admits a second or later prompt into a
step only when all of it fits the remaining budget, while the step's first prompt takes
whatever budget the decodes leave (chunked context: TensorRT-LLM's runs at 8,192-token
prompts beside hundreds of decodes admit them); ``prefill-first`` runs a step of prompts
alone whenever there are any to prefill, and the decodes wait for it. A request whose
cache arrives with it (a disaggregated decode pool) joins, first come first served, once
the limits' ``decode_reserve_tokens`` say it fits: its cache (0), beside that many more
tokens for each running request, or beside every request's whole output (None: no decode
is ever preempted). Iterations that only decode, with no arrival or completion due, are
advanced together (their number is known), so the cost is per event, not per token. A
workload's shared prompt prefix is held once in the pool and never computed: each prompt's
first chunk starts after it (prefix caching, warm). Under data-parallel attention with
ranks that prefill on their own (:class:`Lockstep`), a decode-only step of the simulated
rank lasts, on average, as long as another rank's prompt chunk makes the step the ranks
take together.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from energylens.errors import EnergyLensError
from energylens.workloads.load.arrivals import Requests
from energylens.workloads.load.costs import (
    MIN_STEP_S,
    StepTable,
    interpolate,
    interpolate_many,
)

#: vLLM's KV block (``--block-size`` default 16 tokens); half a block per sequence is
#: the mean of what its last, partly filled block leaves unused.
BLOCK_TOKENS = 16


@dataclass(frozen=True, kw_only=True)
class SchedulerLimits:
    """The runtime's scheduler limits for one replica."""

    token_budget: int  # tokens per step (max_num_batched_tokens)
    max_sequences: int  # running requests (max_num_seqs)
    kv_tokens: int  # KV-cache pool in tokens
    prefill_scheduling: str = "mixed-chunked"  # RuntimeProfile.prefill_scheduling
    decode_reserve_tokens: int | None = 0  # RuntimeProfile.decode_reserve_tokens


@dataclass(frozen=True, kw_only=True)
class Lockstep:
    """The other attention ranks a simulated rank steps with, each scheduling its own
    prompts (``attention_dp_prompts`` independent). A step the ranks take together lasts
    as long as its slowest rank's, so a step in which this rank only decodes runs as long
    as a mixed step whenever another rank has a prompt chunk in it: with probability
    ``1 - (1 - share)^others`` for ranks alike and independent, each carrying a chunk in
    ``share`` of its steps. That rank's chunk is priced on one rank's tables (``table``:
    its tokens alone join the MoE layers, beside every rank's decodes)."""

    others: int  # ranks stepping with this one, besides it
    share: float  # share of a rank's steps that carry a prompt chunk
    chunk_tokens: int  # new tokens of such a step's chunk (mean)
    chunk_cached: float  # tokens cached before it (mean)
    table: StepTable  # one rank's step prices

    @classmethod
    def of_run(cls, *, run: SimRun, others: int, table: StepTable) -> Lockstep:
        """The lockstep of ranks that run as ``run`` did (this rank simulated alone)."""
        chunked = run.chunks > 0
        chunk_steps = int(chunked.sum())
        if not chunk_steps:  # (a chunk record counts one step: the sum below is positive)
            return cls(others=others, share=0.0, chunk_tokens=0, chunk_cached=0.0,
                       table=table)
        return cls(others=others, share=chunk_steps / float(run.count.sum()),
                   chunk_tokens=max(1, round(float(run.prefill_tokens[chunked].mean()))),
                   chunk_cached=float(run.chunk_cached.mean()), table=table)

    @property
    def chance(self) -> float:
        """Probability that another rank has a prompt chunk in a step."""
        return 1.0 - (1.0 - self.share) ** self.others


@dataclass(frozen=True, kw_only=True)
class SimRun:
    """What one simulation produced. Per request: times [s] and preemptions. Per record
    (one iteration, or ``count`` decode-only iterations run back to back): its start, wall
    time, decode sequences, mean decode context, prefill tokens, chunks, output tokens, the
    waiting and running requests at its start, and the decodes it stalls (a prefill-first
    step: they wait through it without a token). Per chunk: its record, new and cached
    tokens. Per token a recompute chunk yields after a preemption: its gap since the
    request's token before the preemption, and its time."""

    arrival_s: np.ndarray
    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    start_s: np.ndarray
    wall_s: np.ndarray
    count: np.ndarray
    decode: np.ndarray
    context: np.ndarray
    prefill_tokens: np.ndarray
    chunks: np.ndarray
    tokens_out: np.ndarray
    waiting: np.ndarray
    running: np.ndarray
    stalled: np.ndarray
    chunk_record: np.ndarray
    chunk_new: np.ndarray
    chunk_cached: np.ndarray
    peak_kv_tokens: float
    # a preempted request's next token, computed by its recompute chunk: the gap since its
    # last token before the preemption [s], and when it came [s]
    resume_gap_s: np.ndarray
    resume_at_s: np.ndarray

    @property
    def makespan_s(self) -> float:
        """From the first arrival to the last completion."""
        return float(self.finish_s.max() - self.arrival_s.min())

    @property
    def idle_s(self) -> float:
        """Time of the makespan in which no iteration runs (the GPUs wait for requests)."""
        previous_end = np.concatenate(([self.arrival_s.min()],
                                       (self.start_s + self.wall_s)[:-1]))
        return float(np.sum(np.clip(self.start_s - previous_end, 0.0, None)))

    def dynamic_energy(self, table: StepTable) -> np.ndarray:
        """(records, 3) compute, memory and communication joules of each record, from the
        same tables the scheduler timed its steps with."""
        return self._price(table)[:, 1:]

    def _price(self, table: StepTable) -> np.ndarray:
        """(records, fields) price of each record: its steps' cost times their count (the
        time its rank's own work takes: a lockstep's wait for other ranks is in
        ``wall_s`` alone)."""
        d = self.decode
        cost = interpolate_many(table.contexts, table.decode, d, self.context)
        cost = cost + table.merged[d + self.prefill_tokens] - table.merged[d]
        sequences = (d + self.chunks).astype(float)
        cost[:, 1] += table.engine_busy_j_per_sequence * sequences
        if len(self.chunk_record):  # records with chunks are single steps
            chunk = interpolate_many(table.cached, table.chunk, self.chunk_new,
                                     self.chunk_cached.astype(float))
            np.add.at(cost, self.chunk_record, chunk)
        engine_s = table.engine_idle_s + table.engine_busy_s_per_sequence * sequences
        cost[:, 0] = (np.maximum(cost[:, 0], engine_s) if table.engine_overlapped
                      else cost[:, 0] + engine_s)
        cost = np.maximum(cost, 0.0)
        cost[:, 0] = np.maximum(cost[:, 0], MIN_STEP_S)
        return cost * self.count[:, None]


def simulate(*, requests: Requests, table: StepTable, limits: SchedulerLimits,
             lockstep: Lockstep | None = None) -> SimRun:
    """Run every request to completion; deterministic for given inputs. A closed loop's
    clients all send their first request at time 0 (``benchmark_serving
    --max-concurrency``). ``lockstep``: the attention ranks this one steps with."""
    n_req = requests.count
    inp = requests.input_tokens.tolist()
    out = requests.output_tokens.tolist()
    arrival = [math.nan] * n_req
    admitted = [math.nan] * n_req
    first = [math.nan] * n_req
    last_token = [math.nan] * n_req  # when each request's latest token came
    finish = [math.nan] * n_req
    preempted = [0] * n_req
    gen = [0] * n_req  # tokens generated so far
    computed = [0] * n_req  # prompt (and recomputed) tokens cached so far
    target = list(inp)  # tokens a prefill must cache: the prompt, plus outputs on recompute
    shared = [min(requests.shared_prefix, i - 1) for i in inp]  # prompt tokens cached once
    held = max(shared, default=0)  # the shared prefix's tokens in the pool
    if requests.prefilled:  # the prompt's cache and first token arrive with the request
        computed, gen = list(inp), [1] * n_req
    base = [0] * n_req  # cached tokens when decoding started
    final = [0] * n_req  # a decoding request's cache when it completes
    start = [0] * n_req  # iteration index of the first decode step
    epoch = [0] * n_req  # invalidates heap entries of a preempted request

    pending: list[tuple[float, int]]  # (arrival time, request): a heap
    if requests.arrival_s is None:
        issued = min(requests.clients, n_req)
        pending = [(0.0, r) for r in range(issued)]
    else:
        issued = n_req
        pending = list(zip(requests.arrival_s.tolist(), range(n_req), strict=True))
    heapq.heapify(pending)

    dl, fl, cl = table.latency_lists()
    contexts, cached_pts = table.contexts, table.cached
    idle_s, per_seq_s = table.engine_idle_s, table.engine_busy_s_per_sequence
    overlapped = table.engine_overlapped

    def join(gpu_s: float, engine_s: float) -> float:  # join_engine_s on floats
        return max(gpu_s, engine_s) if overlapped else gpu_s + engine_s

    chance, other_chunk_s = 0.0, []
    if lockstep is not None and lockstep.chance > 0.0:
        chance = lockstep.chance
        _, rank_fl, rank_cl = lockstep.table.latency_lists()
        n_other = min(lockstep.chunk_tokens, len(rank_cl) - 1)
        # one rank's chunk beside every rank's decodes: what it adds to a decode step
        other_chunk_s = [rank_fl[d + n_other] - rank_fl[d] + interpolate(
            cached_pts, rank_cl[n_other], lockstep.chunk_cached)
            for d in range(len(dl))]

    def decode_step_s(d: int, context: float) -> float:  # a decode-only step's wall time
        gpu_s = interpolate(contexts, dl[d], context)
        own = max(join(gpu_s, idle_s + per_seq_s * d), MIN_STEP_S)
        if chance <= 0.0:
            return own
        mixed = max(join(gpu_s + other_chunk_s[d], idle_s + per_seq_s * (d + 1)), own)
        return own + chance * (mixed - own)

    def steps_before(*, gap: float, d: int, ctx0: float, steps: int) -> int:
        """Steps of at most ``steps`` that a decode-only record of ``d`` sequences from
        context ``ctx0`` runs before an event ``gap`` s away: at least one, and never so
        many that it ends more than one of its own steps (priced at its mid context, as
        the record is) past the event: (n - 1) x step(n) < gap. The most the first step's
        price allows, recounted once at their own price, keeps that bound (the recount's
        steps cost no more each: a step's price does not fall with the context)."""
        most = min(steps, int(gap // decode_step_s(d, ctx0)) + 1)
        return max(1, min(most, int(gap // decode_step_s(d, ctx0 + (most - 1) / 2)) + 1))
    budget_max, cap, kv_cap = limits.token_budget, limits.max_sequences, limits.kv_tokens
    whole = limits.prefill_scheduling == "mixed-whole"
    prefill_first = limits.prefill_scheduling == "prefill-first"
    half_block = BLOCK_TOKENS / 2
    # records in a row without a token: every prompt chunked, twice over, bounds a live run
    stall_limit = 2 * n_req * (max(inp) // max(budget_max, 1) + 2) + 1000
    barren = 0

    waiting: deque[int] = deque()
    running: dict[int, None] = {}  # admission order: the last is preempted first
    prefilling: list[int] = []
    decoding: set[int] = set()
    heap: list[tuple[int, int, int]] = []  # (last decode iteration, request, epoch)
    decode_kv = 0  # KV tokens of the decoding requests (their contexts, shared prefix too)
    decode_shared = 0  # of which the shared prefix's, held once in the pool
    final_kv = 0  # the decoding requests' caches when they complete (shared prefix too)
    reserve = limits.decode_reserve_tokens
    prefill_kv = 0  # KV tokens of the prefilling requests
    peak_kv = 0.0
    t = 0.0
    last_decode_s = 0.0  # end of the latest record whose decodes took a token
    it = 0  # iterations run so far (index of the next one)
    rec: dict[str, list[float]] = {k: [] for k in (
        "start", "wall", "count", "decode", "context", "prefill", "chunks", "tokens",
        "waiting", "running", "stalled")}
    chunk_rec: list[int] = []
    chunk_new: list[int] = []
    chunk_cached: list[int] = []
    resume_gap: list[float] = []
    resume_at: list[float] = []

    def kv_free() -> float:
        return (kv_cap - held - (decode_kv - decode_shared) - prefill_kv
                - half_block * len(running))

    def finish_request(r: int) -> None:
        nonlocal issued
        finish[r] = t
        del running[r]
        if requests.arrival_s is None and issued < n_req:
            heapq.heappush(pending, (t, issued))
            issued += 1

    def arrived_fits(r: int) -> bool:
        """Whether a request whose cache arrives with it joins now (the runtime's
        ``decode_reserve_tokens``): its cache fits, beside ``reserve`` more tokens for
        each running request, or, reserve None, every request's whole output fits."""
        room = kv_free() - half_block - (target[r] - shared[r])
        if reserve is None:
            return room >= final_kv - decode_kv + out[r] - gen[r]
        return room >= (reserve * len(running) if reserve else 1)

    def start_decoding(r: int) -> None:
        nonlocal decode_kv, decode_shared, final_kv
        decoding.add(r)
        base[r], start[r] = computed[r], it
        final[r] = computed[r] + out[r] - gen[r]
        decode_kv += computed[r]
        decode_shared += shared[r]
        final_kv += final[r]
        heapq.heappush(heap, (it + out[r] - gen[r] - 1, r, epoch[r]))

    def stop_decoding(r: int) -> None:
        nonlocal decode_kv, decode_shared, final_kv
        decoding.discard(r)
        decode_kv -= base[r] + it - start[r]
        decode_shared -= shared[r]
        final_kv -= final[r]

    def preempt_last() -> None:
        nonlocal prefill_kv
        r = next(reversed(running))
        del running[r]
        if r in decoding:
            stop_decoding(r)
            gen[r] += it - start[r]  # the tokens it decoded are kept (and recomputed)
            last_token[r] = max(last_token[r], last_decode_s)
            epoch[r] += 1
        else:
            prefilling.remove(r)
            prefill_kv -= computed[r] - shared[r]
        computed[r] = 0
        target[r] = inp[r] + gen[r]
        preempted[r] += 1
        waiting.appendleft(r)

    while True:
        while pending and pending[0][0] <= t:
            when, r = heapq.heappop(pending)
            arrival[r] = when
            if requests.prefilled and gen[r] >= out[r]:  # nothing left to decode
                admitted[r] = first[r] = finish[r] = when
                continue
            waiting.append(r)
        # prompts cached elsewhere join the decodes as soon as their cache fits
        while waiting and computed[waiting[0]] == target[waiting[0]] and len(running) < cap \
                and arrived_fits(waiting[0]):
            r = waiting.popleft()
            admitted[r] = first[r] = last_token[r] = t
            running[r] = None
            start_decoding(r)
        if not running and not waiting:
            if not pending:
                break
            t = pending[0][0]
            continue
        while decoding and kv_free() < len(decoding):
            preempt_last()
        d = len(decoding)
        step_d = 0 if prefill_first else d  # decodes sharing a step with prompts
        budget = budget_max - step_d
        room = kv_free() - d  # the decodes' next tokens stay reserved under every policy
        chunks: list[tuple[int, int, int]] = []
        for r in prefilling:
            n = min(target[r] - computed[r], budget, int(room))
            if n <= 0:
                break
            chunks.append((r, n, computed[r]))
            budget -= n
            room -= n
        while waiting and budget > 0 and len(running) < cap:
            r = waiting[0]
            cached = max(computed[r], shared[r])  # the shared prefix is in the cache
            n = min(target[r] - cached, budget)
            if n <= 0 or room - half_block < n or (whole and n < target[r] - cached and chunks):
                break  # n 0: a prompt cached elsewhere waits above for its cache to fit
            waiting.popleft()
            if math.isnan(admitted[r]):
                admitted[r] = t
            running[r] = None
            prefilling.append(r)
            computed[r] = cached
            chunks.append((r, n, cached))
            budget -= n
            room -= n + half_block
        if not chunks and d == 0:
            preempt_last()  # prompts in flight fill the pool: make room for the first
            continue
        n_wait, n_run = len(waiting), len(running)
        if not chunks:  # decode only: run until the next completion, arrival or full pool
            while heap[0][2] != epoch[heap[0][1]]:
                heapq.heappop(heap)
            ctx0 = decode_kv / d + 1.0
            steps = max(1, min(heap[0][0] - it + 1, int(kv_free() // d)))
            if pending:  # end within one of the record's own steps past the next arrival
                steps = steps_before(gap=pending[0][0] - t, d=d, ctx0=ctx0, steps=steps)
            mid = ctx0 + (steps - 1) / 2
            wall = decode_step_s(d, mid) * steps
            prefill_tokens = 0
            tokens = d * steps
            completed = 0
        else:
            d = step_d
            prefill_tokens = sum(n for _, n, _ in chunks)
            mid = decode_kv / d + 1.0 if d else 1.0
            wall = (interpolate(contexts, dl[d], mid) if d else 0.0) \
                + fl[d + prefill_tokens] - fl[d]
            for _, n, k in chunks:
                wall += interpolate(cached_pts, cl[n], k)
                chunk_rec.append(len(rec["start"]))
                chunk_new.append(n)
                chunk_cached.append(k)
            wall = max(join(wall, idle_s + per_seq_s * (d + len(chunks))), MIN_STEP_S)
            steps = 1 if d or not decoding else 0  # waiting decodes do not advance
            tokens = d
            completed = 0
        for key, value in (("start", t), ("wall", wall), ("count", max(steps, 1)), ("decode", d),
                           ("context", mid), ("prefill", prefill_tokens),
                           ("chunks", len(chunks)), ("waiting", n_wait), ("running", n_run),
                           ("stalled", len(decoding) - d)):
            rec[key].append(value)
        t += wall
        it += steps
        if d and steps:
            last_decode_s = t
        decode_kv += d * steps
        prefill_kv += sum(n for _, n, _ in chunks)
        peak_kv = max(peak_kv, kv_cap - kv_free())  # before completions free their cache
        for r, n, _ in chunks:
            computed[r] += n
            if computed[r] < target[r]:
                continue
            prefilling.remove(r)
            prefill_kv -= computed[r] - shared[r]
            gen[r] += 1
            completed += 1
            if math.isnan(first[r]):
                first[r] = t
            elif not math.isnan(last_token[r]):  # its first token after a preemption
                resume_gap.append(t - last_token[r])
                resume_at.append(t)
            last_token[r] = t
            if gen[r] >= out[r]:
                finish_request(r)
                continue
            start_decoding(r)
        rec["tokens"].append(tokens + completed)
        barren = 0 if tokens + completed else barren + 1
        if barren > stall_limit:
            raise EnergyLensError("the load simulator stopped making progress (a scheduler "
                                  "livelock: please report the deployment and workload)")
        while heap and heap[0][0] < it:
            last, r, stamp = heapq.heappop(heap)
            if stamp != epoch[r]:
                continue
            stop_decoding(r)
            gen[r] = out[r]
            finish_request(r)

    ints = ("count", "decode", "prefill", "chunks", "tokens", "waiting", "running", "stalled")
    arrays = {k: np.asarray(v, dtype=np.int64 if k in ints else float) for k, v in rec.items()}
    return SimRun(
        arrival_s=np.asarray(arrival), admitted_s=np.asarray(admitted),
        first_token_s=np.asarray(first), finish_s=np.asarray(finish),
        preemptions=np.asarray(preempted), input_tokens=requests.input_tokens,
        output_tokens=requests.output_tokens, start_s=arrays["start"], wall_s=arrays["wall"],
        count=arrays["count"], decode=arrays["decode"], context=arrays["context"],
        prefill_tokens=arrays["prefill"], chunks=arrays["chunks"], tokens_out=arrays["tokens"],
        waiting=arrays["waiting"], running=arrays["running"], stalled=arrays["stalled"],
        chunk_record=np.asarray(chunk_rec, dtype=np.int64),
        chunk_new=np.asarray(chunk_new, dtype=np.int64),
        chunk_cached=np.asarray(chunk_cached, dtype=np.int64), peak_kv_tokens=float(peak_kv),
        resume_gap_s=np.asarray(resume_gap, dtype=float),
        resume_at_s=np.asarray(resume_at, dtype=float))

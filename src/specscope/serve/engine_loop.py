"""Continuous batching: one thread owns the engine and loops ``engine.step()``.

HTTP handler threads :meth:`EngineLoop.submit` jobs into a bounded waiting queue. The loop
admits waiting jobs while ``engine.has_capacity()``, runs one step for everything running
(new jobs are prefilled inside that step), and hands each job its new tokens through the
job's own queue. Only this thread touches the engine; others read :attr:`EngineLoop.snapshot`,
a dict replaced after every step *before* the step's tokens are handed out, so a client that
has seen its last token and then scrapes ``/metrics`` sees counters that include that step.
If ``step()`` raises, the loop steps each running request alone (``step(only=...)``): a
request whose own step raises again ends with 500 and is aborted, the others go on, and the
server keeps serving. With a ``step_records`` file, every step's
:class:`~specscope.costmodel.steps.StepRecord` is appended to it as one JSON line as soon as the
step ends (``specscope serve --step-records``: the engine's own timing of the steps a black-box
calibration sees from outside). So that a step's record covers all the time between two steps,
as a client's chunk gap does, the loop's own time before a step — handing out the previous
step's tokens, writing records, admitting requests; not time spent idle — is added to that
step's ``overhead_s`` (on the bundled models 0.1–0.4 ms a step, more with more requests). Only
when the engine cannot even abort a request (its state is no longer trustworthy) does every job
fail and the loop stop; the server then answers 503. A job whose client went away, or whose
output reached a stop string, is cancelled (:meth:`EngineLoop.cancel`): dropped from the queue,
or aborted in the engine before the next step, so it stops taking batch slots.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from specscope.errors import SpecscopeError
from specscope.serve.histogram import INTER_TOKEN_LATENCY_BOUNDS, ITERATION_TOKENS_BOUNDS, Histogram
from specscope.serve.protocol import ApiError

if TYPE_CHECKING:
    from specscope.engine.runner import Engine, StepOutput
    from specscope.engine.sampling import SamplingParams

log = logging.getLogger(__name__)
DEFAULT_MAX_WAITING = 1024  # requests queued beyond the running batch before answering 503
KEEP_STEP_RECORDS = 4096  # the engine's per-step records, trimmed so a long-lived server stays bounded


@dataclass
class JobEvent:
    """New tokens for a job; ``finish_reason`` set on its last event; ``error`` on failure."""

    token_ids: list[int]
    finish_reason: str | None = None
    error: ApiError | None = None


@dataclass
class Job:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    ignore_eos: bool
    events: queue.Queue[JobEvent] = field(default_factory=queue.Queue)
    stop_strings: bool = False  # its handler reads its text for stop strings: its finish counted once read (settle)
    finish_reason: str | None = None  # the engine's, or stop where its handler found a stop string
    counted: bool = False  # its finish is in the totals (each job's once: a counter only rises)
    last_token_at: float | None = None  # when its last tokens came out (None: none yet)


class EngineLoop:
    """Owns ``engine`` (a :class:`specscope.engine.runner.Engine`) on a background thread."""

    def __init__(self, engine: Engine, max_waiting: int = DEFAULT_MAX_WAITING,
                 step_records: TextIO | None = None) -> None:
        self.engine = engine
        self.max_waiting = max_waiting
        self._step_records = step_records
        self._recorded = 0  # engine.step_records already written to ``step_records``
        self.failure: str | None = None
        self._waiting: deque[Job] = deque()
        self._running: dict[str, Job] = {}
        self._cancelled: dict[str, str] = {}  # running jobs to abort before the next step: reason
        self._cond = threading.Condition()
        self._stopping = False
        self._totals = {"prompt_tokens": 0, "generation_tokens": 0, "success_length": 0, "success_stop": 0,
                        "success_abort": 0}
        # as vLLM's: per step, the tokens its requests emitted plus the prompts of those it gave a first
        # token; per request and step after its first, the seconds since its tokens before
        self._iteration_tokens = Histogram(ITERATION_TOKENS_BOUNDS)
        self._inter_token_latency = Histogram(INTER_TOKEN_LATENCY_BOUNDS)
        self.snapshot = self._snapshot()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the step under way; every job still running or waiting then ends with a 503
        "server shutting down" (a stream's error event and [DONE]: a shutdown cut them off
        without a word, and a non-streamed client got an empty reply)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)
        with self._cond:
            jobs = list(self._running.values()) + list(self._waiting)
            self._running.clear()
            self._waiting.clear()
        for job in jobs:
            job.events.put(JobEvent([], error=ApiError(503, "server shutting down")))

    def alive(self) -> bool:
        return self._thread.is_alive() and self.failure is None

    def submit(self, job: Job) -> None:
        """Queue ``job``; 503 when the engine failed or ``max_waiting`` jobs already wait beyond the
        batch's free slots (a job waiting for a free slot, until the loop's next turn, waits for no
        one: a burst at an idle server was refused)."""
        with self._cond:
            if self.failure is not None or self._stopping:
                raise ApiError(503, f"engine unavailable: {self.failure or 'shutting down'}")
            if len(self._waiting) - self.engine.free_slots() >= self.max_waiting:
                raise ApiError(503, f"server busy: {self.max_waiting} requests already waiting")
            self._waiting.append(job)
            self._cond.notify()

    def cancel(self, job: Job, reason: str = "abort") -> None:
        """Stop working on ``job``: its client went away (``abort``) or its output reached a
        stop string (``stop``); counted as finished for ``reason``."""
        with self._cond:
            if job in self._waiting:
                self._waiting.remove(job)
                self._count(job, reason)
            elif job.request_id in self._running:
                if self._cancelled.get(job.request_id) == "stop":  # counted already (its client left after)
                    return
                self._cancelled[job.request_id] = reason  # an abort is counted when aborted: it may finish first
                if reason == "stop":  # its client has its answer: counted now, where /metrics read next shows it
                    self._count(job, reason)
            else:  # finished: a stop string its handler found in its last tokens, or its client left before
                self._count(job, "stop" if reason == "stop" else job.finish_reason)  # reading them

    def settle(self, job: Job) -> None:
        """Count a finished ``job`` whose handler read its last tokens and found no stop string in
        them (a job with stop strings is counted once its handler has read them: counted at the
        engine's finish, a stop string in its last tokens would take it back from ``length``)."""
        with self._cond:
            self._count(job, job.finish_reason)

    def _count(self, job: Job, reason: str | None) -> None:
        """Count ``job`` as finished for ``reason``, once (holding ``_cond``)."""
        if job.counted or reason is None:
            return
        job.counted, job.finish_reason = True, reason
        self._totals[f"success_{reason}"] += 1
        self.snapshot = self._snapshot()

    def _abort_cancelled(self) -> None:
        """Abort the cancelled running jobs in the engine (holding ``_cond``)."""
        for request_id, reason in self._cancelled.items():
            job = self._running.pop(request_id, None)
            if job is not None:
                self.engine.abort_request(request_id)
                self._count(job, reason)  # a stop was counted when its client had its answer
        self._cancelled.clear()

    def _snapshot(self) -> dict:
        stats = self.engine.stats
        return {
            "num_drafts": stats.num_drafts,
            "num_draft_tokens": stats.num_draft_tokens,
            "num_accepted_tokens": stats.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(stats.num_accepted_tokens_per_pos),
            "num_running": len(self._running),
            "num_waiting": len(self._waiting),
            "iteration_tokens": self._iteration_tokens.copy(),
            "inter_token_latency": self._inter_token_latency.copy(),
            **self._totals,
        }

    def _observe(self, delivered: list, now: float) -> None:
        """Add one step to the histograms (holding ``_cond``): its tokens as vLLM counts an
        iteration's, and each request's time since its tokens before (its first tokens: none)."""
        tokens = 0
        for job, out in delivered:
            if not out.new_token_ids:
                continue
            tokens += len(out.new_token_ids)
            if job.last_token_at is None:
                tokens += len(job.prompt_token_ids)
            else:
                self._inter_token_latency.observe(now - job.last_token_at)
            job.last_token_at = now
        if tokens:
            self._iteration_tokens.observe(tokens)

    def _admit(self) -> None:
        """Move waiting jobs into the engine while it has free slots (holding ``_cond``)."""
        while self._waiting and self.engine.has_capacity():
            job = self._waiting.popleft()
            try:
                self.engine.add_request(
                    job.request_id, job.prompt_token_ids, job.max_tokens, job.sampling, job.ignore_eos
                )
            except SpecscopeError as error:
                job.events.put(JobEvent([], error=ApiError(400, str(error))))
                continue
            except Exception as error:  # a bug met by this request alone: it fails, the rest go on
                log.exception("request %s could not be added", job.request_id)
                job.events.put(JobEvent([], error=ApiError(500, f"engine failure: {_describe(error)}")))
                continue
            self._running[job.request_id] = job
            self._totals["prompt_tokens"] += len(job.prompt_token_ids)

    def _run(self) -> None:
        stepped: float | None = None  # when the last step ended, unless the loop sat idle since
        try:
            while True:
                with self._cond:
                    while not self._stopping and not self._waiting and not self._running:
                        stepped = None
                        self._cond.wait()
                    if self._stopping:
                        break
                    self._abort_cancelled()
                    self._admit()
                started = time.perf_counter()
                new = len(self.engine.step_records)
                outputs = self._step() if self._running else []
                if stepped is not None and len(self.engine.step_records) > new:
                    self.engine.step_records[-1].overhead_s += started - stepped  # the loop's own time
                stepped = time.perf_counter()
                self._record_steps()
                delivered = [(self._running[out.request_id], out) for out in outputs]
                with self._cond:
                    self._observe(delivered, stepped)
                    for _, out in delivered:
                        self._totals["generation_tokens"] += len(out.new_token_ids)
                        if out.finished:  # a stop string seen before the end counts as stop (counted then)
                            cancelled = self._cancelled.pop(out.request_id, None)
                            job = self._running.pop(out.request_id)
                            if cancelled is None and job.stop_strings:  # its handler reads its last tokens
                                job.finish_reason = out.finish_reason  # first (settle)
                            else:  # its handler gone (its client left), or no stop string to look for
                                self._count(job, out.finish_reason)  # (a stop was counted when found)
                    self.snapshot = self._snapshot()
                for job, out in delivered:
                    job.events.put(
                        JobEvent(list(out.new_token_ids), out.finish_reason if out.finished else None)
                    )
        except Exception as error:  # the engine is in an unknown state: fail everything, stop
            log.exception("engine loop failed")
            self._fail_all(_describe(error))

    def _record_steps(self) -> None:
        """Append the new step records to the ``step_records`` file; keep the engine's list bounded."""
        records = self.engine.step_records
        if self._step_records is not None and len(records) > self._recorded:
            self._step_records.write("".join(r.to_json() + "\n" for r in records[self._recorded:]))
            self._step_records.flush()
        if len(records) > 2 * KEEP_STEP_RECORDS:
            del records[:-KEEP_STEP_RECORDS]
        self._recorded = len(records)

    def _step(self) -> list[StepOutput]:
        """One engine step; when it raises, each running request steps alone and those whose
        own step raises end with 500 (see the module docstring)."""
        states = self.engine.generator_states()
        try:
            return self.engine.step()
        except Exception:
            log.exception("engine step failed; stepping each request alone")
            self.engine.restore_generators(states)  # the failed step's draws are not the requests' own
        outputs = []
        for request_id in list(self._running):
            try:
                outputs.extend(self.engine.step(only={request_id}))
            except Exception as error:
                log.exception("request %s failed", request_id)
                with self._cond:
                    job = self._running.pop(request_id)
                try:  # before the answer: a client that sees its 500 sees /health as the loop left it
                    self.engine.abort_request(request_id)
                except Exception:  # the engine cannot even abort it: every job fails, the loop stops
                    with self._cond:
                        self._running[request_id] = job
                    raise
                job.events.put(JobEvent([], error=ApiError(500, f"engine failure: {_describe(error)}")))
        return outputs

    def _fail_all(self, reason: str) -> None:
        with self._cond:
            self.failure = reason
            jobs = list(self._running.values()) + list(self._waiting)
            self._running.clear()
            self._waiting.clear()
        for job in jobs:
            job.events.put(JobEvent([], error=ApiError(500, f"engine failure: {reason}")))


def _describe(error: Exception) -> str:
    """``Type: message``, on one line."""
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}"

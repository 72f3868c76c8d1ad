"""``specscope trace --ray``: the workload's batches sharded over model replicas on Ray.

Each replica is a Ray actor holding one :class:`~specscope.tracing.run.Tracer` (one GPU each
with ``--device cuda``, else one CPU). Ray's ``ActorPool`` hands them the batches the driver
formed and returns the records in the batches' order, so the driver appends exactly the bytes a
one-process run writes, resumable per request. A lost replica is restarted and its batch retried.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

from specscope.distributed.cluster import MAX_RETRIES, ray_session, worker_failure
from specscope.errors import SpecscopeError
from specscope.trace.schema import TraceRecord
from specscope.tracing.run import BatchMapper, Tracer, TraceJob

log = logging.getLogger(__name__)


class Replica:
    """A :class:`~specscope.tracing.run.Tracer` on a worker. What it refuses (a drafter of another
    tokenizer, a checkpoint missing a tensor: a :class:`SpecscopeError`) is returned as its text,
    not raised: it would fail every retry of a restarted replica, and Ray prints a raised error's
    traceback, 50 lines, before the driver's one."""

    def __init__(self, job: TraceJob) -> None:
        try:
            self.tracer, self.refused = Tracer(job), None
        except SpecscopeError as error:
            self.tracer, self.refused = None, str(error)

    def trace(self, chunk: Sequence) -> list[TraceRecord] | str:
        if self.tracer is None:
            return self.refused
        try:
            return self.tracer.trace(chunk)
        except SpecscopeError as error:
            return str(error)


def ray_batch_mapper(address: str, workers: int | None = None) -> BatchMapper:
    """A :data:`~specscope.tracing.run.BatchMapper` over ``workers`` replicas (default: one per
    GPU of the cluster with a CUDA device, else one per CPU), never more than there are batches."""

    def run(job: TraceJob, chunks: list[Sequence]) -> Iterator[list[TraceRecord]]:
        with ray_session(address) as ray:
            from ray.util import ActorPool

            gpu = job.device.startswith("cuda")
            unit = "GPU" if gpu else "CPU"
            slots = int(ray.cluster_resources().get(unit, 0))
            if not slots:
                raise SpecscopeError(f"--ray {address}: the cluster offers no {unit} for a trace replica "
                                     f"(--device {job.device})")
            count = max(1, min(workers or slots, slots, len(chunks)))
            if workers and workers > slots:  # a replica beyond them would wait for a slot forever
                log.warning("--ray-workers %d: the cluster offers %d %ss; running %d replicas", workers, slots, unit,
                            count)
            replica = ray.remote(Replica).options(num_gpus=int(gpu), num_cpus=0 if gpu else 1,
                                                 max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
            pool = ActorPool([replica.remote(job) for _ in range(count)])
            try:
                for records in pool.map(lambda actor, chunk: actor.trace.remote(chunk), chunks):
                    if isinstance(records, str):
                        raise SpecscopeError(f"--ray: a trace replica refused: {records}")
                    yield records
            except ray.exceptions.RayError as error:
                raise SpecscopeError(f"--ray: a trace replica failed: {worker_failure(error)}") from None

    return run

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
            if workers and workers > slots:  # a replica beyond them would wait for a slot forever
                log.warning("--ray-workers %d: the cluster offers %d %ss; running %d replicas", workers, slots, unit,
                            slots)
            count = max(1, min(workers or slots, slots, len(chunks)))
            replica = ray.remote(Tracer).options(num_gpus=int(gpu), num_cpus=0 if gpu else 1,
                                                 max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
            pool = ActorPool([replica.remote(job) for _ in range(count)])
            try:
                yield from pool.map(lambda actor, chunk: actor.trace.remote(chunk), chunks)
            except ray.exceptions.RayError as error:
                raise SpecscopeError(f"--ray: a trace replica failed: {worker_failure(error)}") from None

    return run

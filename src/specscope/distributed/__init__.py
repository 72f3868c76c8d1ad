"""Running the expensive verbs on a Ray cluster: ``sweep --ray`` (one Ray actor per group of
cells sharing a server) and ``trace --ray`` (batches sharded over model replicas). Ray places
and retries; the driver only describes the work and is the only writer of results."""

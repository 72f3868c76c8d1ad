"""The trace record: per output position, what one SD step of each proposer would emit there.

Definitions (one place; everything else refers here):

- ``output_token_ids[i]`` is the target's (greedy) output token at output position ``i``,
  ``0 <= i < G`` where ``G`` is the output length.
- ``acc_len[i]`` ("generation length") is the number of tokens one SD step emits when its
  newest input token is ``output_token_ids[i]`` (``i + 1`` output tokens already generated, the
  paper's indexing): accepted drafts + 1 (the bonus or recovered token), measured teacher-forced
  with ``k_max`` drafts, so ``1 <= acc_len[i] <= k_max + 1``. A step that proposes ``k``
  tokens there emits ``min(acc_len[i], k + 1)`` (:mod:`specscope.sim.plan`: the step at ``pos``
  generated tokens reads ``acc_len[pos − 1]``).
- ``draft_len[i]`` (optional) is how many tokens the proposer actually offers at ``i``
  (n-gram offers 0 when no n-gram matches: that step costs no drafting and emits 1 token).
  ``acc_len[i] <= draft_len[i] + 1`` always.
- ``draft_prob[i, j]`` (optional) is the drafter's probability of its ``j``-th proposed token at
  position ``i``: the confidence signal a ``confidence:p`` policy reads (null where nothing was offered);
  ``m`` drafts per position, as many as ``trace --draft-probs`` asked (:data:`DRAFT_PROBS` by default,
  at most k_max; 0: no ``draft_prob``).
- ``tree_rank[i, d]`` (optional, model proposers) is the drafter's rank (0 = its most likely
  token; ties broken by token id) of the target's token ``output_token_ids[i + 1 + d]`` in its
  distribution at depth ``d + 1``, teacher-forced along the target's own path (the drafter fed
  the true tokens ``output[i + 1 .. i + d]``, and for EAGLE/MTP its own states along that path).
  ``-1`` = unknown (past the output's end); a rank above :data:`TREE_RANK_CAP` is stored as the
  cap, which no tree reaches (trees expand at most the top ``TREE_RANK_CAP`` children). Any
  static tree of depth ``<= D`` replays from it: its acc_len is 1 + the longest prefix of
  ``tree_rank[i]`` that is a node (:meth:`specscope.trees.TreeShape.acc_len`); a greedy chain's
  acc_len is 1 + the number of leading zero ranks (up to ``k_max``).

On disk (JSON Lines, one request a line)::

    {"schema": "specscope.trace/1", "id": "r1", "dataset": "gsm8k", "k_max": 20,
     "prompt_token_ids": [...], "output_token_ids": [...],
     "proposers": {"ngram": {"acc_len": [...], "draft_len": [...]},
                   "eagle": {"acc_len": [...], "draft_prob": [[...], ...],
                             "tree_rank": [[0, 2, -1], ...]}}}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from specscope.trees import TREE_RANK_CAP  # noqa: F401  (re-exported: tree_rank entries are capped here)

SCHEMA_VERSION = "specscope.trace/1"
DRAFT_PROBS = 4  # drafts per position whose probability ``specscope trace`` keeps unless asked (--draft-probs)


@dataclass
class ProposerTrace:
    """One proposer's per-position record for one request (all arrays have length G)."""

    acc_len: np.ndarray  # [G] int32, 1 <= acc_len <= k_max + 1
    draft_len: np.ndarray | None = None  # [G] int32, 0 <= draft_len <= k_max
    draft_prob: np.ndarray | None = None  # [G, m] float32, m = drafts whose probability is kept
    tree_rank: np.ndarray | None = None  # [G, D] int16, -1 <= tree_rank <= TREE_RANK_CAP

    def truncated(self, length: int) -> "ProposerTrace":
        """The first ``length`` positions."""
        return ProposerTrace(
            acc_len=self.acc_len[:length],
            draft_len=None if self.draft_len is None else self.draft_len[:length],
            draft_prob=None if self.draft_prob is None else self.draft_prob[:length],
            tree_rank=None if self.tree_rank is None else self.tree_rank[:length],
        )

    def capped(self, k: int) -> "ProposerTrace":
        """As a proposer offering at most ``k`` tokens would show it: acc_len ≤ k + 1, draft_len ≤ k."""
        return replace(self, acc_len=np.minimum(self.acc_len, k + 1),
                       draft_len=None if self.draft_len is None else np.minimum(self.draft_len, k))

    def to_json(self) -> dict:
        out: dict = {"acc_len": self.acc_len.tolist()}
        if self.draft_len is not None:
            out["draft_len"] = self.draft_len.tolist()
        if self.draft_prob is not None:  # NaN (nothing offered there) is written as null; 6 decimals: the last bits,
            # which another batch's matmul shapes move, left out (a resumed trace almost always the bytes of one run whole)
            rounded = np.round(self.draft_prob.astype(float), 6)
            out["draft_prob"] = [[None if np.isnan(v) else v for v in row] for row in rounded.tolist()]
        if self.tree_rank is not None:
            out["tree_rank"] = self.tree_rank.tolist()
        return out


@dataclass
class TraceRecord:
    """One request: its prompt, the target's output, and each proposer's acceptance."""

    id: str
    prompt_token_ids: np.ndarray  # [P] int64
    output_token_ids: np.ndarray  # [G] int64
    proposers: dict[str, ProposerTrace] = field(default_factory=dict)
    k_max: int | None = None
    dataset: str | None = None

    @property
    def prompt_len(self) -> int:
        return int(self.prompt_token_ids.shape[0])

    @property
    def output_len(self) -> int:
        return int(self.output_token_ids.shape[0])

    def acc_len(self, proposer: str) -> np.ndarray:
        """``acc_len`` of ``proposer`` ([G] int32)."""
        return self.proposers[proposer].acc_len

    @property
    def uneven(self) -> list[str]:
        """The proposers whose acc_len array is longer or shorter than the output (the paper's
        traces hold such records)."""
        return [name for name, trace in self.proposers.items() if len(trace.acc_len) != self.output_len]

    def truncated(self, length: int) -> "TraceRecord":
        """The first ``length`` positions of the output and of every proposer's arrays."""
        return replace(self, output_token_ids=self.output_token_ids[:length],
                       proposers={name: trace.truncated(length) for name, trace in self.proposers.items()})

    def capped(self, k: int) -> "TraceRecord":
        """This record as a trace of depth ``k`` would hold it (:meth:`ProposerTrace.capped`); a
        record that declares no k_max still declares none (how deep it was traced stays unknown:
        ``k`` may be deeper)."""
        return replace(self, proposers={name: trace.capped(k) for name, trace in self.proposers.items()},
                       k_max=None if self.k_max is None else min(self.k_max, k))

    def to_json(self) -> dict:
        out: dict = {"schema": SCHEMA_VERSION, "id": self.id}
        if self.dataset is not None:
            out["dataset"] = self.dataset
        if self.k_max is not None:
            out["k_max"] = self.k_max
        out["prompt_token_ids"] = self.prompt_token_ids.tolist()
        out["output_token_ids"] = self.output_token_ids.tolist()
        out["proposers"] = {name: trace.to_json() for name, trace in self.proposers.items()}
        return out


def by_dataset(records: Iterable[TraceRecord]) -> dict[str, list[TraceRecord]]:
    """Records grouped by ``dataset`` (file stem when the records name none), in file order."""
    groups: dict[str, list[TraceRecord]] = {}
    for record in records:
        groups.setdefault(record.dataset or "trace", []).append(record)
    return groups

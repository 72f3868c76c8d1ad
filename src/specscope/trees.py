"""Static token trees: the shape a tree-verification step drafts and verifies.

A tree hangs under the root (the sequence's newest token). Each node is a **path** of child
ranks from the root: ``(0,)`` is the drafter's most likely first token, ``(1,)`` its second,
``(0, 2)`` the third most likely token after ``(0,)``, and so on. A tree is written either as

- branching per depth, ``2x2x1``: two children of the root, two under each, one under each of
  those (2 + 4 + 4 = 10 draft nodes, depth 3); a chain of k is ``1x1x…x1`` (k ones); or
- a list of paths, vLLM's ``speculative_token_tree`` form, e.g. ``[(0,), (1,), (0, 0)]``; every
  prefix of a path must be in the list too.

A step drafts every node and verifies ``nodes + 1`` tokens per sequence (the root included).
Greedy verification accepts the longest root path whose tokens the target agrees with; its
**acc_len** is that path's length + 1 (the bonus token). With ``ranks[i, d]`` = the drafter's
rank of the target's token at depth ``d + 1`` along the target's own path from position i, the
accepted path is the longest prefix of ``ranks[i]`` that is a node: :meth:`TreeShape.acc_len`.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specscope import validate
from specscope.validate import Invalid

MAX_TREE_NODES = 256  # far past any useful tree (EAGLE-2 uses ~60), below a typo's
TREE_RANK_CAP = 63  # traces cap a draft's rank among its siblings here: a rank past it is stored as the cap


@dataclass(frozen=True)
class TreeShape:
    """A static token tree as its sorted node paths (see the module docstring)."""

    paths: tuple[tuple[int, ...], ...]
    name: str

    @classmethod
    def parse(cls, text: str) -> TreeShape:
        """``"2x2x1"`` (branching per depth), a Python/JSON list of paths ``"[(0,), (0, 0)]"``, or
        an irregular tree's :attr:`name` ``"paths:0;1;0.0"`` (its paths, ranks joined by dots)."""
        text = text.strip()
        if re.fullmatch(r"\d+(x\d+)*", text):
            branching = tuple(validate.integer(part, low=1) for part in text.split("x"))
            return cls.from_branching(branching)
        if re.fullmatch(r"paths:\d+(\.\d+)*(;\d+(\.\d+)*)*", text):
            return cls.from_paths([[int(rank) for rank in path.split(".")] for path in text[6:].split(";")])
        try:
            paths = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise Invalid(f"expected a tree as branching per depth (2x2x1) or a list of paths, got {text!r}") from None
        return cls.from_paths(paths)

    @classmethod
    def from_branching(cls, branching: tuple[int, ...]) -> TreeShape:
        """The full tree with ``branching[d]`` children under every node of depth ``d``."""
        if not branching:
            raise Invalid("expected at least one depth")
        nodes = 0
        for depth in range(1, len(branching) + 1):
            nodes += math.prod(branching[:depth])  # Python ints: numpy's int64 wraps past 2**63
            if nodes > MAX_TREE_NODES:
                raise Invalid(f"expected at most {MAX_TREE_NODES} nodes, got more with {'x'.join(map(str, branching))}")
        paths = [p for depth in range(1, len(branching) + 1)
                 for p in itertools.product(*(range(b) for b in branching[:depth]))]
        return cls(tuple(sorted(paths, key=lambda p: (len(p), p))), "x".join(map(str, branching)))

    @classmethod
    def from_paths(cls, paths: object) -> TreeShape:
        """A tree from a list of paths (lists or tuples of non-negative child ranks)."""
        if not isinstance(paths, (list, tuple)) or not paths:
            raise Invalid(f"expected a non-empty list of paths, got {paths!r}")
        if len(paths) > MAX_TREE_NODES:
            raise Invalid(f"expected at most {MAX_TREE_NODES} nodes, got {len(paths)}")
        nodes = set()
        for path in paths:
            if not isinstance(path, (list, tuple)) or not path:
                raise Invalid(f"expected each path to be a non-empty list of child ranks, got {path!r}")
            node = tuple(validate.integer(r, low=0, high=MAX_TREE_NODES) for r in path)
            if node in nodes:
                raise Invalid(f"path {list(node)} is given twice (a tree holds each node once)")
            nodes.add(node)
        for node in nodes:
            if len(node) > 1 and node[:-1] not in nodes:
                raise Invalid(f"path {list(node)} has no parent {list(node[:-1])} in the tree")
        ordered = tuple(sorted(nodes, key=lambda p: (len(p), p)))
        shape = cls(ordered, "")
        branching = shape.branching
        name = "x".join(map(str, branching)) if branching and cls.from_branching(branching).paths == ordered \
            else "paths:" + ";".join(".".join(map(str, p)) for p in ordered)
        return cls(ordered, name)

    @property
    def nodes(self) -> int:
        """Draft tokens per sequence per step."""
        return len(self.paths)

    @property
    def depth(self) -> int:
        """The longest root path: the most drafts one step can accept."""
        return max(len(p) for p in self.paths)

    @property
    def widths(self) -> tuple[int, ...]:
        """Nodes at each depth 1..depth."""
        return tuple(sum(1 for p in self.paths if len(p) == d) for d in range(1, self.depth + 1))

    @property
    def draft_pass_widths(self) -> tuple[int, ...]:
        """Tokens per sequence a model drafter reads in each of its ``depth`` sequential passes:
        pass d expands the nodes of depth d − 1 (the root alone first)."""
        return (1, *self.widths[:-1])

    @property
    def branching(self) -> tuple[int, ...] | None:
        """Children per node at each depth when every node of a depth has the same number of
        children (``2x2x1``); None for an irregular tree."""
        out = []
        for depth in range(self.depth):
            parents = [p for p in self.paths if len(p) == depth] if depth else [()]
            counts = {sum(1 for c in self.paths if len(c) == depth + 1 and c[:-1] == p) for p in parents}
            if len(counts) != 1:
                return None
            out.append(counts.pop())
        return tuple(out)

    @property
    def max_rank(self) -> int:
        """The largest child rank any node uses (a drafter expands its top max_rank + 1)."""
        return max(max(p) for p in self.paths)

    @cached_property
    def children(self) -> np.ndarray:
        """[nodes + 1, max_rank + 1] int32: row n (0 = root, i = paths[i - 1]) holds the row of
        its child of each rank, or -1 where there is none."""
        index = {path: i + 1 for i, path in enumerate(self.paths)}
        table = np.full((self.nodes + 1, self.max_rank + 1), -1, dtype=np.int32)
        for path, row in index.items():
            table[index.get(path[:-1], 0), path[-1]] = row
        return table

    @cached_property
    def parents(self) -> np.ndarray:
        """[nodes + 1] int64: the row of each row's parent (rows as in :attr:`children`; the
        root's is -1)."""
        index = {path: i + 1 for i, path in enumerate(self.paths)}
        return np.array([-1] + [index.get(path[:-1], 0) for path in self.paths], dtype=np.int64)

    @cached_property
    def depths(self) -> np.ndarray:
        """[nodes + 1] int64: each row's depth (the root's is 0)."""
        return np.array([0] + [len(path) for path in self.paths], dtype=np.int64)

    @cached_property
    def ancestors(self) -> np.ndarray:
        """[nodes + 1, nodes + 1] bool: ``[i, j]`` is true when row j lies on the path from the
        root to row i (the root and row i itself included)."""
        table = np.eye(self.nodes + 1, dtype=bool)
        for row in range(1, self.nodes + 1):  # a parent's row comes before its children's
            table[row] |= table[self.parents[row]]
        return table

    def acc_len(self, ranks: np.ndarray) -> np.ndarray:
        """acc_len [G] from ``ranks`` [G, D]: 1 + the longest prefix of each row that is a node
        (a rank beyond the tree, or negative for "unknown", ends the path)."""
        ranks = np.asarray(ranks)
        node = np.zeros(len(ranks), dtype=np.int64)
        accepted = np.zeros(len(ranks), dtype=np.int64)
        table = self.children
        for d in range(min(self.depth, ranks.shape[1] if ranks.ndim == 2 else 0)):
            rank = ranks[:, d]
            inside = (node >= 0) & (rank >= 0) & (rank <= self.max_rank)
            child = np.full(len(ranks), -1, dtype=np.int64)
            child[inside] = table[node[inside], rank[inside]]
            node = child
            accepted += node >= 0
        return accepted + 1

    def describe(self) -> dict[str, object]:
        """What a result row says about the tree."""
        return {"tree": self.name, "tree_nodes": self.nodes, "tree_depth": self.depth}


def parse_tree(text: str) -> TreeShape:
    """:meth:`TreeShape.parse` for argparse (``type=validate.arg(parse_tree)``) and configs: at
    most :data:`specscope.validate.K_MAX_LIMIT` deep, as any k."""
    tree = TreeShape.parse(text)
    if tree.depth > validate.K_MAX_LIMIT:
        raise Invalid(f"expected a tree at most {validate.K_MAX_LIMIT} deep, got {tree.name} of depth {tree.depth}")
    return tree


def chain(k: int) -> TreeShape:
    """The chain of ``k`` drafts, ``1x…x1``."""
    return TreeShape.from_branching((1,) * validate.integer(k, low=1))


def check_replayable(tree: TreeShape) -> None:
    """Refuse a tree with a child rank at or past :data:`TREE_RANK_CAP`, which no trace can replay
    (a rank stored at the cap is "that or worse")."""
    if tree.max_rank >= TREE_RANK_CAP:
        raise Invalid(f"{tree.name} has a child of rank {tree.max_rank} (the top-ranked child is 0): expected ranks "
                      f"below {TREE_RANK_CAP}, the traces' rank cap")


def parse_tree_list(text: str) -> tuple[TreeShape, ...]:
    """``--trees``: a comma list of branching shapes (``2x2x1,4x2x2x1``), each at most
    :data:`specscope.validate.K_MAX_LIMIT` deep and its children's ranks below the traces' rank cap
    (:data:`TREE_RANK_CAP`: a rank stored there is "that or worse", so a wider tree could not be
    replayed)."""
    trees = tuple(parse_tree(part) for part in validate.split_list(text))
    if not trees:
        raise Invalid(f"expected a comma list of trees such as 2x2x1,4x2x2x1, got {text!r}")
    for tree in trees:
        check_replayable(tree)
    repeated = validate.first_repeat(trees)
    if repeated is not None:
        raise Invalid(f"expected distinct trees, got {repeated.name} twice")
    return trees

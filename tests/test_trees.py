"""Static token trees: parsing, sizes, and acc_len from drafter ranks, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.trees import TreeShape, chain, parse_tree, parse_tree_list
from specscope.validate import Invalid, split_list


def test_branching_per_depth():
    tree = TreeShape.parse("2x2x1")
    assert (tree.nodes, tree.depth, tree.widths) == (10, 3, (2, 4, 4))
    assert tree.draft_pass_widths == (1, 2, 4)
    assert tree.branching == (2, 2, 1) and tree.name == "2x2x1" and tree.nodes > tree.depth
    assert chain(3) == TreeShape.parse("1x1x1") and chain(3).nodes == chain(3).depth


def test_paths_form_and_its_name():
    tree = TreeShape.parse("[(0,), (1,), (0, 0)]")
    assert (tree.nodes, tree.depth, tree.widths, tree.branching) == (3, 2, (2, 1), None)
    assert tree.name == "paths:0;1;0.0"
    assert TreeShape.parse("[[0], [1], [0, 0], [1, 0]]").name == "2x1"  # a full tree is named by its branching
    assert TreeShape.parse(tree.name) == tree  # a result row's name reads back (report --measured, costmodel fit)


def test_tree_lists_and_limits():
    """--trees: a list of paths is one item whatever its commas; repeats and trees deeper than
    any k (64) are refused, as --tree's one tree is."""
    trees = parse_tree_list("2x1, [(0,), (1,), (0, 0)],paths:0;0.0")
    assert [t.name for t in trees] == ["2x1", "paths:0;1;0.0", "1x1"]
    for text, message in [("2x2,[[0],[1],[0,0],[0,1],[1,0],[1,1]]", "2x2 twice"), ("1x" * 64 + "1", "at most 64 deep")]:
        with pytest.raises(Invalid, match=message):
            parse_tree_list(text)
    with pytest.raises(Invalid, match="at most 64 deep"):
        parse_tree("1x" * 64 + "1")
    assert split_list(" a, tree:[(0,), (1,)] , b ") == ["a", "tree:[(0,), (1,)]", "b"]
    for text in (",1", "1,,8", "1,8,", "a, ,b"):  # a value left out is refused, not dropped
        with pytest.raises(Invalid, match="is empty"):
            split_list(text)


@pytest.mark.parametrize("text", ["", "0x2", "2x", "[(0, 0)]", "[]", "[(-1,)]", "20x20", "nonsense", "paths:", "paths:0;1.5"])
def test_bad_trees_are_refused(text):
    with pytest.raises(Invalid):
        TreeShape.parse(text)


@pytest.mark.parametrize("text", ["4x4611686018427387904", "2x4611686018427387904", "16x1152921504606846976"])
def test_widths_whose_product_wraps_int64_are_refused(text):
    """The node count is a Python int: numpy's int64 product wrapped to 0 or below, passed the
    limit and the tree's enumeration ran out of memory."""
    with pytest.raises(Invalid, match="at most 256 nodes"):
        TreeShape.parse(text)


def test_a_path_given_twice_is_refused_not_dropped():
    for text in ("[(0,), (0,)]", "paths:0;1;0;0.0"):
        with pytest.raises(Invalid, match=r"path \[0\] is given twice"):
            TreeShape.parse(text)


def test_a_child_rank_past_the_cap_is_named():
    """A tree that skips ranks: its error names the rank, not a count of children it lacks."""
    with pytest.raises(Invalid, match="paths:0;70 has a child of rank 70"):
        parse_tree_list("[(0,),(70,)]")


def test_acc_len_from_ranks():
    # ranks of the target's token at depths 1..3 along its own path, for five positions
    ranks = np.array([[0, 0, 0], [1, 1, 0], [1, 2, 0], [2, 0, 0], [0, 1, 3]])
    assert TreeShape.parse("2x2x1").acc_len(ranks).tolist() == [4, 4, 2, 1, 3]
    assert chain(3).acc_len(ranks).tolist() == [4, 1, 1, 1, 2]
    assert chain(1).acc_len(ranks).tolist() == [2, 1, 1, 1, 2]
    irregular = TreeShape.parse("[(0,), (1,), (0, 0)]")
    assert irregular.acc_len(ranks).tolist() == [3, 2, 2, 1, 2]
    assert TreeShape.parse("2x2x1").acc_len(np.array([[0, -1, 0]])).tolist() == [2]  # unknown ends the path

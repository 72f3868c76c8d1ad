"""Streamed pieces join to the whole decoded output, whatever the event sizes, with characters
that span several byte-level tokens held back until complete."""

from __future__ import annotations

import random

import pytest

tokenizers = pytest.importorskip("tokenizers")

from specscope.serve.detokenize import INCOMPLETE, IncrementalDecoder
from specscope.zoo.shipped import model_dir

TEXT = "Hello café — naïve 日本語 🚀🚀 x = f(y)\n    return x  # done ✓"


@pytest.mark.parametrize("seed", range(5))
def test_pieces_join_to_the_whole(seed):
    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir("target") / "tokenizer.json"))
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    assert len(ids) > len(TEXT) // 2  # the multi-byte characters take several tokens each
    rng, decoder, pieces, at = random.Random(seed), IncrementalDecoder(tokenizer), [], 0
    while at < len(ids):
        size = rng.randint(1, 3)
        chunk, at = ids[at : at + size], at + size
        pieces.append(decoder.add(chunk, final=at >= len(ids)))
    assert "".join(pieces) == tokenizer.decode(ids) == TEXT
    assert not any(INCOMPLETE in piece for piece in pieces)


@pytest.mark.parametrize("seed", range(5))
def test_stop_strings_cut_the_text_whatever_the_event_sizes(seed):
    """Pieces join to the text before the first stop string; the tokens end with the one that
    completed it; text held back while it might begin a stop string is never sent early."""
    from specscope.serve.output import OutputText

    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir("target") / "tokenizer.json"))
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    stops = ("never there", "naïve 日本", "naïve")  # the shorter one is met first
    cut = TEXT.index("naïve")
    needed = next(n for n in range(len(ids)) if "naïve" in tokenizer.decode(ids[:n]))
    rng, output, pieces, at = random.Random(seed), OutputText(tokenizer, stops), [], 0
    while not pieces or pieces[-1].stop is None:
        size = rng.randint(1, 3)
        chunk, at = ids[at : at + size], at + size
        pieces.append(output.add(chunk, final=at >= len(ids)))
    assert "".join(p.text for p in pieces) == TEXT[:cut]
    assert [t for p in pieces for t in p.token_ids] == ids[:needed] and pieces[-1].stop == "naïve"


def test_no_stop_string_ends_the_output_within_min_tokens():
    """As in vLLM: a stop string completed by one of the first ``min_tokens`` tokens does not end
    the output (``stop: ["!"]`` with ``min_tokens: 6`` ended after 1 token; one completed by the
    min_tokens-th token ended it too, where vLLM goes on); one completed later does."""
    from specscope.serve.output import OutputText

    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir("target") / "tokenizer.json"))
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    needed = next(n for n in range(len(ids)) if "naïve" in tokenizer.decode(ids[:n]))
    early = OutputText(tokenizer, ("naïve",), min_tokens=needed + 1)  # reached after the string was complete
    pieces = [early.add([token], final=i == len(ids) - 1) for i, token in enumerate(ids)]
    assert all(p.stop is None for p in pieces) and "".join(p.text for p in pieces) == tokenizer.decode(ids)
    exact = OutputText(tokenizer, ("naïve",), min_tokens=needed)  # the token that completes it is the min_tokens-th
    pieces = [exact.add([token], final=i == len(ids) - 1) for i, token in enumerate(ids)]
    assert all(p.stop is None for p in pieces)
    after = OutputText(tokenizer, ("naïve",), min_tokens=needed - 1)  # … is the first past min_tokens
    pieces = [after.add([token], final=i == len(ids) - 1) for i, token in enumerate(ids[:needed])]
    assert pieces[-1].stop == "naïve"


@pytest.mark.parametrize("stop", [(), ("never there",)])
def test_a_stop_tokens_text_is_left_out(stop):
    """As vLLM returns an output a stop token ended (EOS or stop_token_ids): the token among its
    tokens, its text not (a stop token "." ended the text with "."), text held back
    before it (a character cut short) released at the end."""
    from specscope.serve.output import OutputText

    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir("target") / "tokenizer.json"))
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    rocket = tokenizer.encode("🚀", add_special_tokens=False).ids
    assert len(rocket) > 1  # so that its last byte token arrives alone below
    end = TEXT.index("🚀") + 1
    upto = next(n for n in range(len(ids)) if tokenizer.decode(ids[:n]) == TEXT[:end])
    output = OutputText(tokenizer, stop)
    pieces = [output.add(ids[: upto - 1], final=False), output.add([ids[upto - 1], 17], final=True, stop_token=True)]
    assert "".join(p.text for p in pieces) == TEXT[:end] and pieces[-1].token_ids == [ids[upto - 1], 17]
    alone = OutputText(tokenizer, stop)  # the stop token alone, after a character cut short: released as decoded
    pieces = [alone.add(ids[: upto - 1], final=False), alone.add([17], final=True, stop_token=True)]
    assert "".join(p.text for p in pieces) == tokenizer.decode(ids[: upto - 1]) and pieces[-1].token_ids == [17]

"""A request's output as an answer shows it: token events turned into text, cut at stop strings.

:class:`OutputText` takes each engine event's tokens in order and returns the text and tokens to
send. Stop strings follow vLLM: the output ends just before the first occurrence of any of them
(the string itself is not returned); its tokens end with the token that completed the string.
While streaming, the last ``len(longest stop) - 1`` characters are held back until they can no
longer begin a stop string, so text already sent never has to be taken back. Before the output
has more than ``min_tokens`` tokens no stop string ends it (as in vLLM, which looks for them only
in the text of the tokens after the first ``min_tokens``). An output that a stop token ended (EOS,
or one of ``stop_token_ids``) keeps that token among its tokens but not its text, as vLLM returns it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specscope.serve.detokenize import IncrementalDecoder


@dataclass
class Piece:
    """What one event adds: ``text``, ``token_ids``, and ``stop`` (the stop string that ended
    the output here, else ``None``)."""

    text: str
    token_ids: list[int]
    stop: str | None = None


class OutputText:
    """Text of one output. ``tokenizer``: a ``tokenizers.Tokenizer`` or ``None`` (then the text
    is empty and ``stop`` must be empty)."""

    def __init__(self, tokenizer, stop: tuple[str, ...] = (), min_tokens: int = 0) -> None:
        self.decoder = IncrementalDecoder(tokenizer) if tokenizer is not None else None
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""  # decoded so far
        self.sent = 0  # characters of ``text`` already returned
        self.min_tokens, self.tokens = min_tokens, 0
        self.before_min = 0  # characters decoded before the output reached min_tokens: no stop string ends there

    def add(self, token_ids: list[int], final: bool, stop_token: bool = False) -> Piece:
        """The piece ``token_ids`` add; ``final``: the output ends with them; ``stop_token``: it
        ends on a stop token, whose text is left out."""
        decoded = token_ids[:-1] if stop_token else token_ids
        if self.decoder is None:
            return Piece("", list(token_ids))
        if not self.stop:
            return Piece(self.decoder.add(decoded, final), list(token_ids))
        for i, token in enumerate(decoded):
            self.tokens += 1
            self.text += self.decoder.add([token], final and i == len(decoded) - 1)
            if self.tokens <= self.min_tokens:
                self.before_min = len(self.text)  # a stop string must end after this
                continue
            hits = [(self.text.find(s, max(self.sent, self.before_min - len(s) + 1)), s) for s in self.stop]
            hits = [(at, s) for at, s in hits if at >= 0]
            if hits:
                at, string = min(hits)
                piece = Piece(self.text[self.sent : at], list(token_ids[: i + 1]), string)
                self.sent = len(self.text)
                return piece
        if final and not decoded:  # only a stop token came: release a character held back before it
            self.text += self.decoder.add([], True)
        end = len(self.text) if final else max(self.sent, len(self.text) - self.hold)
        piece = Piece(self.text[self.sent : end], list(token_ids))
        self.sent = end
        return piece

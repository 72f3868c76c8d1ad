"""Streamed text: decode only the tail of an output at each event, not the whole output.

Byte-level BPE tokens do not decode one by one: a character can span tokens, and how a token
reads may depend on its left neighbour. :class:`IncrementalDecoder` therefore decodes a short
window that starts at the tokens already streamed in the previous event (the ``prefix``), emits
what the newer tokens add to that window's text, and holds back text that ends in an incomplete
character (U+FFFD) until the next tokens complete it. Each event decodes O(window) tokens, so
a stream of n tokens costs O(n), not the O(n²) of decoding the whole output every time.
"""

from __future__ import annotations

INCOMPLETE = "\ufffd"  # what a decoder shows for a character whose bytes are not all there


class IncrementalDecoder:
    """Feed each event's token ids to :meth:`add`; the returned pieces join to the decoded
    whole output. ``tokenizer`` is a ``tokenizers.Tokenizer`` (anything with ``decode(ids)``)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.prefix = 0  # window start: the previous event's streamed tokens
        self.read = 0  # tokens whose text is already streamed

    def add(self, token_ids: list[int], final: bool = False) -> str:
        """The new text that ``token_ids`` add ("" while a character is incomplete, unless
        ``final``: the output ends here)."""
        self.tokens.extend(token_ids)
        shown = self.tokenizer.decode(self.tokens[self.prefix : self.read]) if self.read > self.prefix else ""
        text = self.tokenizer.decode(self.tokens[self.prefix :]) if len(self.tokens) > self.prefix else ""
        if len(text) <= len(shown) or (text.endswith(INCOMPLETE) and not final):
            return ""
        self.prefix, self.read = self.read, len(self.tokens)
        return text[len(shown) :]

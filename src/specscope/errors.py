"""The one exception type users see: a one-line message, no traceback, a non-zero exit."""


class SpecscopeError(Exception):
    """A problem with the user's input or environment, stated in one line.

    The message names the file (and line or field) and what was expected; the CLI prints it
    as ``specscope: error: <message>`` and exits with status 2.
    """


def where(path: object, line: int | None = None, field: str | None = None) -> str:
    """Format a location prefix such as ``traces.jsonl:12: field 'acc_len'``."""
    text = str(path)
    if line is not None:
        text += f":{line}"
    if field is not None:
        text += f": field '{field}'"
    return text

"""Chat prompts: the model's chat template rendered as transformers renders it.

The template is ``chat_template`` of the model directory's ``tokenizer_config.json`` (a string,
or a list of ``{"name", "template"}`` of which "default" is taken), else the file
``chat_template.jinja``. It is rendered with jinja2's sandboxed environment
(``ImmutableSandboxedEnvironment``, ``trim_blocks``, ``lstrip_blocks``, the ``raise_exception``
function and a ``tojson`` filter, as transformers has them) with ``messages``,
``add_generation_prompt=True``, ``bos_token`` and ``eos_token``. The rendered text is tokenised
without adding special tokens (the template writes them).
"""

from __future__ import annotations

import json
from pathlib import Path

from specscope.errors import SpecscopeError
from specscope.fileio import read_json_object
from specscope.serve.protocol import ApiError


class ChatTemplate:
    """A compiled chat template with the special tokens it is rendered with."""

    def __init__(
        self, source: str, bos_token: str = "", eos_token: str = "", origin: str = "chat template"
    ) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        try:
            self.template = env.from_string(source)
        except TemplateError as error:
            raise SpecscopeError(f"{origin}: not a valid jinja template ({error})") from None
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text; 400 when the template refuses the messages."""
        from jinja2 import TemplateError

        try:
            return self.template.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except (TemplateError, TypeError, ValueError) as error:
            raise ApiError(400, f"'messages': the model's chat template refused them ({error})") from None


def _token_text(value: object) -> str:
    """A special token as tokenizer_config.json writes it: text or ``{"content": text}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def load_chat_template(model_dir: Path) -> ChatTemplate | None:
    """The chat template of ``model_dir``, or ``None`` when it has none."""
    config_path = Path(model_dir) / "tokenizer_config.json"
    config = read_json_object(config_path) if config_path.is_file() else {}
    source = config.get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    origin = f"{config_path}: field 'chat_template'"
    jinja_path = Path(model_dir) / "chat_template.jinja"
    if not isinstance(source, str) and jinja_path.is_file():
        source, origin = jinja_path.read_text(encoding="utf-8"), str(jinja_path)
    if not isinstance(source, str) or not source:
        return None
    bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
    return ChatTemplate(source, bos, eos, origin)

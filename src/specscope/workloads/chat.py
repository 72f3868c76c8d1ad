"""A model's chat template, rendered as transformers' ``apply_chat_template`` renders it: for a
workload's prompts (one user turn) and for ``specscope serve``'s chat messages.

The template is read from the model directory: ``chat_template.jinja`` if present, else the
``chat_template`` field of ``tokenizer_config.json`` (a string, or a list of named templates
of which ``default`` is used). It is rendered with jinja2 in a sandbox with transformers'
conventions: ``trim_blocks``/``lstrip_blocks``, ``messages=[{"role": "user", "content": ...}]``,
``add_generation_prompt=True``, the ``bos_token``/``eos_token`` strings of the config,
``raise_exception`` and a ``tojson`` filter. A directory without a template gets the **plain
fallback**: the prompt text unchanged (what a base model without chat tuning expects).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from specscope.reading import read_json_object
from specscope.errors import SpecscopeError


@dataclass(frozen=True)
class ChatTemplate:
    """A jinja2 template (``None``: the plain fallback), the special-token strings it uses, and
    where it was read (what its errors name)."""

    source: str | None
    bos_token: str = ""
    eos_token: str = ""
    origin: str = "chat template"

    def apply(self, prompt: str) -> str:
        """The text a model with this template sees for one user turn, ready for its answer."""
        return prompt if self.source is None else self.render([{"role": "user", "content": prompt}])

    def render(self, messages: list[dict[str, str]]) -> str:
        """The text a model with this template sees for ``messages``, ready for its answer. A
        template is code: whatever it fails with on them (its ``raise_exception``, a ``TypeError``
        of its own arithmetic) is a :class:`SpecscopeError` naming where it was read."""
        try:
            return _compile(self.source, self.origin).render(
                messages=messages, add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token)
        except SpecscopeError:
            raise
        except Exception as error:  # noqa: BLE001 — any error the template's own code raises
            raise SpecscopeError(f"{self.origin}: the chat template failed ({type(error).__name__}: {error})") from None


def load_chat_template(model_dir: str | Path) -> ChatTemplate:
    """The chat template of ``model_dir`` (see the module docstring)."""
    model_dir = Path(model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config = read_json_object(config_path) if config_path.is_file() else {}
    source = config.get("chat_template")
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        source = jinja_file.read_text(encoding="utf-8")
    elif isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        if "default" not in named:
            raise SpecscopeError(f"{config_path}: field 'chat_template': a list without a 'default' template")
        source = named["default"]
    if source is not None and not isinstance(source, str):
        raise SpecscopeError(f"{config_path}: field 'chat_template': expected a string")
    origin = str(jinja_file) if jinja_file.is_file() else f"{config_path}: field 'chat_template'"
    if source is not None:
        _compile(source, origin)
    return ChatTemplate(source or None, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")),
                        origin)


def _token_text(value: object) -> str:
    """A special token given as a string or as ``{"content": ...}`` (older configs)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


@functools.lru_cache(maxsize=8)
def _compile(source: str, origin: str = "chat template"):
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise SpecscopeError(
            f"{origin}: applying a chat template needs jinja2 (pip install 'specscope[engine]')"
        ) from None

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise SpecscopeError(f"{origin}: chat template line {error.lineno}: {error.message}") from None

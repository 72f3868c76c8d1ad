"""Chat templates rendered like transformers' apply_chat_template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.errors import SpecscopeError
from specscope.workloads.chat import ChatTemplate, load_chat_template
from specscope.zoo.tokenizer import CHAT_TEMPLATE

FIXTURES = Path(__file__).parent / "fixtures"


def test_llama3_style_template():
    template = load_chat_template(FIXTURES / "llama3_chat")
    assert template.apply("  What is 2 + 2? ") == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_zoo_template():
    assert ChatTemplate(CHAT_TEMPLATE).apply("Hi!") == "<|user|>Hi!<|assistant|>"


def test_plain_fallback_without_template(tmp_path):
    assert load_chat_template(tmp_path).apply("raw text") == "raw text"
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "</s>"}', encoding="utf-8")
    assert load_chat_template(tmp_path).apply("raw text") == "raw text"


def test_jinja_file_wins_and_named_lists(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages[0]['content'] }}"}]}
    ), encoding="utf-8")
    assert load_chat_template(tmp_path).apply("x") == "Dx"
    (tmp_path / "chat_template.jinja").write_text("J{{ messages[0]['content'] }}", encoding="utf-8")
    assert load_chat_template(tmp_path).apply("x") == "Jx"


def test_broken_templates_are_one_line_errors(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for %}"}), encoding="utf-8")
    with pytest.raises(SpecscopeError, match="tokenizer_config.json: field 'chat_template': chat template line 1"):
        load_chat_template(tmp_path)
    raising = ChatTemplate("{{ raise_exception('only user/assistant roles') }}")
    with pytest.raises(SpecscopeError, match="only user/assistant roles"):
        raising.apply("x")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] + 1 }}"}),
                                                    encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"tokenizer_config\.json: field 'chat_template': the chat template failed "
                                             r"\(TypeError: can only concatenate str"):  # its own code's error: a traceback
        load_chat_template(tmp_path).apply("x")
    (tmp_path / "tokenizer_config.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"tokenizer_config.json:1: invalid JSON"):
        load_chat_template(tmp_path)


def test_same_text_as_transformers():
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    for source, bos in ((json.loads((FIXTURES / "llama3_chat" / "tokenizer_config.json").read_text())["chat_template"],
                         "<|begin_of_text|>"), (CHAT_TEMPLATE, "")):
        hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos or None)
        hf.chat_template = source
        expected = hf.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False,
                                          add_generation_prompt=True)
        assert ChatTemplate(source, bos_token=bos).apply("Say hi.") == expected

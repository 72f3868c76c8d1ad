"""The `openai` SDK against a live `specscope serve` on loopback: completions and chat,
streamed and not, and the model's own route."""

from __future__ import annotations

import pytest
from serving_helpers import start_server, write_chat_model

pytestmark = pytest.mark.slow  # the openai SDK against a live server

openai = pytest.importorskip("openai")

PROMPT = [5, 6, 7, 8, 5, 6, 7, 8]
MESSAGES = [{"role": "system", "content": "w9"}, {"role": "user", "content": "w5 w6 w7"}]
GREEDY = {"temperature": 0, "max_tokens": 12, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def client(tiny_model, tmp_path_factory):
    model = write_chat_model(tiny_model, tmp_path_factory.mktemp("sdk") / "m")
    running = start_server(model, "ngram", k=3, max_batch_size=4, max_seq_len=128)
    yield openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
    running.close()


def test_models(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")


def test_completions_streamed_and_not(client):
    answer = client.completions.create(model="tiny", prompt=PROMPT, **GREEDY)
    (choice,) = answer.choices
    assert choice.finish_reason == "length" and answer.usage.completion_tokens == 12
    assert len(choice.text.split()) == 12 and answer.usage.prompt_tokens == len(PROMPT)
    text = client.completions.create(model="tiny", prompt="w5 w6 w7 w8 w5 w6 w7 w8", **GREEDY).choices[0].text
    assert text == choice.text  # the word-level tokenizer: the same prompt ids
    stream = client.completions.create(
        model="tiny", prompt=PROMPT, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 12


def test_chat_streamed_and_not(client):
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, **GREEDY)
    (choice,) = answer.choices
    assert choice.message.role == "assistant" and len(choice.message.content.split()) == 12
    assert choice.finish_reason == "length" and answer.usage.completion_tokens == 12
    chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, stream=True, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_errors_reach_the_sdk_as_its_exceptions(client):
    with pytest.raises(openai.BadRequestError, match="'seed'"):
        client.completions.create(model="tiny", prompt=PROMPT, seed=2**80)
    with pytest.raises(openai.BadRequestError, match="'response_format'"):
        client.chat.completions.create(model="tiny", messages=MESSAGES, response_format={"type": "json_object"})
    assert client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2).usage.completion_tokens == 2

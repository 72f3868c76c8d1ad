"""Check that the zoo's models are good at the bundled tasks and that SD with them is lossless.

- **exact match** per task: greedy output (decoded, stripped) equals the bundled reference;
  for ``math`` the final answer ("The answer is N") is compared (:func:`~.tasks.extract_answer`);
- **similarity**: difflib's ratio between the decoded output and the whole reference, averaged
  (how close the misses are: 1.0 = identical);
- **distinct-4**: distinct token 4-grams / token 4-grams of one output, averaged over outputs
  (a model that loops on a phrase scores low; an output shorter than 4 tokens counts as 1);
- **α, τ** per proposer (``ngram``, ``draft``, ``eagle``, ``eagle3``, ``mtp``) and task, measured with the
  reference engine at proposal length ``k`` (greedy), plus ``greedy_match``: whether SD output
  equalled the target's plain greedy output for every request.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path

from specscope.engine.runner import Engine
from specscope.assemble import load_engine
from specscope.methods import METHODS, NO_SD, method
from specscope.workloads.bundled import read_bundled
from specscope.workloads.chat import load_chat_template
from specscope.zoo.shipped import ZOO_DRAFTERS, model_dir
from specscope.workloads.tasks import TASKS, extract_answer

log = logging.getLogger(__name__)

MAX_TOKENS = 160  # above every bundled reference's length in the zoo tokenizer
# what the zoo target can run: the reference engine's methods without a checkpoint, or with a shipped one
PROPOSERS = tuple(m.name for m in METHODS if m.reference and (not m.needs_checkpoint or m.name in ZOO_DRAFTERS))


@dataclass
class TaskScore:
    model: str
    task: str
    requests: int
    exact_match: float
    similarity: float
    distinct_4: float
    mean_output_tokens: float


@dataclass
class ProposerScore:
    method: str
    task: str
    k: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    greedy_match: bool


def distinct_4(tokens: list[int]) -> float:
    """Distinct 4-grams / 4-grams of one output (1.0 when it has fewer than 4 tokens)."""
    grams = [tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / len(grams) if grams else 1.0


def decode_all(engine: Engine, prompts: dict[str, list[int]], max_tokens: int) -> dict[str, list[int]]:
    """Greedy outputs of every prompt, ``engine.max_batch_size`` at a time (EOS excluded)."""
    outputs = engine.generate(prompts.items(), max_tokens)
    eos = engine.eos_token_ids
    return {rid: [t for t in ids if t not in eos] for rid, ids in outputs.items()}


def task_prompts(target_dir: Path, tokenizer, task: str, n: int) -> tuple[dict[str, list[int]], dict[str, dict]]:
    """The first ``n`` bundled requests of ``task``, chat-templated and tokenised."""
    template = load_chat_template(target_dir)
    records = read_bundled(task)[:n]
    prompts = {r["id"]: tokenizer.encode(template.apply(r["prompt"]), add_special_tokens=False).ids for r in records}
    return prompts, {r["id"]: r for r in records}


def score_model(name: str, zoo: Path | None, n: int, batch_size: int = 8) -> list[TaskScore]:
    """Exact match and distinct-4 of zoo model ``name`` (``target`` or ``draft``) per task."""
    directory = model_dir(name, zoo)
    engine, tokenizer = load_engine(directory, NO_SD, max_batch_size=batch_size, max_seq_len=512)
    scores = []
    for task in TASKS:
        prompts, records = task_prompts(directory, tokenizer, task, n)
        outputs = decode_all(engine, prompts, MAX_TOKENS)
        texts = {rid: tokenizer.decode(ids).strip() for rid, ids in outputs.items()}
        right = sum(extract_answer(task, texts[rid]) == records[rid]["answer"] for rid in prompts)
        close = sum(difflib.SequenceMatcher(None, texts[rid], records[rid]["reference"]).ratio() for rid in prompts)
        scores.append(TaskScore(name, task, len(prompts), right / len(prompts), close / len(prompts),
                                sum(distinct_4(o) for o in outputs.values()) / len(outputs),
                                sum(len(o) for o in outputs.values()) / len(outputs)))
    return scores


def proposer_engines(zoo: Path | None, k: int, batch_size: int = 8,
                     methods: tuple[str, ...] = PROPOSERS) -> dict[str, tuple]:
    """The zoo target's engines, without SD (``none``) and with each proposer of ``methods`` at
    ``k``, each ``(engine, tokenizer)``: loaded at once, so that a broken checkpoint is refused
    before anything is scored."""
    target_dir = model_dir("target", zoo)
    engines = {NO_SD: load_engine(target_dir, NO_SD, max_batch_size=batch_size, max_seq_len=512)}
    engines.update({name: load_engine(target_dir, name, model_dir(name, zoo) if method(name).needs_checkpoint else None,
                                      k=k, max_batch_size=batch_size, max_seq_len=512) for name in methods})
    return engines


def score_proposers(zoo: Path | None, n: int, engines: dict[str, tuple]) -> list[ProposerScore]:
    """α and τ of each proposer with the zoo target, per task (reference engine, greedy), from
    :func:`proposer_engines`."""
    plain, tokenizer = engines[NO_SD]
    per_task = {task: task_prompts(model_dir("target", zoo), tokenizer, task, n)[0] for task in TASKS}
    expected = {task: decode_all(plain, prompts, MAX_TOKENS) for task, prompts in per_task.items()}
    scores = []
    for name, (engine, _) in engines.items():
        if name == NO_SD:
            continue
        k = engine.k
        for task, prompts in per_task.items():
            engine.reset_stats()
            outputs = decode_all(engine, prompts, MAX_TOKENS)
            scores.append(ProposerScore(name, task, k, engine.stats.acceptance_rate(),
                                        engine.stats.mean_acceptance_length(), outputs == expected[task]))
            log.info("%s on %s: alpha %s", name, task, scores[-1].acceptance_rate)
    return scores

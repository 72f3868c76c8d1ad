"""The paper's six datasets as workloads: its prompt formats and its sampling (seed 42).

Each loader reads the dataset's own format, from a local file or, with ``source="hub"``, through
the ``datasets`` library (imported only then; it needs network access). Local files:
``.jsonl`` (one object a line), ``.json`` (a list of objects), ``.csv`` (a header row) or
``.parquet`` (needs pyarrow). Prompts (the user's message, before any chat template):

- ``instructcoder``: ``{input}\\n\\n{instruction} Just output the code, do not include any
  explanation.`` (fields ``instruction``, ``input``; reference ``output``);
- ``sharegpt``: the first user turn (``from`` = ``human``/``user``) of ``conversations`` with at
  least 2 turns, kept when its length is 4–1024 tokens (the ``--tokenizer``'s tokens, else
  whitespace-separated words); reference: the next turn;
- ``cnn_dailymail`` (3.0.0): ``Could you summarize the following article, please reuse text from
  the article if possible: `` + ``article`` (reference ``highlights``);
- ``gsm8k``: ``question`` (reference ``answer``);
- ``aime``: the problem (``Problem``/``problem``/``Question``/``question``) of contests 2022–2024;
  the year is ``Year``/``year``, else the first 20xx in ``url``/``ID``/``id``;
- ``gpqa`` (GPQA-Main): zero-shot multiple choice as in the GPQA paper's zero-shot prompt, the
  four answers shuffled per question with the seed (reference: the correct letter).

Sampling: the kept rows in file order, then ``random.Random(seed).sample(rows, min(n, kept))``.
Rows that are left out (too few turns, wrong length, other years) are counted by reason and
reported, never dropped silently; a row that lacks a needed field stops the load with
``file:line: field 'x': ...``.
"""

from __future__ import annotations

import csv
import io
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specscope.errors import SpecscopeError, where
from specscope.reading import parse_json, read_jsonl, read_text
from specscope.trace.fields import Fields
from specscope.workloads.tasks import CODE_SUFFIX, SUMMARY_PREFIX

if TYPE_CHECKING:
    from specscope.workloads.chat import ChatTemplate

PAPER_SEED = 42  # the paper sampled its requests with this seed
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_TOKENS = 4, 1024
SHAREGPT_USER = ("human", "user")  # who writes a ShareGPT turn: the user ...
SHAREGPT_MODEL = ("gpt", "assistant", "chatgpt", "bard", "bing")  # ... or the model (a reference is its turn)
AIME_YEARS = (2022, 2023, 2024)
GPQA_TEMPLATE = ("What is the correct answer to this question: {question}\n\nChoices:\n{choices}\n\n"
                 'Format your response as follows: "The correct answer is (insert answer here)"')


@dataclass(frozen=True)
class Row:
    """One source row: its 0-based ``index`` among the source's rows (request ids are
    ``{dataset}-{index}``) and where it came from (``file:line`` or ``hub name[row]``)."""

    index: int
    data: dict
    location: str


@dataclass
class Prompt:
    """A converted row: ``prompt`` text and, when the dataset has one, the ``reference``."""

    id: str
    prompt: str
    reference: str | None = None


@dataclass
class LoadReport:
    """How many rows were read, kept, and left out by reason."""

    rows: int = 0
    kept: int = 0
    left_out: Counter = field(default_factory=Counter)
    without_reference: int = 0  # kept rows with no reference output (a ShareGPT prompt the user answered)

    def summary(self) -> str:
        parts = [f"{count} {reason}" for reason, count in sorted(self.left_out.items())]
        bare = f" ({self.without_reference} without a reference output)" if self.without_reference else ""
        return f"{self.rows} rows read, {self.kept} kept{bare}" + (f"; left out: {', '.join(parts)}" if parts else "")


Converter = Callable[[Row, "Context"], "Prompt | str"]  # a str names the reason a row is left out


@dataclass(frozen=True)
class Context:
    seed: int
    count_tokens: Callable[[str], int]


def _need(row: Row, *names: str) -> str:
    """The first of ``names`` present in the row, as text; an error naming the first if none."""
    for name in names:
        value = row.data.get(name)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    raise SpecscopeError(f"{row.location}: field '{names[0]}': expected non-empty text")


def _reference(row: Row, *names: str) -> str | None:
    """The first of ``names`` present in the row, as text (a number as written): the reference
    output; None where the row has none; anything else an error naming the field (it was left
    out without a word)."""
    for name in names:
        value = row.data.get(name)
        if value is None:
            continue
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise SpecscopeError(f"{row.location}: field '{name}': expected text (the reference output), "
                             f"got {type(value).__name__}")
    return None


def _instructcoder(row: Row, ctx: Context) -> Prompt:
    instruction = _need(row, "instruction")
    code = str(row.data.get("input") or "")
    return Prompt(f"instructcoder-{row.index}", f"{code}\n\n{instruction} {CODE_SUFFIX}", _reference(row, "output"))


def _sharegpt(row: Row, ctx: Context) -> Prompt | str:
    turns = row.data.get("conversations")
    if not isinstance(turns, list) or any(
        not isinstance(t, dict) or not isinstance(t.get("from"), str) or not isinstance(t.get("value"), str)
        for t in turns
    ):
        raise SpecscopeError(f"{row.location}: field 'conversations': expected a list of {{\"from\", \"value\"}} objects")
    if len(turns) < 2:
        return "conversations with fewer than 2 turns"
    first = next((i for i, t in enumerate(turns) if t["from"] in SHAREGPT_USER), None)
    if first is None:
        return "conversations without a user turn"
    prompt = turns[first]["value"]
    length = ctx.count_tokens(prompt)
    if not SHAREGPT_MIN_TOKENS <= length <= SHAREGPT_MAX_TOKENS:
        return f"prompts outside {SHAREGPT_MIN_TOKENS}-{SHAREGPT_MAX_TOKENS} tokens"
    answer = turns[first + 1] if first + 1 < len(turns) else None  # the model's answer, not the user's next message
    reference = answer["value"] if answer is not None and answer["from"] in SHAREGPT_MODEL else None
    return Prompt(f"sharegpt-{row.index}", prompt, reference)


def _cnn(row: Row, ctx: Context) -> Prompt:
    return Prompt(f"cnn_dailymail-{row.index}", SUMMARY_PREFIX + _need(row, "article"), _reference(row, "highlights"))


def _gsm8k(row: Row, ctx: Context) -> Prompt:
    return Prompt(f"gsm8k-{row.index}", _need(row, "question"), _reference(row, "answer"))


def _aime(row: Row, ctx: Context) -> Prompt | str:
    problem = _need(row, "Problem", "problem", "Question", "question")
    year = row.data.get("Year", row.data.get("year"))
    if year is None:
        found = re.search(r"20\d\d", " ".join(str(row.data.get(k, "")) for k in ("url", "ID", "id")))
        year = found.group(0) if found else None
    try:
        year = int(year)
    except (TypeError, ValueError):
        raise SpecscopeError(f"{row.location}: field 'Year': expected a year (or a url/ID naming one)") from None
    if year not in AIME_YEARS:
        return f"problems from years other than {AIME_YEARS[0]}-{AIME_YEARS[-1]}"
    return Prompt(f"aime-{row.index}", problem, _reference(row, "Answer", "answer"))


def _gpqa(row: Row, ctx: Context) -> Prompt:
    question = _need(row, "Question")
    correct = _need(row, "Correct Answer").strip()
    choices = [correct] + [_need(row, f"Incorrect Answer {i}").strip() for i in (1, 2, 3)]
    random.Random(f"{ctx.seed}:{row.index}").shuffle(choices)
    letters = "ABCD"
    listed = "\n".join(f"({letter}) {choice}" for letter, choice in zip(letters, choices))
    prompt = GPQA_TEMPLATE.format(question=question.strip(), choices=listed)
    return Prompt(f"gpqa-{row.index}", prompt, letters[choices.index(correct)])


@dataclass(frozen=True)
class Dataset:
    """A loader: its converter and where the ``datasets`` library finds it on the hub."""

    convert: Converter
    hub_path: str
    hub_config: str | None
    hub_split: str
    hub_files: str | None = None


DATASETS: dict[str, Dataset] = {
    "instructcoder": Dataset(_instructcoder, "likaixin/InstructCoder", None, "train"),
    "sharegpt": Dataset(_sharegpt, "anon8231489123/ShareGPT_Vicuna_unfiltered", None, "train",
                        "ShareGPT_V3_unfiltered_cleaned_split.json"),
    "cnn_dailymail": Dataset(_cnn, "abisee/cnn_dailymail", "3.0.0", "test"),
    "gsm8k": Dataset(_gsm8k, "openai/gsm8k", "main", "test"),
    "aime": Dataset(_aime, "AI-MO/aimo-validation-aime", None, "train"),
    "gpqa": Dataset(_gpqa, "Idavidrein/gpqa", "gpqa_main", "train"),
}


def to_rows(prompts: list[Prompt], template: ChatTemplate, tokenizer=None) -> list[dict]:
    """Workload rows (the format of :mod:`specscope.workloads.jsonl`): ``{"id", "prompt"}`` with
    the chat template applied, or ``prompt_token_ids`` when a ``tokenizers.Tokenizer`` is given
    (a rendered template already holds its special tokens, so none are added then, as
    transformers does); ``reference`` when the prompt has one."""
    rows = []
    for prompt in prompts:
        text = template.apply(prompt.prompt)
        row: dict = {"id": prompt.id}
        if tokenizer is not None:
            row["prompt_token_ids"] = tokenizer.encode(text, add_special_tokens=template.source is None).ids
        else:
            row["prompt"] = text
        if prompt.reference is not None:
            row["reference"] = prompt.reference
        rows.append(row)
    return rows


def read_rows(path: Path) -> Iterator[Row]:
    """The objects of a local ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise SpecscopeError(f"{path}: " + ("is a directory (expected a dataset file)" if path.is_dir() else "no such file"))
    if suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    if suffix == ".jsonl":
        for index, row in enumerate(read_jsonl(path, _jsonl_row)):
            yield replace(row, index=index)
        return
    text = read_text(path)
    if suffix == ".json":
        data = parse_json(text, path)
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise SpecscopeError(f"{path}: expected a JSON list of objects")
        for index, item in enumerate(data):
            yield Row(index, item, f"{path}: item {index}")
    elif suffix == ".csv":
        yield from _csv_rows(path, text)
    else:
        raise SpecscopeError(f"{path}: expected a .jsonl, .json, .csv or .parquet file")


def _csv_rows(path: Path, text: str) -> Iterator[Row]:
    """The rows of a CSV file after its header, each with the line it starts on (blank lines
    skipped); an unclosed quote or a row of more or fewer fields than the header is an error
    naming the line its row starts on."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)  # strict: an unclosed quote is an error
    header, index, end = None, 0, 0
    try:
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields:  # a blank line
                continue
            if header is None:
                header = fields
                continue
            if len(fields) != len(header):
                raise SpecscopeError(f"{where(path, start)}: expected the header's {len(header)} fields, got "
                                     f"{len(fields)}")
            yield Row(index, dict(zip(header, fields)), where(path, start))
            index += 1
    except csv.Error as error:
        raise SpecscopeError(f"{where(path, end + 1)}: not CSV ({error}, in the row that starts here)") from None


def _jsonl_row(obj: object, path: Path, line: int) -> Row:
    """One line of a ``.jsonl`` file as a row (its index set by the caller)."""
    return Row(0, Fields(obj, path, line).obj, where(path, line))


def _parquet_rows(path: Path) -> Iterator[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecscopeError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as error:  # noqa: BLE001 (pyarrow raises its own types for bad files)
        raise SpecscopeError(f"{path}: not a readable parquet file ({error})") from None
    for index, item in enumerate(table.to_pylist()):
        yield Row(index, item, f"{path}: row {index}")


def hub_rows(name: str) -> Iterator[Row]:
    """The rows of dataset ``name`` through the ``datasets`` library (network needed)."""
    spec = DATASETS[name]
    try:
        import datasets
    except ImportError:
        raise SpecscopeError(
            "--source hub: needs the 'datasets' library (pip install datasets) and network access; "
            "or give a local file in the dataset's format"
        ) from None
    try:
        kwargs = {"data_files": spec.hub_files} if spec.hub_files else {}
        table = datasets.load_dataset(spec.hub_path, spec.hub_config, split=spec.hub_split, **kwargs)
    except Exception as error:  # noqa: BLE001 (network, auth, missing files: many types)
        raise SpecscopeError(f"--source hub: cannot load {spec.hub_path} ({type(error).__name__}: {error})") from None
    for index, item in enumerate(table):
        yield Row(index, dict(item), f"{spec.hub_path}[{index}]")


def load_prompts(name: str, source: str | Path, n: int, seed: int = PAPER_SEED,
                 count_tokens: Callable[[str], int] | None = None) -> tuple[list[Prompt], LoadReport]:
    """``n`` prompts of dataset ``name`` from ``source`` (a file, or ``"hub"``), sampled with
    ``seed``; ``count_tokens`` measures ShareGPT prompts (default: whitespace words)."""
    if name not in DATASETS:
        raise SpecscopeError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    if n < 1:
        raise SpecscopeError(f"--n: expected a positive number of requests, got {n}")
    ctx = Context(seed, count_tokens or (lambda text: len(text.split())))
    rows = hub_rows(name) if str(source) == "hub" else read_rows(Path(source))
    report, kept = LoadReport(), []
    for row in rows:
        report.rows += 1
        result = DATASETS[name].convert(row, ctx)
        if isinstance(result, str):
            report.left_out[result] += 1
        else:
            kept.append(result)
    report.kept, report.without_reference = len(kept), sum(p.reference is None for p in kept)
    if not kept:
        raise SpecscopeError(f"{source}: no usable {name} rows ({report.summary()})")
    return random.Random(seed).sample(kept, min(n, len(kept))), report

"""One self-contained HTML page: figures embedded as base64 PNG data URIs, inline CSS, no script,
nothing fetched from the network (a Content-Security-Policy forbids it too).

Every string that reaches the page passes through :func:`esc` (``html.escape``), so ids and
dataset names taken from traces render as text whatever they contain.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specscope.report.answer import AnswerRow
from specscope.version import code_version

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #1a1a1a; line-height: 1.45; }
h1 { margin-bottom: .2rem; } .meta { color: #555; margin-top: 0; }
h1, h2, h3, p { overflow-wrap: anywhere; } td, th { overflow-wrap: break-word; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .9rem; display: block; overflow-x: auto;
        max-width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f3f3f3; }
figure { margin: 1.5rem 0 2.5rem; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { margin-top: .4rem; } .note { background: #fff8e1; border-left: 4px solid #E69F00;
       padding: .5rem .8rem; margin: .8rem 0; } .small { font-size: .85rem; color: #555; }
.bad { color: #D55E00; font-weight: 600; } .good { color: #009E73; font-weight: 600; }
"""


def esc(value: object) -> str:
    """``html.escape`` of ``str(value)`` (quotes included)."""
    return html.escape(str(value), quote=True)


@dataclass
class FigureEntry:
    number: int
    title: str
    sentence: str  # what to look at
    png: bytes
    filename: str


@dataclass
class Page:
    """Everything the page shows; strings are raw (escaped when rendered)."""

    traces: Sequence[str]
    cost_model: str
    mode: str
    batch_sizes: Sequence[int]  # those simulated
    seed: int  # the simulator's (paper mode draws requests with it, n-gram's no-match guess is drawn with it)
    answer: Sequence[AnswerRow]
    figures: Sequence[FigureEntry]
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[object]]]] = ()  # (title, header, rows)
    load_summaries: Sequence[str] = ()
    notes: Sequence[str] = ()
    skipped: Sequence[str] = ()  # figures not drawn, each "name (why)": optional inputs not given, mostly
    csv_files: Sequence[str] = ()
    edges: Mapping[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # per dataset and proposer:
    # the largest fixed k searched (a best policy there may want more) and what the page says of a longer one
    trees: tuple[Sequence[str], Sequence[Sequence[str]]] = ((), ())  # tree vs chain: header, rows
    left_out: Sequence[int] = ()  # batch sizes asked for and simulated for no dataset


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table; every cell escaped; text cells left-aligned, numbers right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td{" class=text" if isinstance(v, str) else ""}>{esc(_fmt(v))}</td>' for v in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _apart(value: float, other: float, between: str, after: str) -> str:
    """``value``, ``between``, ``other``, ``after`` at two decimals, or at as many more (up to four)
    as show them apart: a lead that two decimals round away reads as a tie."""
    digits = next((d for d in (2, 3, 4) if f"{value:.{d}f}" != f"{other:.{d}f}"), 4)
    return f"{value:.{digits}f}{between}{other:.{digits}f}{after}"


def _speedup(value: float) -> str:
    css = "good" if value > 1.0 else "bad"
    return f'<span class="{css}">{value:.2f}×</span>'


def answer_section(rows: Sequence[AnswerRow], edges: Mapping[tuple[str, str], tuple[int, str]] | None = None) -> str:
    """Per dataset: a one-line verdict, then batch size × best policy, speedup, oracle gap.
    A best ``fixed:k`` at the largest k searched for its dataset and proposer (``edges``: (dataset,
    proposer) → that k and what to say of a longer one) is flagged: a longer k, not searched,
    might do better."""
    edges = edges or {}
    flagged: dict[tuple[int, str], list[str]] = {}  # (largest k, why) → the datasets · proposers whose best sits there
    parts = []
    combined = any(r.combined_speedup is not None for r in rows)  # a pair to combine: the column and its note
    steady = any(r.steady_acc is not None for r in rows)  # a steady state that ranks otherwise: its column
    for dataset in dict.fromkeys(r.dataset for r in rows):
        mine = [r for r in rows if r.dataset == dataset]
        verdict = _verdict(mine)
        pair = next((r.combined_policy for r in mine if r.combined_policy), "oracle-combined")
        head = ["batch size", "best proposer", "policy", "speedup", "oracle (best proposer)",
                "oracle speedup (×)", "gap to oracle (oracle − best, ×)", *([f"{pair}* (×)"] if combined else []),
                *(["best at steady state‡"] if steady else [])]
        body = []
        for r in mine:
            key = (dataset, r.best_acc)
            edge = key in edges and r.best_policy == f"fixed:{edges[key][0]}"
            if edge and f"{dataset} · {r.best_acc}" not in flagged.setdefault(edges[key], []):
                flagged[edges[key]].append(f"{dataset} · {r.best_acc}")
            policy = esc(r.best_policy) + ("\u00a0†" if edge else "")  # kept on the policy's line
            cells = [str(r.batch_size), esc(r.best_acc), policy, _speedup(r.best_speedup),
                     esc(_fmt(r.oracle_acc)), esc(_fmt(r.oracle_speedup)),
                     esc("–" if r.gap is None else f"{r.gap:+.3f}"),
                     *([esc(_fmt(r.combined_speedup))] if combined else []),
                     *([esc("–" if r.steady_acc is None else f"{r.steady_acc} {r.steady_policy}: "
                            + _apart(r.steady_speedup, r.best_steady_speedup, "× (best's ", "×)"))] if steady else [])]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        head_html = "".join(f"<th>{esc(h)}</th>" for h in head)
        left = next((r.left_out for r in mine if r.left_out), None)
        if left:
            verdict += (f" Left out of this answer: {left} — its cells compare only the proposers every record "
                        "holds, so with it the best may be another.")
        parts.append(f"<h3>{esc(dataset)}</h3><p>{esc(verdict)}</p>"
                     f"<table><thead><tr>{head_html}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    parts.append(
        '<p class="small">'
        + ("* oracle-combined takes, at every step, whichever proposer would emit more, "
           "proposing exactly what will be accepted; choosing is taken as free and every step pays only one "
           "proposer's drafting — the pair's lookup, n-gram in the paper (its rule), else the first-named — "
           "so the number is optimistic — not something a real system reaches (though, like the oracle below, it "
           "is no bound on speed: on very short outputs a fixed k can come out ahead). " if combined else "")
        + "oracle: one proposer, proposing exactly what will be accepted (no wasted verification) — the best "
        "k at every step it reaches, not a bound on speed: a fixed k lands on other positions, and a token "
        "tree tries several tokens at a depth, so either can come out ahead (a negative gap)."
        + (" ‡ mixed mode's whole-run speedup includes the ramp-up and the drain of the longest requests; at "
           "steady state (only iterations with a full batch: what a server under constant load sees) another "
           "policy ranks first where this column names it, with the best's own steady-state speedup beside it."
           if steady else "")
        + "".join(f" † the largest k tried ({k}{'' if len(set(edges.values())) == 1 else ' for ' + esc(', '.join(ds))}); "
                  f"{esc(why)}." for (k, why), ds in flagged.items())
        + "</p>")
    return "".join(parts)


def _verdict(rows: Sequence[AnswerRow]) -> str:
    """One line per dataset: at which simulated batch sizes SD pays (its best speedup above 1)."""
    paying = [r.batch_size for r in rows if r.best_speedup > 1.0]
    losing = [r.batch_size for r in rows if r.best_speedup <= 1.0]
    if not losing:
        return "SD pays at every simulated batch size."
    if not paying:
        return "SD does not pay at any simulated batch size: run without it."
    if max(paying) < min(losing):
        return f"SD pays up to batch {max(paying)}; from batch {min(losing)} on, run without it."
    if max(losing) < min(paying):
        return f"SD pays from batch {min(paying)} on; below it, run without it."
    return (f"SD pays at batch {', '.join(map(str, paying))}; at batch {', '.join(map(str, losing))}, "
            "run without it.")


def figure_html(entry: FigureEntry) -> str:
    data = base64.b64encode(entry.png).decode("ascii")
    return (f'<figure id="figure-{entry.number}"><img src="data:image/png;base64,{data}" '
            f'alt="{esc(entry.title)}"><figcaption><strong>Figure {entry.number}. {esc(entry.title)}.</strong> '
            f"{esc(entry.sentence)} <span class=small>({esc(entry.filename)})</span></figcaption></figure>")


GLOSSARY = (  # DESIGN.md's vocabulary, one line each: what a newcomer needs to read the tables
    ("k", "the proposal length: draft tokens a policy asks of a proposer per step (it may offer fewer: n-gram "
          "offers none without a match); the target verifies them, k + 1 positions, in one forward"),
    ("acc_len", "tokens a step emits: the accepted draft tokens plus the target's own next token (1 … k + 1)"),
    ("α", "acceptance rate: accepted draft tokens over proposed ones, a policy's (simulated or measured); the "
          "closed-form bound's α is instead each draft's chance of acceptance fitted to the "
          "traces under the i.i.d. model"),
    ("τ (mean acceptance length)", "tokens a policy's steps emit per step, the bonus included (Σ emitted / steps; "
                                   "not the traces' mean acc_len, which no policy caps)"),
    ("c", "the time of one draft token over the time of a target forward (the closed-form bound's cost ratio)"),
    ("speedup", "throughput with SD over throughput without it, on the same requests and batch size (×)"),
    ("fixed:k · adaptive", "propose k every step · start at 5, +2 after a step that accepted everything, −1 "
                           "after a rejection, never below 1 nor above the traces' k_max"),
    ("oracle", "propose exactly what will be accepted (acc_len − 1), the drafter still paid every step: a "
               "ceiling of tokens per step"),
    ("oracle-combined · oracle-switch", "per step the proposer that accepts more, choosing free and only the "
                                        "lookup's drafting paid (the paper's) · the chosen proposer's drafting paid "
                                        "(the ceiling of a policy that switches)"),
    ("tree 3x2x1x1", "a static token tree, branching per depth: 3 children of the root, 2 of each of them, then "
                     "1 and 1 — 21 nodes, 4 deep; the drafter makes one pass per depth, the target verifies every "
                     "node"),
    ("mixed · paper mode", "B distinct requests, continuously batched (as a server runs) · B copies of one request "
                           "(the paper's simulator)"),
    ("steady state (‡)", "only the iterations with every batch slot decoding: no ramp-up, no drain"),
    ("prefill · drafting · verification · overhead", "reading prompts · proposing drafts · the target's forward "
                                                     "over them · sampling and the engine's own bookkeeping"),
)
TERMS = "".join(f"<dt>{esc(term)}</dt><dd>{esc(meaning)}</dd>" for term, meaning in GLOSSARY)


def render(page: Page) -> str:
    """The whole page as a string."""
    notes = "".join(f'<div class="note">{esc(n)}</div>' for n in page.notes)
    figures = "".join(figure_html(f) for f in page.figures)
    tables = "".join(f"<h3>{esc(title)}</h3>{table(header, rows)}" for title, header, rows in page.tables)
    loads = "".join(f"<li>{esc(s)}</li>" for s in page.load_summaries)
    csvs = " · ".join(f'<a href="{esc(name)}">{esc(name)}</a>' for name in page.csv_files)
    meta = (f"Traces: {', '.join(page.traces)} · cost model {page.cost_model} · {page.mode} mode · "
            f"batch sizes {', '.join(map(str, page.batch_sizes))}"
            + (f" ({', '.join(map(str, page.left_out))} left out of {page.mode} mode: more than a dataset's "
               "requests)" if page.left_out else "") + f" · seed {page.seed}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specscope report: {esc(', '.join(dict.fromkeys(r.dataset for r in page.answer)) or 'traces')} · {esc(page.cost_model)}</title><style>{CSS}</style></head>
<body>
<h1>Does speculative decoding pay off here?</h1>
<p class="meta">{esc(meta)}</p>
<h2>The answer</h2>
{answer_section(page.answer, page.edges)}
{("<h3>Trees against chains</h3><p>Up to which batch size each static tree beats the chain of its depth, "
  "by whole-run speedup (the figure below draws both; tree_speedup.csv holds the steady-state speedups too)."
  "</p>" + table(*page.trees)) if page.trees[1] else ""}
{notes}
<details><summary>The words this page uses</summary><dl class="small">{TERMS}</dl></details>
<h2>Figures</h2>
{f'<p class="small">Not drawn here: {esc("; ".join(page.skipped))}.</p>' if page.skipped else ""}
{figures}
<h2>Tables</h2>
{tables}
<p>Every table as CSV: {csvs}</p>
<h2>Input</h2>
<p class="small">Per-position analysis cuts each record to the common length of its output and
acc_len arrays; the simulation keeps each proposer's array whole, as the paper's simulator did,
but for oracle-combined, which replays the positions its two proposers' arrays share (a learned
policy's judgement, and every policy beside it there, replays the positions its output and its
proposers' arrays share).</p>
<ul>{loads}</ul>
<p class="small">Generated by {esc(code_version())}.</p>
</body></html>
"""

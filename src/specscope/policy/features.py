"""What a learned policy reads of an :class:`~specscope.policy.observation.Observation`: its
feature vector, the same in the simulator and the engine (:func:`feature_names` gives each
feature's definition, in vector order; a policy file stores them, so a file states what its
model reads)."""

from __future__ import annotations

import math

from specscope.policy.observation import MEMORY, NONE, Observation, ngram_judged

NO_PROB = -1.0  # draft_prob feature where no drafter's probability is known
NO_STEPS = (0.0,) * (4 * MEMORY)  # the past steps' features before a request has taken them


def feature_names(methods: tuple[str, ...]) -> dict[str, str]:
    """Feature name → definition, in vector order."""
    names = {
        "log_pos": "log(1 + output tokens so far)",
        "log_prompt": "log(1 + prompt length)",
        "ngram_offer": "tokens n-gram lookup offers now (0: no match)",
        "ngram_match": "1 if n-gram lookup matches now",
        "prompt_overlap": "share of output trigrams so far found in the prompt",
        "ngram_recent": f"log-odds of n-gram's per-token agreement over the last {MEMORY} steps: (1 + emitted "
                        "tokens its proposal matched) / (2 + emitted tokens it was judged on)",
    }
    for j in range(1, MEMORY + 1):
        names[f"emitted_{j}"] = f"tokens emitted {j} step(s) ago (0 before the first step)"
        names[f"ngram_matched_{j}"] = f"emitted tokens n-gram's proposal matched {j} step(s) ago"
        names[f"full_{j}"] = f"1 if the step {j} ago accepted all it proposed (k > 0)"
        names[f"rejected_{j}"] = f"1 if the step {j} ago stopped at a rejected draft token (k > 0)"
    for m in methods:
        names[f"last_{m}"] = f"1 if the last step ran {m}"
        names[f"log_steps_{m}"] = f"log(1 + past steps that ran {m})"
    names["last_draft_prob"] = f"first-draft probability of the last step's drafter ({NO_PROB:g}: unknown)"
    return names


def features(obs: Observation, methods: tuple[str, ...]) -> list[float]:
    """The feature vector of ``obs`` (order of :func:`feature_names`)."""
    recent = obs.steps[::-1]
    steps, matched, judged = [], 0, 0  # the last MEMORY steps' block; n-gram's agreement over them
    for o in recent:
        matched += o.ngram_matched
        judged += ngram_judged(o)
        proposed = o.k > 0
        steps += (float(o.emitted), float(o.ngram_matched), float(proposed and o.emitted == o.k + 1),
                  float(proposed and o.emitted <= o.k))
    x = [math.log1p(obs.pos), math.log1p(obs.prompt_len), float(obs.ngram_offer), float(obs.ngram_offer > 0),
         obs.prompt_overlap, _log_odds(matched, judged), *steps, *NO_STEPS[len(steps):]]
    last = recent[0].method if recent else NONE
    for i in range(len(methods)):
        x += [float(last == i), math.log1p(obs.steps_by_method[i])]
    prob = recent[0].draft_prob if recent else None
    x.append(NO_PROB if prob is None else prob)
    return x


def _log_odds(matched: int, judged: int) -> float:
    """log((1 + matched) / (1 + judged − matched)): the log-odds of a per-token rate, 0 unjudged."""
    return math.log((1 + matched) / (1 + judged - matched))

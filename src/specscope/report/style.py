"""Shared look of the report's figures: the Okabe–Ito palette, matplotlib settings, saving.

matplotlib is imported here, so import this module only where figures are drawn.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

# Okabe & Ito (2008), distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73", "yellow": "#F0E442",
    "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7", "black": "#000000",
}
CYCLE = tuple(OKABE_ITO[name] for name in ("orange", "blue", "bluish green", "vermillion", "reddish purple",
                                            "sky blue", "yellow", "black"))
PHASE_COLOURS = {"prefill": OKABE_ITO["reddish purple"], "drafting": OKABE_ITO["orange"],
                 "verification": OKABE_ITO["blue"], "overhead": OKABE_ITO["bluish green"]}
NAME_WIDTH = 40  # characters of a dataset's name a figure shows (the page and the tables show all of it)
SEQUENTIAL = "viridis"  # perceptually uniform, colour-blind safe
MISSING = "#d0d0d0"  # background where a request has no position (past its end)
DIVERGING = "PuOr"  # colour-blind safe diverging map

RC = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
    "axes.labelsize": 10, "legend.fontsize": 9, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False,
    # Names come from traces: never interpret "$...$" in them as mathtext (log axes therefore
    # get plain formatters, see ``plain_log_axis``).
    "text.parse_math": False, "text.usetex": False,
}


def colour_for(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per name, in order (black is kept for the combined oracle)."""
    return {name: CYCLE[i % (len(CYCLE) - 1)] for i, name in enumerate(names)}


# Datasets drawn beside the proposers' own colours take others (Paul Tol's muted scheme, colour-blind safe):
# a dataset in n-gram's orange or EAGLE's blue read as that proposer.
DATASET_CYCLE = ("#882255", "#44AA99", "#332288", "#999933", "#AA4499", "#117733", "#88CCEE", "#DDCC77")


def dataset_colours(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per dataset, in order, none of them a proposer's."""
    return {name: DATASET_CYCLE[i % len(DATASET_CYCLE)] for i, name in enumerate(names)}


# A proposer keeps its colour in every figure and every report, whatever else is drawn beside it; the
# study's five are each of another hue (the draft model's vermillion beside n-gram's orange read as one).
PROPOSER_COLOURS = {"ngram": "#E69F00", "eagle": "#0072B2", "eagle3": "#56B4E9", "mtp": "#009E73",
                    "draft": "#CC79A7", "suffix": "#D55E00"}


def proposer_colours(names: Sequence[str]) -> dict[str, str]:
    """Each proposer's own colour (:data:`PROPOSER_COLOURS`); other names (a custom proposer, the
    learned policy) take the colours left, in order (black is kept for the combined oracle)."""
    left = [c for c in CYCLE[:-1] if c not in {PROPOSER_COLOURS.get(n) for n in names}] or list(CYCLE[:-1])
    others = [n for n in names if n not in PROPOSER_COLOURS]
    return {name: PROPOSER_COLOURS.get(name) or left[others.index(name) % len(left)] for name in names}


LAST_RESORT = "Last Resort"  # matplotlib's own font of boxes, one per code point (its name, as fonts list it)


@dataclass(frozen=True)
class Glyphs:
    """What the figures draw names with (:func:`glyphs_for`): the font families, the default's
    first and then installed fonts that hold the characters it lacks; and the characters no
    installed font holds (drawn as boxes)."""

    families: tuple[str, ...] = ()
    undrawable: str = ""

    def notes(self) -> list[str]:
        """The one line saying which characters the figures cannot draw, if any."""
        if not self.undrawable:
            return []
        return [f"the figures cannot draw {self.undrawable} (in the dataset or proposer names): no installed font holds "
                "them, so they show as boxes there (the page and the tables show them; a font holding them, such "
                "as Noto Sans CJK, draws them)"]


def glyphs_for(texts: Sequence[str]) -> Glyphs:
    """The fonts that draw every character of ``texts``: the default font, then installed fonts
    (matplotlib's list) holding what it lacks, in its order, each only where it adds one."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    with matplotlib.rc_context(RC):
        default = font_manager.findfont(font_manager.FontProperties())
    first = FT2Font(default)
    held = set(first.get_charmap())
    missing = [c for c in dict.fromkeys("".join(texts)) if not c.isspace() and ord(c) not in held]
    if not missing:
        return Glyphs()
    families = [first.family_name]
    for entry in font_manager.fontManager.ttflist:
        if not missing:
            break
        if entry.name.startswith(LAST_RESORT):  # a box for every character: none of them drawn
            continue
        try:
            holds = set(FT2Font(entry.fname).get_charmap())
        except (OSError, RuntimeError):  # a font file that does not read: not one to draw with
            continue
        if any(ord(c) in holds for c in missing) and entry.name not in families:
            families.append(entry.name)
            missing = [c for c in missing if ord(c) not in holds]
    return Glyphs(tuple(families) if len(families) > 1 else (), "".join(missing))


@contextmanager
def figure_style(glyphs: Glyphs = Glyphs()) -> Iterator[None]:
    """matplotlib set as :data:`RC`, with ``glyphs``' fonts; its warning per character no font
    holds is silenced (:meth:`Glyphs.notes` says it once)."""
    rc = {**RC, "font.family": list(glyphs.families)} if glyphs.families else RC
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        if glyphs.undrawable:
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
        yield


def save(fig: plt.Figure, path: Path) -> Path:
    """Write ``fig`` as PNG and free it (cropped to what it draws: a legend wider than a single
    panel is kept whole)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
    return path


def batch_axis(ax, batch_sizes: Sequence[int]) -> None:
    """A log2 x axis of batch sizes, ticked at ``batch_sizes``."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes)
    ax.set_xticklabels([str(b) for b in batch_sizes])
    ax.minorticks_off()
    ax.set_xlabel("batch size")


def panel_grid(n: int, ncols: int, width: float, height: float, **kwargs):
    """``n`` panels on a grid of ``ncols`` columns; returns (fig, flat axes), unused axes hidden."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             layout="constrained", **kwargs)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def plain_log_axis(axis) -> None:
    """Log-scale tick labels as plain numbers (mathtext is off)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))


def short(name: str) -> str:
    """``name`` cut to :data:`NAME_WIDTH` characters in its middle, ``…`` marking the cut: a figure's
    titles and labels stay within its panels whatever the dataset's name, and names that share a
    long prefix (a run's, a model's) keep the ends that tell them apart."""
    if len(name) <= NAME_WIDTH:
        return name
    head = (NAME_WIDTH - 1) // 2
    return name[:head] + "…" + name[len(name) - (NAME_WIDTH - 1 - head):]

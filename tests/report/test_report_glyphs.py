"""Names the figures cannot draw: one note, no warning per character."""

from __future__ import annotations

import warnings

from specscope.report.style import Glyphs, figure_style, glyphs_for, plt

UNDRAWABLE = "\U0010fffd"  # a private-use code point no font draws


def test_a_character_no_font_holds_is_said_once_and_its_warnings_silenced(tmp_path):
    """Probe: a dataset named in Chinese drew boxes and flooded stderr with 16 matplotlib warnings."""
    assert glyphs_for(["llama3.1-8b_gsm8k é", "ngram"]) == Glyphs()
    glyphs = glyphs_for([f"data{UNDRAWABLE}", "ngram"])
    assert glyphs.undrawable == UNDRAWABLE
    assert glyphs.notes() == [f"the figures cannot draw {UNDRAWABLE} (in the dataset or proposer names): no installed "
                              "font holds them, so they show as boxes there (the page and the tables show them; a "
                              "font holding them, such as Noto Sans CJK, draws them)"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with figure_style(glyphs):
            fig, ax = plt.subplots()
            ax.set_title(f"data{UNDRAWABLE}")
            fig.savefig(tmp_path / "f.png")
            plt.close(fig)
    assert not [w for w in caught if "missing from font" in str(w.message)]

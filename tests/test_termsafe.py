"""Names from a dump printed through rich markup (base/termsafe.py): escaped pieces stay literal text when
joined to each other and to opdiff's own tags; rich's escape looks at one piece, so "m.][" followed by
"/op" and a later "]" once made a closing tag and crashed `opdiff compare`'s summary."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from opdiff import report
from opdiff.base.termsafe import safe
from opdiff.compare import compare
from opdiff.testing.synthetic import Tensor, write_dump

PIECE = st.text(st.sampled_from("[]\\/#@=abZ .x"), max_size=8)


def _plain(*pieces: str) -> str:
    """What the joined pieces must read as: every character, backslashes aside (a trailing run is doubled)."""
    return "".join(pieces).replace("\\", "")


@given(st.lists(PIECE, min_size=1, max_size=4))
@example(["m.][", "/aten.mul.Tensor#0", " in 'm.]'"])
@example(["a\\", "[", "b]"])
@example(["x[", "/", "]"])
def test_joined_pieces_and_tags_render_as_the_text(pieces):
    for sep in ("", "[/] [red]"):  # joined directly, or with opdiff's own tags between
        markup = "[bold]" + sep.join(map(safe, pieces)) + "[/]"
        text = Text.from_markup(markup).plain  # raised MarkupError on a tag made across pieces
        assert text.replace("\\", "") == _plain((" " if sep else "").join(pieces))


def test_summary_of_a_record_named_with_half_a_tag(tmp_path):
    """The summary names the first FAIL's record and module; a module `m.][` made the two a closing tag."""
    for side, v in (("golden", 1.0), ("target", 1.5)):
        write_dump(tmp_path / side, [Tensor("m.][", "aten.mul.Tensor", "output", "0", np.array([v, 2.0], np.float32))])
    cmp = compare(tmp_path / "golden", tmp_path / "target")
    con = Console(file=io.StringIO(), width=200)
    report.render(cmp, con, allow_unmatched=True)
    out = con.file.getvalue()
    assert "first FAIL" in out and "m.][/aten.mul.Tensor" in out.replace("\\", "")

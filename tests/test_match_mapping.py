"""Mapping files: YAML and JSON read the same; every bad file is one line naming it."""

from __future__ import annotations

import json

import pytest

from opdiff.errors import OpdiffError
from opdiff.match import load_mapping

DOC = {
    "names": {"lm/Dense#0": "model.head/Linear#0"},
    "rename": [{"target": r"^transformer\.h\.(\d+)\.", "golden": r"model.layers.\1."}],
    "fusion": [{"target": r"h\.(\d+)\.mlp/FusedMLP#0", "golden": [r"h.\1.mlp.fc/Linear#0", r"h.\1.mlp.act/GELU#0"]}],
}
YAML = r"""
names:
  "lm/Dense#0": "model.head/Linear#0"
rename:
  - {target: '^transformer\.h\.(\d+)\.', golden: 'model.layers.\1.'}
fusion:
  - target: 'h\.(\d+)\.mlp/FusedMLP#0'
    golden: ['h.\1.mlp.fc/Linear#0', 'h.\1.mlp.act/GELU#0']
"""


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_yaml_and_json_mapping(tmp_path, suffix):
    f = tmp_path / f"map{suffix}"
    f.write_text(YAML if suffix == ".yaml" else json.dumps(DOC))
    m = load_mapping(f)
    assert m.names == {"lm/Dense#0": "model.head/Linear#0"}
    assert m.rename("transformer.h.12.attn/Linear#0/forward/output/0") == "model.layers.12.attn/Linear#0/forward/output/0"
    assert m.rename("other/x") == "other/x"
    assert m.fusion_of("h.3.mlp/FusedMLP#0") == ["h.3.mlp.fc/Linear#0", "h.3.mlp.act/GELU#0"]
    assert m.fusion_of("h.3.mlp/FusedMLP#1") is None
    assert m.source == str(f)


def test_empty_mapping_file(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("")
    m = load_mapping(f)
    assert not m.names and not m.renames and not m.fusions


@pytest.mark.parametrize("text,msg", [
    ("names: [a, b]", "names: expected a mapping"),
    ("rename:\n  - {target: '(', golden: x}", "bad regex"),
    ("rename:\n  - {target: 'a', golden: '\\9'}", "bad replacement"),
    ("rename:\n  - {pattern: a, golden: b}", "rename[0]"),
    ("fusion:\n  - {target: a, golden: []}", "fusion[0]"),
    ("renames: []", "unknown key"),
    ("names: {a: b", "bad mapping file"),
    ("- 1\n- 2", "top level"),
])
def test_bad_mapping_is_one_line_naming_the_file(tmp_path, text, msg):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(OpdiffError, match=msg.replace("[", r"\[").replace("(", r"\(")) as exc:
        load_mapping(f)
    assert str(exc.value).startswith(f"{f}: ") and "\n" not in str(exc.value)


def test_missing_mapping_file(tmp_path):
    with pytest.raises(OpdiffError, match="cannot read mapping file"):
        load_mapping(tmp_path / "none.yaml")

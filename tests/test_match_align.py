"""Alignment: names, inserted / removed / renamed ops, fusions, mapping renames, and never a wrong pair."""

from __future__ import annotations

import random

import numpy as np
import pytest

from opdiff.base.record import Record
from opdiff.match import PROVENANCE_KEY, align_records, mapping_from_dict
from opdiff.match.lcs import lcs, longest_increasing
from opdiff.testing.synthetic import Tensor, make_record


def rec(module: str, op: str, role: str = "output", pos: str = "0", shape=(2, 4), call: int = 0, **extra) -> Record:
    r = make_record(Tensor(module, op, role, pos, np.zeros(shape, np.float32), call=call, extra=extra or None),
                    with_hash=False)
    return r


def numbered(records: list[Record]) -> list[Record]:
    for i, r in enumerate(records):
        r.index = i
    return records


def layer(i: int, width: int = 4) -> list[Record]:
    """One block: a Linear's input and output, then an activation's output."""
    m = f"layers.{i}"
    return [rec(f"{m}.fc", "Linear", "input", "0", (2, width)), rec(f"{m}.fc", "Linear", "output", "0", (2, 2 * width)),
            rec(f"{m}.act", "GELU", "output", "0", (2, 2 * width))]


def model(n: int = 4) -> list[Record]:
    return numbered([r for i in range(n) for r in layer(i)])


def by_pair(pairs):
    return {(p.golden.name if p.golden else None, p.target.name if p.target else None): p.match for p in pairs}


def check_invariants(pairs, golden, target):
    """Every record appears exactly once; the target side is in execution order."""
    gs = [p.golden.name for p in pairs if p.golden is not None]
    ts = [p.target.index for p in pairs if p.target is not None]
    assert sorted(gs) == sorted(r.name for r in golden) and len(gs) == len(set(gs))
    assert ts == list(range(len(target)))


def test_identical_runs_pair_by_name():
    g, t = model(), model()
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    assert all(p.match == "name" and p.golden.name == p.target.name for p in pairs)


def test_inserted_op_stays_unmatched_and_shifts_nothing():
    g = model()
    t = [r for i in range(4) for r in layer(i)]
    extra = rec("layers.1.drop", "Dropout", "output", "0", (2, 8))
    t.insert(6, extra)
    numbered(t)
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    kinds = by_pair(pairs)
    assert kinds[(None, extra.name)] == "unmatched"
    assert sum(1 for v in kinds.values() if v == "name") == len(g)
    assert [p.target.name for p in pairs if p.target][6] == extra.name


def test_inserted_call_of_the_same_op_does_not_mispair_later_calls():
    # golden: three calls of one Linear with distinct shapes; target: an extra call in the middle
    g = numbered([rec("blk", "Linear", shape=(2, w), call=c) for c, w in enumerate((3, 5, 7))])
    t = numbered([rec("blk", "Linear", shape=(2, w), call=c) for c, w in enumerate((3, 9, 5, 7))])
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    got = {(p.golden.shape if p.golden else None, p.target.shape if p.target else None) for p in pairs}
    assert got == {((2, 3), (2, 3)), ((2, 5), (2, 5)), ((2, 7), (2, 7)), (None, (2, 9))}
    assert {p.match for p in pairs if p.golden and p.target} == {"sequence"}


def test_removed_op_leaves_golden_records_unmatched_in_place():
    g = model()
    t = numbered([r for r in model() if not r.module.startswith("layers.2.act")])
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    missing = [i for i, p in enumerate(pairs) if p.target is None]
    assert len(missing) == 1 and pairs[missing[0]].golden.name == "layers.2.act/GELU#0/forward/output/0"
    assert pairs[missing[0] - 1].golden.name == "layers.2.fc/Linear#0/forward/output/0"  # right after its predecessor


def renamed(module: str, attr: str, old: str, new: str) -> list[Record]:
    """model() with the module or op of `module`'s records renamed (names and nodes follow)."""
    t = model()
    for r in t:
        if r.module == module:
            setattr(r, attr, getattr(r, attr).replace(old, new))
            r.node = r.node.replace(old, new)
            r.name = r.name.replace(old, new)
    return t


def test_renamed_module_pairs_by_sequence():
    g = model()
    t = renamed("layers.1.fc", "module", "layers.1.fc", "layers.1.dense")
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    kinds = by_pair(pairs)
    assert kinds[("layers.1.fc/Linear#0/forward/output/0", "layers.1.dense/Linear#0/forward/output/0")] == "sequence"
    assert kinds[("layers.1.fc/Linear#0/forward/input/0", "layers.1.dense/Linear#0/forward/input/0")] == "sequence"
    assert not any(v == "unmatched" for v in kinds.values())


def test_renamed_op_pairs_by_sequence():
    g = model()
    t = renamed("layers.3.act", "op", "GELU", "GELUActivation")
    pairs = align_records(g, t)
    kinds = by_pair(pairs)
    assert kinds[("layers.3.act/GELU#0/forward/output/0", "layers.3.act/GELUActivation#0/forward/output/0")] == "sequence"


def test_unrelated_tensors_are_never_paired():
    g = numbered([rec("a", "Linear", shape=(4, 8)), rec("b", "Softmax", shape=(4, 4))])
    t = numbered([rec("a", "Linear", shape=(4, 8)), rec("c", "Conv2d", role="output", shape=(1, 3, 5))])
    pairs = align_records(g, t)
    kinds = by_pair(pairs)
    assert kinds[("b/Softmax#0/forward/output/0", None)] == "unmatched"
    assert kinds[(None, "c/Conv2d#0/forward/output/0")] == "unmatched"


def test_an_extra_call_with_another_shape_is_skipped_not_paired():
    g = numbered([rec("x", "Linear", shape=(2, 4), call=0), rec("x", "Linear", shape=(2, 4), call=1)])
    t = numbered([rec("x", "Linear", shape=(2, 4), call=0), rec("x", "Linear", shape=(2, 6), call=1),
                  rec("x", "Linear", shape=(2, 4), call=2)])
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    got = {(p.golden.call if p.golden else None, p.target.call if p.target else None) for p in pairs}
    assert got == {(0, 0), (None, 1), (1, 2)}


def test_same_op_whose_shape_changed_pairs_as_a_shape_mismatch():
    g = numbered([rec("a", "Linear", shape=(2, 4)), rec("b", "Reshape", shape=(8,)), rec("c", "Linear", shape=(2, 4))])
    t = numbered([rec("a", "Linear", shape=(2, 4)), rec("b", "Reshape", shape=(4, 2)), rec("c", "Linear", shape=(2, 4))])
    pairs = align_records(g, t)
    assert [(p.match, p.golden.shape, p.target.shape) for p in pairs][1] == ("name", (8,), (4, 2))


FUSION_G = [
    ("h.0.mlp.fc", "Linear", "input", (2, 4)), ("h.0.mlp.fc", "Linear", "output", (2, 8)),
    ("h.0.mlp.act", "GELU", "input", (2, 8)), ("h.0.mlp.act", "GELU", "output", (2, 8)),
    ("h.0.mlp.proj", "Linear", "input", (2, 8)), ("h.0.mlp.proj", "Linear", "output", (2, 4)),
    ("h.0.ln", "LayerNorm", "output", (2, 4)),
]


def fusion_dumps(**extra):
    g = numbered([rec(m, op, role, "0", shape) for m, op, role, shape in FUSION_G])
    t = numbered([rec("h.0.mlp", "FusedMLP", "input", "0", (2, 4), **extra),
                  rec("h.0.mlp", "FusedMLP", "output", "0", (2, 4), **extra),
                  rec("h.0.ln", "LayerNorm", "output", "0", (2, 4))])
    return g, t


def check_fusion(pairs, g):
    fused = [p for p in pairs if p.match == "fusion" and p.target is not None]
    assert {(p.golden.name, p.target.name) for p in fused} == {
        ("h.0.mlp.fc/Linear#0/forward/input/0", "h.0.mlp/FusedMLP#0/forward/input/0"),
        ("h.0.mlp.proj/Linear#0/forward/output/0", "h.0.mlp/FusedMLP#0/forward/output/0"),
    }
    assert all([r.name for r in p.golden_group] == [r.name for r in g[:6]] for p in fused)
    away = [p for p in pairs if p.match == "fusion" and p.target is None]
    assert len(away) == 4 and all("fused away" in p.note for p in away)
    assert by_pair(pairs)[("h.0.ln/LayerNorm#0/forward/output/0",) * 2] == "name"
    order = [p.target.name if p.target else p.golden.name for p in pairs]
    assert order.index("h.0.mlp/FusedMLP#0/forward/input/0") < order.index("h.0.mlp.act/GELU#0/forward/input/0") \
        < order.index("h.0.mlp/FusedMLP#0/forward/output/0")


def test_fusion_from_mapping_file():
    g, t = fusion_dumps()
    mapping = mapping_from_dict({"fusion": [{"target": r"h\.(\d+)\.mlp/FusedMLP#0",
                                             "golden": [r"h.\1.mlp.fc/Linear#0", r"h.\1.mlp.act/GELU#0",
                                                        r"h.\1.mlp.proj/Linear#0"]}]})
    pairs = align_records(g, t, mapping)
    check_invariants(pairs, g, t)
    check_fusion(pairs, g)


def test_fusion_from_capture_provenance():
    g, t = fusion_dumps(**{PROVENANCE_KEY: ["h.0.mlp.fc/Linear#0", "h.0.mlp.act/GELU#0", "h.0.mlp.proj/Linear#0"]})
    pairs = align_records(g, t)
    check_fusion(pairs, g)


def test_mapping_exact_names_and_regex_renames():
    g = numbered([rec("model.layers.0.fc", "Linear"), rec("model.layers.1.fc", "Linear"), rec("model.head", "Linear")])
    t = numbered([rec("transformer.h.0.fc", "Linear"), rec("transformer.h.1.fc", "Linear"), rec("lm", "Dense")])
    mapping = mapping_from_dict({
        "rename": [{"target": r"^transformer\.h\.", "golden": "model.layers."}],
        "names": {"lm/Dense#0": "model.head/Linear#0"},
    })
    pairs = align_records(g, t, mapping)
    check_invariants(pairs, g, t)
    assert all(p.match == "mapping" for p in pairs)
    assert pairs[2].golden.name == "model.head/Linear#0/forward/output/0" and "mapping" in pairs[2].note
    assert pairs[0].note == "renamed to model.layers.0.fc/Linear#0/forward/output/0"


def test_mapping_renames_help_sequence_keys():
    g = numbered([rec("model.layers.0.fc", "Linear", call=0), rec("model.layers.0.fc", "Linear", call=1)])
    t = numbered([rec("blocks.0.fc", "Linear", call=0), rec("blocks.0.fc", "Linear", shape=(3, 3), call=1),
                  rec("blocks.0.fc", "Linear", call=2)])
    mapping = mapping_from_dict({"rename": [{"target": r"^blocks\.", "golden": "model.layers."}]})
    pairs = align_records(g, t, mapping)
    check_invariants(pairs, g, t)
    assert sum(1 for p in pairs if p.golden and p.target) == 2


def test_reordered_records_still_pair_by_name():
    g = model(3)
    t = model(3)
    t[0], t[3] = t[3], t[0]
    numbered(t)
    pairs = align_records(g, t)
    check_invariants(pairs, g, t)
    assert all(p.match == "name" for p in pairs)


def test_lcs_is_a_longest_common_subsequence():
    rng = random.Random(1)
    for _ in range(200):
        a = [rng.randint(0, 4) for _ in range(rng.randint(0, 25))]
        b = [rng.randint(0, 4) for _ in range(rng.randint(0, 25))]
        p = lcs(a, b)
        assert all(a[i] == b[j] for i, j in p)
        assert all(p[k][0] < p[k + 1][0] and p[k][1] < p[k + 1][1] for k in range(len(p) - 1))
        dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(len(a)):
            for j in range(len(b)):
                dp[i + 1][j + 1] = dp[i][j] + 1 if a[i] == b[j] else max(dp[i][j + 1], dp[i + 1][j])
        assert len(p) == dp[len(a)][len(b)]


def test_lcs_past_the_edit_budget_falls_back_to_patience():
    a = list(range(5000))
    b = [x + 10_000 for x in range(3000)] + a[:2000] + [x + 20_000 for x in range(3000)]
    p = lcs(a, b, max_d=100)
    assert p == [(i, 3000 + i) for i in range(2000)]


@pytest.mark.parametrize("seq,expected", [([], []), ([3, 1, 2], [1, 2]), ([1, 2, 3], [0, 1, 2])])
def test_longest_increasing(seq, expected):
    assert longest_increasing(seq) == expected


def _same_result(pairs_a, pairs_b):
    return [(p.golden, p.target, p.match, p.golden_group, p.note) for p in pairs_a] == \
        [(p.golden, p.target, p.match, p.golden_group, p.note) for p in pairs_b]


def _variants():
    """Pairs of record lists the equal-names shortcut must either take with the passes' result or leave."""
    base = model(3)
    yield "identical", model(3), model(3), True
    one_renamed = model(3)
    one_renamed[4] = rec("layers.1.fc2", "Linear", "output", "0", (2, 8))
    yield "a renamed module", model(3), numbered(one_renamed), False
    other_call = model(3)
    other_call[2] = rec("layers.0.act", "GELU", "output", "0", (2, 8), call=1)  # name and call both change
    yield "another call number", model(3), numbered(other_call), False
    yield "one record fewer", model(3), model(3)[:-1], False
    yield "graph values", model(3), numbered([rec(r.module, r.op, r.role, r.pos, r.shape, graph_value=f"v{i}")
                                             for i, r in enumerate(base)]), False
    prov = model(3)
    prov[5] = rec("layers.1.act", "GELU", "output", "0", (2, 8), **{PROVENANCE_KEY: ["layers.1.fc/Linear#0"]})
    yield "fusion provenance", model(3), numbered(prov), False
    plain_extra = numbered([rec(r.module, r.op, r.role, r.pos, r.shape, requires_grad=True) for r in base])
    yield "other extra keys", model(3), plain_extra, True
    shapes = model(3)
    shapes[1] = rec("layers.0.fc", "Linear", "output", "0", (3, 8))
    yield "another shape, same name", model(3), numbered(shapes), True


@pytest.mark.parametrize("label,golden,target,shortcut", list(_variants()), ids=[v[0] for v in _variants()])
def test_equal_names_shortcut_gives_what_every_pass_gives(label, golden, target, shortcut):
    """align_records' shortcut for equal name sequences is taken exactly when it may be, with the same
    pairs, kinds, groups and notes as the full passes (and none of the passes' cases goes through it wrongly)."""
    from opdiff.match.align import _same_names, align_passes

    fast = _same_names(golden, target, None)
    assert (fast is not None) == shortcut
    full = align_passes(golden, target, None)
    assert _same_result(align_records(golden, target), full)
    if fast is not None:
        assert _same_result(fast, full)
        assert all(p.golden_group == [] and p.golden_group is not q.golden_group for p, q in zip(fast, fast[1:]))

"""Issue 20: one attention mask in two encodings (eager's additive finfo.min vs SDPA's bool or -inf) is the same
mask to diagnose; a mask that lets other elements through is not."""

from __future__ import annotations

import numpy as np

from opdiff.metrics.masks import masked_error


def _masks(keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    additive = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return additive, keep.copy()


def test_bool_and_additive_masks_letting_the_same_elements_through_agree():
    keep = np.tril(np.ones((1, 1, 6, 6), dtype=bool))
    additive, boolean = _masks(keep)
    assert masked_error(additive, boolean, "float32", "bool") == 0.0
    assert masked_error(boolean, additive, "bool", "float32") == 0.0
    neg_inf = np.where(keep, 0.0, -np.inf).astype(np.float32)
    assert masked_error(neg_inf, boolean, "float32", "bool") == 0.0


def test_bool_and_additive_masks_differing_in_one_element_disagree():
    keep = np.tril(np.ones((1, 1, 6, 6), dtype=bool))
    additive, boolean = _masks(keep)
    boolean[..., 5, 0] = False
    assert masked_error(additive, boolean, "float32", "bool") == 1.0
    bias = additive.copy()
    bias[keep] = 0.5  # an additive bias, not a mask: never equal to a boolean mask
    assert masked_error(bias, keep, "float32", "bool") == 1.0


def test_an_fp16_fill_cast_up_to_fp32_is_still_a_fill():
    keep = np.tril(np.ones((2, 6, 6), dtype=bool))
    scores = np.random.default_rng(0).standard_normal((2, 6, 6)).astype(np.float32)
    golden = np.where(keep, scores, np.finfo(np.float32).min).astype(np.float32)
    target = np.where(keep, scores + 1e-4, np.finfo(np.float16).min).astype(np.float32)  # an fp16 model's mask, upcast
    assert 0 < masked_error(golden, target, "float32", "float32") < 1e-3
    big = np.where(keep, scores, -40000.0).astype(np.float32)  # large values, but no narrower dtype's finfo.min
    assert masked_error(golden, big, "float32", "float32") == 1.0


def test_a_mask_in_a_float_dtype_without_a_known_range_is_judged_not_a_crash():
    """A float dtype the range table lacks (float8_e4m3fnuz): its -inf are the fill (mask_pair lets such a pair
    through when golden holds -inf and the target a fill); it used to raise KeyError out of compare."""
    keep = np.tril(np.ones((4, 4), dtype=bool))
    neg_inf = np.where(keep, 0.0, -np.inf)
    fill = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    assert masked_error(neg_inf, fill, "float8_e4m3fnuz", "float32") == 0.0
    assert masked_error(neg_inf, keep, "float8_e4m3fnuz", "bool") == 0.0
    assert masked_error(neg_inf, ~keep, "float8_e4m3fnuz", "bool") == 1.0

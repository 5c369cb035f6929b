"""What a record without a counterpart means: one rule for compare, diagnose and the library.

Ops one run adds that only move or re-type values (casts, copies, views: e.g. the casts bf16
autocast inserts) are reported but do not fail a run: any difference they make shows in the
matched tensors downstream, which are judged at the precision that ran. Any other op one side
has and the other lacks changes the computation, so it carries a difference and fails the run
(unless the user accepts unmatched records).
"""

from __future__ import annotations

import re

from ..base.record import Record

# op names (any level: aten "aten._to_copy.default", api "torch.Tensor.to", module "Identity") whose
# output holds the same values as their input, up to dtype, layout or storage
_TRANSPARENT = re.compile(
    r"(^|[.:/])(_?to(_copy)?|to_dtype|type_as|type|float|double|half|bfloat16|int|long|bool|copy_?|clone|contiguous"
    r"|_?(unsafe_)?view(_as)?|reshape(_as)?|_reshape_alias|expand(_as)?|squeeze_?|unsqueeze_?|flatten|unflatten"
    r"|t|transpose_?|permute|alias|detach_?|lift_fresh|identity|Identity|_autocast_to_(reduced|full)_precision"
    r"|slice|select|split|chunk|narrow|as_strided|unbind|_unsafe_view)"
    r"(\.(default|Tensor|int|dtype|dtype_layout|other|self|using_ints|Scalar|memory_format|copy|out))?$")


def is_transparent(rec: Record) -> bool:
    """True for a record of an op that only casts, copies or views its input (see module docstring)."""
    return bool(_TRANSPARENT.search(rec.op))


def carries_difference(rec: Record) -> bool:
    """Whether a record without a counterpart fails the run by itself."""
    return not is_transparent(rec)

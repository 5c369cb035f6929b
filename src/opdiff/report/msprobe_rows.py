"""The rows of `msprobe compare`'s result table, built from an opdiff comparison (docs/compare.md, "msprobe").

msprobe 26.x writes one row per target ("NPU") tensor with its golden ("Bench") counterpart, in
one of three layouts: tensor mode (real data), summary mode (statistics) and md5 mode. Columns,
names, units (summary relative errors in percent) and cell spellings ("None", "N/A", "[2, 16]",
"torch.float32") follow msprobe's own files, so that a script reading those reads these unchanged.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from ..base.pair import PairResult
from ..base.record import Record
from ..metrics import names as M

BASIC = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
         "NPU Requires_grad", "Bench Requires_grad"]
TENSOR_METRICS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio"]
SUMMARY_METRICS = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                   "MeanRelativeErr", "NormRelativeErr"]
SIDES = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
EXTRACT = ["Requires_grad Consistent", "Result", "Err_message"]
STACK, DATA_NAME = "NPU_Stack_Info", "Data_name"
HEADERS = {
    "tensor": BASIC + TENSOR_METRICS + SIDES + EXTRACT + [STACK, DATA_NAME],
    "stats": BASIC + SUMMARY_METRICS + SIDES + EXTRACT + [STACK],
    "hash": BASIC + ["NPU MD5", "BENCH MD5"] + EXTRACT + [STACK],
}
_TENSOR_FIELDS = (M.COSINE, M.EUC_DIST, M.MAX_ABS_ERR, M.MAX_REL_ERR, M.ONE_THOUSANDTH, M.FIVE_THOUSANDTH)
NA = "N/A"


def ms_name(r: Record) -> str:
    """msprobe's name of the tensor (kept by the msprobe reader), else opdiff's record name."""
    return str(r.extra.get("msprobe_tensor") or r.name)


def ms_dtype(r: Record) -> str:
    return str(r.extra.get("msprobe_dtype") or f"torch.{r.dtype}")


def _grad(r: Record | None) -> Any:
    return NA if r is None else r.extra.get("requires_grad", NA)


_STATS = ("max", "min", "mean", "norm")
_INT_DTYPES = ("int", "uint", "bool")


def _stats(r: Record | None) -> list[Any]:
    """The cells of max, min, mean and norm at once (the dtype looked at once, not per statistic)."""
    if r is None:
        return [NA] * 4
    s = r.stats
    if s is None:
        return ["None"] * 4
    is_int = r.dtype.startswith(_INT_DTYPES)
    out: list[Any] = []
    for attr, v in zip(_STATS, (s.max, s.min, s.mean, s.norm)):
        if v is None:  # msprobe's statistics of a tensor without them (ints' mean), or all non-finite
            out.append(_nonfinite(s, attr))
        else:
            out.append(int(v) if is_int and float(v).is_integer() else v)
    return out


def _nonfinite(s: Any, attr: str) -> Any:
    if s.nan and attr in ("max", "min", "mean", "norm"):
        return "nan"
    if attr == "max" and s.posinf:
        return "inf"
    if attr == "min" and s.neginf:
        return "-inf"
    return "None"


def _hash(r: Record | None) -> Any:
    if r is None or not r.hash:
        return NA
    kind, _, value = r.hash.partition(":")
    return {"crc32": value, "xor64": f"0x{value}"}.get(kind, r.hash)


def _kind(v: Any) -> str:
    """msprobe's class of a statistic cell: nan, inf, -inf, num, device, na or other."""
    s = str(v).lower()
    if v is None or s in ("nan", "none"):
        return "nan"
    if s in ("inf", "-inf"):
        return s
    if s not in ("true", "false"):
        try:
            float(s)
            return "num"
        except ValueError:
            pass
    if any(d in s for d in ("npu", "cpu", "cuda")):
        return "device"
    return "na" if s == NA.lower() else "other"


def summary_diff(a: Any, b: Any) -> tuple[Any, Any]:
    """(diff, relative error) of one statistic as msprobe writes them: '0' when equal as text; NPU - Bench and
    |diff / Bench| in percent for two numbers ('inf' for Bench 0); otherwise a word for the kinds that differ."""
    if str(a) == str(b):
        return "0", "0"
    ka, kb = _kind(a), _kind(b)
    if ka == kb == "num":
        d = float(a) - float(b)
        return d, f"{abs(d / float(b) * 100)}%" if float(b) != 0 else "inf"
    if "na" in (ka, kb) or ka == kb == "device":
        return NA, NA
    if "device" in (ka, kb) or "other" in (ka, kb):
        return "Diff", "Diff"
    if "nan" in (ka, kb):
        return "Nan", "Nan"
    if ka in ("inf", "-inf"):
        return ka, ka
    if kb in ("inf", "-inf"):
        return ("-inf", "-inf") if kb == "inf" else ("inf", "inf")
    return NA, NA


def _summary(npu: list[Any], bench: list[Any]) -> list[Any]:
    """The four diffs, then the four relative errors, of (max, min, mean, l2norm)."""
    pairs = [summary_diff(a, b) for a, b in zip(npu, bench)]
    return [d for d, _ in pairs] + [r for _, r in pairs]


def row(p: PairResult, mode: str) -> dict[str, Any]:
    """One row of msprobe's table for a pair with a target record (Result and Err_message filled by rules)."""
    g, t = p.golden, p.target
    assert t is not None
    out: dict[str, Any] = {
        "NPU Name": ms_name(t), "Bench Name": ms_name(g) if g else NA,
        "NPU Dtype": ms_dtype(t), "Bench Dtype": ms_dtype(g) if g else NA,
        "NPU Tensor Shape": str(list(t.shape)), "Bench Tensor Shape": str(list(g.shape)) if g else NA,
        "NPU Requires_grad": _grad(t), "Bench Requires_grad": _grad(g),
    }
    if mode == "tensor":
        m: dict[str, Any] = dict(p.metrics)
        for col, key in zip(TENSOR_METRICS, _TENSOR_FIELDS):
            v = m.get(key)
            out[col] = v if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) else NA
        if not t.shape:  # msprobe: a 0-d tensor has no cosine, distance or error ratios
            out.update(dict.fromkeys(("Cosine", "EucDist", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"),
                                     "unsupported"))
    elif mode == "stats":
        out.update(zip(SUMMARY_METRICS, _summary(_stats(t), _stats(g))))
    else:
        out["NPU MD5"], out["BENCH MD5"] = _hash(t), _hash(g)
    if mode != "hash":
        out.update(zip(SIDES, _stats(t) + _stats(g)))
    gg, tg = _grad(g), _grad(t)
    out["Requires_grad Consistent"] = gg == tg or NA in (gg, tg)
    out["Result"], out["Err_message"] = "pass", []
    out[STACK] = t.source or NA
    if mode == "tensor":
        out[DATA_NAME] = str([_data_name(t), _data_name(g)])
    return out


def _data_name(r: Record | None) -> str:
    if r is None or r.data is None:
        return "-1"
    return str(r.data.get("file", "-1")).rsplit("/", 1)[-1]


def api_key(name: str) -> tuple[str, bool]:
    """(the API or module call a row belongs to, whether it is an output row) from msprobe's tensor name."""
    for part in (".output.", ".input.", ".parameters.", ".parameters_grad"):
        head, sep, _ = name.partition(part)
        if sep:
            return head, part == ".output."
    return name, False


def finish(rows: list[dict[str, Any]]) -> None:
    """Err_message as msprobe writes it (a JSON list)."""
    for r in rows:
        r["Err_message"] = json.dumps(r["Err_message"])


def _text_crc(x: list[Any] | None) -> str:
    if x is None or x[1] is None:
        return NA
    return f"{zlib.crc32(str(x[2]).encode()) & 0xFFFFFFFF:08x}"


def scalar_row(name: str, leaf: list[Any], bench: str | None, gleaf: list[Any] | None, mode: str) -> dict[str, Any]:
    """msprobe's row of a non-tensor argument (`[name, type, value]`; type None for a None argument)."""
    def side(x: list[Any] | None) -> tuple[str, str, Any]:
        if x is None:
            return NA, NA, NA
        if x[1] is None:
            return NA, NA, "None"
        return f"<class '{x[1]}'>", "[]", x[2]

    (nd, ns, nv), (bd, bs, bv) = side(leaf), side(gleaf)
    out: dict[str, Any] = {"NPU Name": name, "Bench Name": bench or NA, "NPU Dtype": nd, "Bench Dtype": bd,
                           "NPU Tensor Shape": ns, "Bench Tensor Shape": bs, "NPU Requires_grad": NA,
                           "Bench Requires_grad": NA}
    if mode == "tensor":
        out.update(dict.fromkeys(TENSOR_METRICS, "unsupported"))
    elif mode == "stats":
        out.update(zip(SUMMARY_METRICS, _summary([nv] * 4, [bv] * 4)))
    else:  # msprobe's md5 of a non-tensor argument: the CRC-32 of its text
        out["NPU MD5"], out["BENCH MD5"] = _text_crc(leaf), _text_crc(gleaf)
    if mode != "hash":
        out.update(zip(SIDES, [nv] * 4 + [bv] * 4))
    out.update({"Requires_grad Consistent": True, "Result": "pass", "Err_message": [], STACK: NA})
    if mode == "tensor":
        out[DATA_NAME] = str(["-1", "-1"])
    return out

"""msprobe's data names (`Functional.gelu.0.forward`, `Module.h.0.mlp.GPT2MLP.forward.0`) parsed.

The mapping onto opdiff's record fields is documented in docs/readers.md ("msprobe").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# msprobe's API prefixes -> the namespace opdiff's API capture spells the same call with, per framework
# msprobe names (core/common/const.py API_DATA_PREFIX); msadapter ("mindtorch") spells torch's APIs
API_PREFIXES = {
    "Functional": "torch.nn.functional",
    "Torch": "torch",
    "Tensor": "torch.Tensor",
    "Aten": "aten",
    "Distributed": "torch.distributed",
    "VF": "torch._VF",
    "NPU": "torch_npu",
    "MindSpeed": "mindspeed",
    "Jit": "jit",
}
MINDSPORE_PREFIXES = {
    "Functional": "mindspore.ops",
    "Tensor": "mindspore.Tensor",
    "Mint": "mindspore.mint",
    "MintFunctional": "mindspore.mint.nn.functional",
    "Distributed": "mindspore.communication",
    "MintDistributed": "mindspore.mint.distributed",
    "Primitive": "mindspore.ops.Primitive",
    "Jit": "jit",
}
PREFIXES_OF = {"mindspore": MINDSPORE_PREFIXES}
# dtype spellings msprobe writes besides torch's: MindSpore's (`Float32`, `BFloat16`, `mindspore.int64`) and
# ATen's scalar-type names (aclgraph dumps: `Long`, `Half`); lower-cased they are opdiff's names but for these
_DTYPE_ALIASES = {"byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64", "half": "float16",
                  "float": "float32", "double": "float64", "float8e4m3fn": "float8_e4m3fn", "float8e5m2": "float8_e5m2"}
MODULE_PREFIXES = ("Module", "Cell")
PARAM_GRAD = "parameters_grad"
_FRAME_RE = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in ")
_SKIP_FRAMES = ("/torch/", "/msprobe/", "<frozen ", "/torch_npu/")


@dataclass(frozen=True)
class MsName:
    """One parsed key of dump.json's `data`."""

    key: str
    kind: str  # "api" | "module" | "param_grad"
    op: str  # opdiff op name: "torch.nn.functional.gelu", or the module class "Linear"
    module: str  # module path for module keys ("" for APIs: construct.json gives theirs)
    direction: str  # forward | backward ("backward" for parameter gradients)
    count: int  # msprobe's own counter (per API name, or per module)

    @property
    def forward_key(self) -> str:
        """The key of the forward call this entry belongs to."""
        if self.kind == "module":
            return self.key.rsplit(".", 2)[0] + f".forward.{self.count}"
        if self.kind == "api":
            return self.key.rsplit(".", 1)[0] + ".forward"
        return self.key


def api_op(prefix: str, api: str, framework: str = "pytorch") -> str:
    """opdiff's op name of an msprobe API (`Functional`, `gelu` -> `torch.nn.functional.gelu`; under MindSpore
    `Mint`, `cos` -> `mindspore.mint.cos`); an unknown prefix is kept as msprobe wrote it."""
    ns = PREFIXES_OF.get(framework, API_PREFIXES).get(prefix)
    return f"{ns}.{api}" if ns else f"{prefix}.{api}"


def parse_key(key: str, framework: str = "pytorch") -> MsName | None:
    """Parse one dump.json key (of a dump made under `framework`); None for a key of no known shape."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] in MODULE_PREFIXES and PARAM_GRAD in parts[-2:]:
        count = int(parts[-1]) if parts[-1].isdigit() else 0
        cut = -3 if parts[-1].isdigit() else -2
        return MsName(key, "param_grad", parts[cut], ".".join(parts[1:cut]), "backward", count)
    if len(parts) >= 5 and parts[0] in MODULE_PREFIXES and parts[-2] in ("forward", "backward") and parts[-1].isdigit():
        return MsName(key, "module", parts[-3], ".".join(parts[1:-3]), parts[-2], int(parts[-1]))
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        return MsName(key, "api", api_op(parts[0], ".".join(parts[1:-2]), framework), "", parts[-1], int(parts[-2]))
    return None


def module_path_of(construct_key: str | None) -> str:
    """The module path of a construct.json parent key (`Module.h.0.mlp.GPT2MLP.forward.0` -> `h.0.mlp`)."""
    if not construct_key:
        return ""
    name = parse_key(construct_key)
    return name.module if name is not None and name.kind == "module" else ""


def dtype_of(ms_dtype: str) -> str:
    """opdiff dtype name of any spelling msprobe writes: `torch.float32`, `Float32`, `BFloat16`, `UInt8`, `Bool`,
    `mindspore.int64`, `Long`; an unknown one comes back lower-cased (the caller refuses it)."""
    name = ms_dtype.rsplit(".", 1)[-1].lower()
    return _DTYPE_ALIASES.get(name, name)


def source_of(frames: list[str]) -> str | None:
    """`file:line` of the innermost frame outside torch and msprobe (frames are innermost first)."""
    for frame in frames:
        m = _FRAME_RE.match(frame)
        if m and not any(s in m["file"] for s in _SKIP_FRAMES):
            return f"{m['file']}:{m['line']}"
    return None

"""Fault injection on opdiff.testing.zoo models, for the demo, the tests and the benches of diagnose.

Each fault changes a target model in place so that its module names stay identical to the
golden model's, and says what a correct diagnosis is (verdict and, for faults, the module path).
Needs torch (imported lazily); the models come from `opdiff.testing.zoo`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# verdicts a correct diagnosis gives for each kind of scenario
EXPECTED = {"fault": ("fault",), "overflow": ("overflow",), "benign": ("pass", "drift"), "inputs": ("inputs-differ",)}


@dataclass
class Injected:
    """What was done to the target, and what a correct diagnosis says about it."""

    fault: str
    kind: str  # fault | overflow | benign | inputs
    description: str
    module: str | None  # module path of the culprit in the target model (None: no culprit)
    inputs: dict[str, Any]  # the target's inputs (the golden's unless the fault changes them)
    threads: int | None = None  # torch threads for the target run
    autocast: Any = None  # torch dtype for CPU autocast of the target run
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Verdicts that diagnose the scenario right."""
        return EXPECTED[self.kind]

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The settings the target runs under (thread count, autocast)."""
        import torch

        old = torch.get_num_threads()
        try:
            if self.threads:
                torch.set_num_threads(self.threads)
            with torch.autocast("cpu", dtype=self.autocast, enabled=self.autocast is not None):
                yield
        finally:
            torch.set_num_threads(old)


# -- finding the parts of a model ---------------------------------------------------------

_NORM_RE = re.compile(r"(LayerNorm|RMSNorm|BatchNorm|GroupNorm)", re.I)
_MLP_RE = re.compile(r"(^|\.)(mlp|intermediate|DenseReluDense|DenseGatedActDense|feed_forward|ffn)$", re.I)


def blocks(model) -> tuple[str, Any]:
    """The model's stack of repeated blocks: the first ModuleList of at least two modules."""
    import torch

    for path, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) >= 2:
            return path, mod
    raise ValueError(f"{type(model).__name__}: no stack of repeated blocks found")


def middle_block(model, layer: int | None = None) -> str:
    """Path of the block a fault goes into: `layer`, or the middle one."""
    path, stack = blocks(model)
    i = len(stack) // 2 if layer is None else layer
    if not 0 <= i < len(stack):
        raise ValueError(f"layer {i} out of range: {path} has {len(stack)} blocks")
    return f"{path}.{i}"


def _inside(model, prefix: str) -> Iterator[tuple[str, Any]]:
    for path, mod in model.named_modules():
        if path and (not prefix or path.startswith(prefix + ".")):
            yield path, mod


def _first(model, prefix: str, pred: Callable[[str, Any], bool], what: str) -> tuple[str, Any]:
    for path, mod in _inside(model, prefix):
        if pred(path, mod):
            return path, mod
    raise ValueError(f"{type(model).__name__}: no {what} inside {prefix}")


def _is_linear(mod) -> bool:
    import torch

    return isinstance(mod, (torch.nn.Linear, torch.nn.Conv2d)) or type(mod).__name__ == "Conv1D"


def _is_norm(mod) -> bool:
    return bool(_NORM_RE.search(type(mod).__name__)) and (hasattr(mod, "eps") or hasattr(mod, "variance_epsilon"))


def _act_kind(mod) -> str | None:
    name = type(mod).__name__.lower()
    if "gelu" in name:
        return "gelu_tanh" if ("new" in name or "tanh" in name or "fast" in name) else "gelu"
    if "silu" in name or "swish" in name:
        return "silu"
    if name == "relu":
        return "relu"
    return None


def mlp(model, block: str) -> tuple[str, Any]:
    """The feed-forward part of a block (for conv nets: its main conv sequence)."""
    try:
        return _first(model, block, lambda p, m: bool(_MLP_RE.search(p)), "feed-forward module")
    except ValueError:
        return _first(model, block, lambda p, m: p.endswith(".layer") and any(_is_linear(c) for c in m.modules()), "conv sequence")


def _mlp_linear(model, block: str) -> tuple[str, Any]:
    path, _ = mlp(model, block)
    return _first(model, path, lambda p, m: _is_linear(m), "Linear")


def _attention(model, block: str) -> tuple[str, Any]:
    return _first(model, block, lambda p, m: isinstance(getattr(m, "scaling", None), float), "attention module with a scaling")


# -- tensor helpers -------------------------------------------------------------------------


def _linear_math(mod, x, weight=None):
    """The output of a Linear / Conv1D / Conv2d on x, optionally with another weight, without hooks."""
    import torch
    import torch.nn.functional as F

    w = mod.weight if weight is None else weight
    if isinstance(mod, torch.nn.Linear):
        return F.linear(x, w, mod.bias)
    if isinstance(mod, torch.nn.Conv2d):
        return mod._conv_forward(x, w, mod.bias)
    shape = x.size()[:-1] + (mod.nf,)  # transformers Conv1D
    return torch.addmm(mod.bias, x.view(-1, x.size(-1)), w).view(shape)


class _Direct:
    """Stands in for a child module inside a fused forward: runs its math without module hooks."""

    def __init__(self, mod, fn=None):
        self.mod, self.fn = mod, fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs) if self.fn else self.mod.forward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.mod, name)


@contextlib.contextmanager
def _fused(module, bug_child: str | None = None) -> Iterator[None]:
    """Run `module` as one fused unit: its descendants compute without being called as modules."""
    import torch

    bug = module.get_submodule(bug_child) if bug_child is not None else None
    swapped = []
    for parent in list(module.modules()):
        for name, child in list(parent._modules.items()):
            if child is None:
                continue
            fn = None
            if child is bug:
                # the fused kernel's bug: it reads this projection's weight in bf16
                fn = lambda x, c=child: _linear_math(c, x, c.weight.to(torch.bfloat16).to(c.weight.dtype))
            swapped.append((parent, name, child))
            parent._modules[name] = _Direct(child, fn)
    try:
        yield
    finally:
        for parent, name, child in swapped:
            parent._modules[name] = child


def _fuse(module, bug_child: str | None) -> None:
    """Replace `module`'s forward by a fused version (same math, or with a bug in one projection)."""
    cls_forward = type(module).forward

    def forward(*args, **kwargs):
        with _fused(module, bug_child):
            return cls_forward(module, *args, **kwargs)

    module.forward = forward


# -- attention with a naive softmax, for the overflow scenario --------------------------------

_HOT_SCORE = 30.0  # the hot layer's largest attention score: fine in fp32, exp() overflows fp16 at 11.1


def _hot_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention whose scores are scaled so the largest is 30, softmax written out naively.

    The target's variant computes exp() in fp16, which overflows (exp(30) > 65504).
    """
    import torch

    half = getattr(module, "_opdiff_fp16_softmax", False)
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    scores = scores * (_HOT_SCORE / scores.abs().amax().clamp_min(1e-6))
    if attention_mask is not None:
        mask = attention_mask
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, -1e4)
        scores = scores + mask[..., : key.shape[-2]]
    elif getattr(module, "is_causal", False) and query.shape[-2] > 1:
        n, m = query.shape[-2], key.shape[-2]
        scores = scores.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(m - n + 1), -1e4)
    s = scores.half() if half else scores
    e = torch.exp(s - 0.0)  # no max subtraction: the naive softmax some custom kernels use
    probs = (e / e.sum(-1, keepdim=True)).to(value.dtype)
    out = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return out, probs


def _use_hot_attention(attn, fp16: bool) -> None:
    import copy

    from transformers import AttentionInterface

    AttentionInterface.register("opdiff_hot", _hot_attention)
    attn.config = copy.copy(attn.config)
    attn.config._attn_implementation = "opdiff_hot"
    attn._opdiff_fp16_softmax = fp16


# -- the faults -------------------------------------------------------------------------------


def _norm_eps(model, inputs, block):
    path, norm = _first(model, block, lambda p, m: _is_norm(m), "norm")
    attr = "eps" if hasattr(norm, "eps") else "variance_epsilon"
    old = getattr(norm, attr)
    new = max(old * 10, 1e-4)  # large enough to matter next to the tensor's variance
    setattr(norm, attr, new)
    return path, f"{type(norm).__name__} {path}: {attr} {old:g} -> {new:g}"


def _activation(model, inputs, block):
    import torch.nn.functional as F

    path, act = _first(model, block, lambda p, m: _act_kind(m) is not None, "activation")
    kind = _act_kind(act)
    assert kind is not None  # _first picked a module _act_kind names
    new, what = {
        "gelu": (lambda x: F.gelu(x, approximate="tanh"), "exact GELU -> tanh approximation"),
        "gelu_tanh": (lambda x: F.gelu(x), "tanh-approximated GELU -> exact GELU"),
        "silu": (lambda x: F.hardswish(x), "SiLU -> its hard approximation (hardswish)"),
        "relu": (lambda x: F.leaky_relu(x, 0.01), "ReLU -> leaky ReLU (slope 0.01)"),
    }[kind]
    act.forward = new
    return path, f"{type(act).__name__} {path}: {what}"


def _weight_row(model, inputs, block):
    import torch

    path, lin = _mlp_linear(model, block)
    with torch.no_grad():
        if type(lin).__name__ == "Conv1D":
            lin.weight[:, 3] *= 1.01  # Conv1D stores (in, out)
        else:
            lin.weight[3] *= 1.01
    return path, f"{type(lin).__name__} {path}: output row 3 of its weight scaled by 1.01"


def _attention_scale(model, inputs, block):
    path, attn = _attention(model, block)
    old = attn.scaling
    attn.scaling = old * 1.05
    return path, f"{type(attn).__name__} {path}: attention scale {old:g} -> {old * 1.05:g}"


def _softmax_fp16(model, inputs, block):
    path, attn = _attention(model, block)
    _use_hot_attention(attn, fp16=True)
    return path, f"{type(attn).__name__} {path}: softmax of hot attention scores computed in fp16 without max subtraction (exp overflows)"


def _hot_golden(model, block):
    _, attn = _attention(model, block)
    _use_hot_attention(attn, fp16=False)


def _linear_bf16_input(model, inputs, block):
    import torch

    path, lin = _mlp_linear(model, block)
    forward = lin.forward
    lin.forward = lambda x, *a, **k: forward(x.to(torch.bfloat16).to(x.dtype), *a, **k)
    return path, f"{type(lin).__name__} {path}: fed a bf16-rounded copy of its input"


def _fused_bug(model, inputs, block):
    path, mod = mlp(model, block)
    lin_path, _ = _first(model, path, lambda p, m: _is_linear(m), "Linear")
    _fuse(mod, lin_path[len(path) + 1 :])
    return path, f"{type(mod).__name__} {path}: replaced by a fused kernel that reads {lin_path.rsplit('.', 1)[-1]}'s weight in bf16"


def _fused_ok(model, inputs, block):
    path, mod = mlp(model, block)
    _fuse(mod, None)
    return None, f"{type(mod).__name__} {path}: replaced by a correct fused kernel"


def _rope_base(model, inputs, block):
    import torch

    path, rot = _first(model, "", lambda p, m: isinstance(getattr(m, "inv_freq", None), torch.Tensor), "rotary embedding")
    rot.inv_freq.mul_(1.01)
    return path, f"{type(rot).__name__} {path}: rotary frequencies scaled by 1.01 (another rope theta)"


def _dropout_on(model, inputs, block):
    import torch

    drops = [(p, m) for p, m in _inside(model, block) if isinstance(m, torch.nn.Dropout)]
    if not drops:
        raise ValueError(f"{type(model).__name__}: no Dropout inside {block}")
    path, drop = drops[-1]  # the last one: attention-probability dropouts inside sdpa are not module calls
    drop.p = 0.1
    drop.train()
    return path, f"Dropout {path}: left in training mode with p=0.1"


def _linear_fp16(model, inputs, block):

    path, lin = _mlp_linear(model, block)
    lin.forward = lambda x: _linear_math(lin, x.half(), lin.weight.half()).float() if lin.bias is None else \
        (_linear_math_half(lin, x)).float()
    return path, f"{type(lin).__name__} {path}: computed in fp16"


def _linear_math_half(lin, x):
    import torch

    saved = lin.bias
    try:
        lin.bias = torch.nn.Parameter(saved.detach().half(), requires_grad=False)
        return _linear_math(lin, x.half(), lin.weight.half())
    finally:
        lin.bias = saved


def _embedding_row(model, inputs, block):
    import torch

    path, emb = _first(model, "", lambda p, m: isinstance(m, torch.nn.Embedding), "Embedding")
    if sum(1 for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.weight is emb.weight) > 1:
        raise ValueError(f"{type(model).__name__}: embedding {path} shares its table with other modules")
    ids = inputs.get("input_ids")
    row = int(ids.reshape(-1)[0]) if ids is not None else 0
    with torch.no_grad():
        emb.weight[row] *= 1.01
    return path, f"Embedding {path}: row {row} scaled by 1.01"


def _final_norm_eps(model, inputs, block):
    norms = [(p, m) for p, m in model.named_modules() if _is_norm(m)]
    if not norms:
        raise ValueError(f"{type(model).__name__}: no norm")
    path, norm = norms[-1]
    attr = "eps" if hasattr(norm, "eps") else "variance_epsilon"
    old = getattr(norm, attr)
    new = max(old * 10, 1e-4)
    setattr(norm, attr, new)
    return path, f"{type(norm).__name__} {path} (the last norm): {attr} {old:g} -> {new:g}"


def _activation_module(model, inputs, block):
    import torch

    path, act = _first(model, block, lambda p, m: _act_kind(m) in ("gelu", "gelu_tanh"), "GELU activation")
    new = torch.nn.GELU(approximate="tanh" if _act_kind(act) == "gelu" else "none")
    parent_path, name = path.rsplit(".", 1)
    setattr(model.get_submodule(parent_path), name, new)
    return path, f"{type(act).__name__} {path} replaced by {new!r} (another class, the other GELU)"


def _norm_replaced(model, inputs, block):
    import torch

    path, norm = _first(model, block, lambda p, m: isinstance(m, torch.nn.LayerNorm), "LayerNorm")
    new = torch.nn.LayerNorm(norm.normalized_shape, eps=max(norm.eps * 10, 1e-4))
    new.load_state_dict(norm.state_dict())
    parent_path, name = path.rsplit(".", 1)
    setattr(model.get_submodule(parent_path), name, new)
    return path, f"LayerNorm {path} replaced by a new LayerNorm with eps {new.eps:g} (was {norm.eps:g})"


def _output_hook(model, inputs, block):
    path, lin = _mlp_linear(model, block)
    lin.register_forward_hook(lambda mod, args, out: out * 1.001)
    return path, f"{type(lin).__name__} {path}: a forward hook scales its output by 1.001"


def _manual_layernorm(model, inputs, block):
    import torch

    norms = [m for _, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    if not norms:
        raise ValueError(f"{type(model).__name__}: no nn.LayerNorm")

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias

    for m in norms:
        setattr(m, "forward", forward.__get__(m))  # noqa: B010  (mypy: cannot assign to a method)
    return None, f"every LayerNorm computed by hand ({len(norms)}): same math, other rounding"


def _eager_attention(model, inputs, block):
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        raise ValueError(f"{type(model).__name__}: does not use sdpa attention")
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None:
            cfg._attn_implementation = "eager"
    return None, "attention computed by the eager implementation instead of scaled_dot_product_attention"


def _identical(model, inputs, block):
    return None, "nothing changed: the same model run twice"


def _other_inputs(inputs, seed: int, noise: float | None):
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in inputs.items():
        if not torch.is_tensor(v):
            out[k] = v
        elif v.is_floating_point():
            out[k] = v + noise * torch.randn(v.shape, generator=gen) if noise else torch.randn(v.shape, generator=gen)
        elif k in ("input_ids", "decoder_input_ids"):
            vocab = int(v.max()) + 1
            if noise:
                w = v.clone()
                w[0, 1] = (w[0, 1] + 1) % vocab
                out[k] = w
            else:
                out[k] = torch.randint(0, vocab, v.shape, generator=gen)
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str
    summary: str
    apply: Callable  # (model, inputs, block) -> (culprit module path or None, description)
    prepare: Callable | None = None  # applied to golden and target alike (model, block)


FAULTS: dict[str, Fault] = {f.name: f for f in [
    Fault("norm_eps", "fault", "a norm's epsilon changed", _norm_eps),
    Fault("activation", "fault", "an activation swapped for an approximation", _activation),
    Fault("weight_row", "fault", "one weight row scaled by 1.01", _weight_row),
    Fault("attention_scale", "fault", "the attention scale changed", _attention_scale),
    Fault("softmax_fp16", "overflow", "softmax computed in fp16 so it overflows", _softmax_fp16, _hot_golden),
    Fault("linear_bf16_input", "fault", "a Linear fed bf16-rounded input", _linear_bf16_input),
    Fault("fused_bug", "fault", "a module replaced by a fused kernel with a bug", _fused_bug),
    Fault("identical", "benign", "an identical run", _identical),
    Fault("threads", "benign", "another torch thread count", _identical),
    Fault("bf16_autocast", "benign", "bf16 autocast", _identical),
    Fault("fused_ok", "benign", "a module replaced by a correct fused kernel", _fused_ok),
    Fault("inputs_seed", "inputs", "inputs drawn with another seed", _identical),
    Fault("inputs_noise", "inputs", "noise in the inputs", _identical),
]}
# more scenarios of the same kinds, at other places of the model (opdiff's own, beyond the list)
EXTRA: dict[str, Fault] = {f.name: f for f in [
    Fault("rope_base", "fault", "rotary embedding frequencies changed", _rope_base),
    Fault("dropout_on", "fault", "a dropout left in training mode", _dropout_on),
    Fault("linear_fp16", "fault", "a Linear computed in fp16", _linear_fp16),
    Fault("embedding_row", "fault", "an embedding row scaled by 1.01", _embedding_row),
    Fault("final_norm_eps", "fault", "the last norm's epsilon changed", _final_norm_eps),
    Fault("activation_module", "fault", "an activation module replaced by the other GELU", _activation_module),
    Fault("norm_replaced", "fault", "a LayerNorm replaced by one with another eps", _norm_replaced),
    Fault("output_hook", "fault", "a forward hook scaling a Linear's output", _output_hook),
    Fault("half_model", "benign", "the whole target in fp16", _identical),
    Fault("manual_layernorm", "benign", "LayerNorm computed by hand (other rounding)", _manual_layernorm),
    Fault("eager_attention", "benign", "eager attention instead of sdpa (other kernel)", _eager_attention),
    Fault("bf16_model", "benign", "the whole target in bf16", _identical),
]}
FAULTS.update(EXTRA)


def applicable(fault: str, model) -> bool:
    """Whether `fault` can be injected into `model` (e.g. ResNet has no attention)."""
    import copy

    try:
        inject(fault, copy.deepcopy(model), {}, check_only=True)
        return True
    except ValueError:
        return False


def prepare(fault: str, model, layer: int | None = None) -> None:
    """What the scenario needs in golden and target alike (the hot attention of the overflow case)."""
    f = _get(fault)
    if f.prepare:
        f.prepare(model, middle_block(model, layer))


def inject(fault: str, model, inputs: dict[str, Any], layer: int | None = None, *, check_only: bool = False) -> Injected:
    """Inject `fault` into `model` (in place) in block `layer` (default: the middle one)."""
    f = _get(fault)
    block = middle_block(model, layer)
    module, description = f.apply(model, inputs, block)
    if check_only:
        return Injected(fault, f.kind, description, module, inputs)
    inj = Injected(fault, f.kind, description, module, dict(inputs))
    if fault == "threads":
        import torch

        inj.threads = 1 if torch.get_num_threads() > 1 else 2
        inj.description = f"torch threads {torch.get_num_threads()} -> {inj.threads}"
    elif fault == "bf16_autocast":
        import torch

        inj.autocast = torch.bfloat16
        inj.description = "target runs under torch.autocast('cpu', dtype=torch.bfloat16)"
    elif fault in ("half_model", "bf16_model"):
        import torch

        dtype = torch.float16 if fault == "half_model" else torch.bfloat16
        model.to(dtype)
        inj.inputs = {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
        inj.description = f"the whole target model and its float inputs in {str(dtype).removeprefix('torch.')}"
    elif fault in ("inputs_seed", "inputs_noise"):
        noise = 1e-3 if fault == "inputs_noise" else None
        inj.inputs = _other_inputs(inputs, seed=1234, noise=noise)
        inj.description = "inputs drawn with another seed" if noise is None else "small noise added to the inputs (one token changed)"
    return inj


def _get(fault: str) -> Fault:
    try:
        return FAULTS[fault]
    except KeyError:
        raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}") from None


def build_pair(model_name: str, fault: str, layer: int | None = None, **zoo_kwargs):
    """Golden and target models of one zoo architecture, the target carrying `fault`.

    Returns (golden model, golden inputs, target model, Injected); run the target under
    `injected.running()` on `injected.inputs`.
    """
    from . import zoo

    golden, inputs = zoo.build(model_name, **zoo_kwargs)
    target, _ = zoo.build(model_name, **zoo_kwargs)
    prepare(fault, golden, layer)
    prepare(fault, target, layer)
    return golden, inputs, target, inject(fault, target, inputs, layer)


def run(model, inputs: dict[str, Any], injected: Injected | None = None):
    """Run a model forward without grad (under the target's settings when `injected` is given)."""
    import torch

    ctx = injected.running() if injected is not None else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        return model(**inputs)


__all__ = ["FAULTS", "Fault", "Injected", "build_pair", "inject", "prepare", "applicable", "run", "blocks", "middle_block", "mlp"]

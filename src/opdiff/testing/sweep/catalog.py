"""The sweep's fault and benign-change catalog: each injected by plain torch code that knows nothing of opdiff.

A fault edits the target model in place (weights, module attributes, monkeypatched forwards, forward hooks)
and names the ground-truth culprit module(s) - two for a swap. A benign change alters how the target runs
(dtype, autocast, kernels, threads) and must come out `pass` or `drift`. `plant(name, model, inputs)` returns a
`Planted`; `ValueError` means the class does not apply to this architecture.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import faults as F


@dataclass
class Planted:
    """What was done to the target and what a right diagnosis says."""

    culprits: tuple[str, ...]  # ground-truth culprit module paths (empty: benign)
    description: str
    expect: tuple[str, ...] = ("fault",)  # verdicts that are right
    inputs: dict[str, Any] | None = None  # the target's inputs when they differ from golden's
    threads: int | None = None
    autocast: Any = None  # torch dtype of CPU autocast for the target run
    compile: bool = False
    ort: bool = False  # the target is the model exported to ONNX and run under onnxruntime (sweep/ort.py)

    def running(self) -> contextlib.AbstractContextManager[None]:
        """The settings the target runs under (thread count, autocast)."""
        return F.running_under(self.threads, self.autocast)


@dataclass(frozen=True)
class Klass:
    name: str
    kind: str  # fault | benign
    summary: str
    plant: Callable[[Any, dict[str, Any], str], Planted]  # (target model, inputs, middle block path)
    families: tuple[str, ...] = field(default=())  # empty: any family


# -- finding parts ---------------------------------------------------------------------------------


def _attn(model, block: str) -> tuple[str, Any]:
    """The block's attention module: the first one holding q/k/v projections, else the first `*Attention*` with Linears."""
    for path, m in F._inside(model, block):
        names = set(m._modules)
        if names & {"q_proj", "query", "q", "q_lin"} and names & {"k_proj", "key", "k", "k_lin"}:
            return path, m
    for path, m in F._inside(model, block):
        if "attention" in type(m).__name__.lower() and any(F._is_linear(c) for c in m.children()):
            return path, m
    return F._attention(model, block)


def _called(model, inputs: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """id(module) -> the keyword arguments of its first call, in a plain forward of `model` (a probe run)."""
    import torch

    seen: dict[int, dict[str, Any]] = {}

    def pre(m, args, kwargs):
        seen.setdefault(id(m), kwargs)

    with contextlib.ExitStack() as stack, torch.no_grad():
        for m in model.modules():
            stack.callback(m.register_forward_pre_hook(pre, with_kwargs=True).remove)
        model(**inputs)
    return seen


def _unshared(model, path: str) -> None:
    """ValueError when the module at `path` is registered under several paths (a tied table): its name is ambiguous."""
    mod = model.get_submodule(path)
    if sum(m is mod for _, m in model.named_modules(remove_duplicate=False)) > 1:
        raise ValueError(f"{path} is registered under several paths (shared)")


def _qk(attn) -> tuple[str, str]:
    names = list(attn._modules)
    q = next((n for n in ("q_proj", "query", "q", "q_lin") if n in names), None)
    k = next((n for n in ("k_proj", "key", "k", "k_lin") if n in names), None)
    if q is None or k is None:
        raise ValueError(f"{type(attn).__name__}: no separate q and k projections (fused qkv)")
    return q, k


def _hidden(args, kwargs):
    return args[0] if args else kwargs.get("hidden_states")


def _first_tensor(out):
    import torch

    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)):
        return next((v for v in out if torch.is_tensor(v)), None)
    return None


def _replace_first(out, new):
    if isinstance(out, tuple):
        return (new, *out[1:])
    if isinstance(out, list):
        return [new, *out[1:]]
    return new


# -- faults ----------------------------------------------------------------------------------------


def _wrap(fn):
    def plant(model, inputs, block):
        culprit, what = fn(model, inputs, block)
        return Planted((culprit,), what)
    return plant


def _swap_qk(model, inputs, block):
    import torch

    path, attn = _attn(model, block)
    q, k = _qk(attn)
    wq, wk = attn._modules[q].weight, attn._modules[k].weight
    if wq.shape != wk.shape:
        raise ValueError(f"{path}: q and k differ in shape (GQA), cannot swap")
    with torch.no_grad():
        tmp = wq.clone()
        wq.copy_(wk)
        wk.copy_(tmp)
        bq, bk = attn._modules[q].bias, attn._modules[k].bias
        if bq is not None and bk is not None:
            t = bq.clone()
            bq.copy_(bk)
            bk.copy_(t)
    return Planted((f"{path}.{q}", f"{path}.{k}"), f"{path}: {q} and {k} weights swapped (a loader bug)")


def _transposed(model, inputs, block):
    import torch

    path, attn = _attn(model, block)
    for name, m in attn.named_modules():
        if name and isinstance(m, torch.nn.Linear) and m.weight.shape[0] == m.weight.shape[1] and not name.startswith(_qk(attn)):
            with torch.no_grad():
                m.weight.copy_(m.weight.t().clone())
            return Planted((f"{path}.{name}",), f"{path}.{name}: square weight loaded transposed")
    raise ValueError(f"{path}: no square output projection")


def _mask_hook(change: Callable[[Any], Any], what: str):
    def plant(model, inputs, block):
        path, attn = _attn(model, block)
        if _called(model, inputs).get(id(attn), {}).get("attention_mask") is None:
            raise ValueError(f"{path}: no attention mask reaches it (as a keyword)")

        def pre(mod, args, kwargs):
            mask = kwargs.get("attention_mask")
            if mask is None:
                return None
            return args, {**kwargs, "attention_mask": change(mask)}

        attn.register_forward_pre_hook(pre, with_kwargs=True)
        return Planted((path,), f"{path}: {what}")
    return plant


def _mask_shift(mask):
    import torch

    return torch.roll(mask, shifts=1, dims=-1)


def _gqa_mapping(model, inputs, block):
    import copy

    import torch
    from transformers import AttentionInterface

    path, attn = _attn(model, block)
    groups = getattr(attn, "num_key_value_groups", 1)
    if groups <= 1 or not hasattr(attn, "config"):
        raise ValueError(f"{path}: not grouped-query attention")

    def tiled(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        key, value = key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1)  # kv head h % n_kv, not h // groups
        scores = torch.matmul(query, key.transpose(2, 3)) * (query.size(-1) ** -0.5 if scaling is None else scaling)
        if attention_mask is not None:
            scores = scores + attention_mask[..., : key.shape[-2]]
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs

    AttentionInterface.register("sweep_tiled_gqa", tiled)
    attn.config = copy.copy(attn.config)
    attn.config._attn_implementation = "sweep_tiled_gqa"
    return Planted((path,), f"{path}: key/value heads mapped to query heads by tiling (h % n_kv) instead of grouping")


def _router_order(model, inputs, block):
    import torch

    path, gate = F._first(model, block, lambda p, m: p.endswith((".gate", ".router")) and getattr(m, "weight", None) is not None
                          and m.weight.dim() == 2 and m.weight.shape[0] <= 64, "MoE router")
    with torch.no_grad():
        gate.weight.copy_(gate.weight.flip(0).clone())
    return Planted((path,), f"{path}: router rows in reversed expert order")


def _residual_doubled(model, inputs, block):
    blk = model.get_submodule(block)

    def hook(mod, args, kwargs, out):
        x, y = _hidden(args, kwargs), _first_tensor(out)
        if x is None or y is None or x.shape != y.shape:
            return None
        return _replace_first(out, y + x)

    blk.register_forward_hook(hook, with_kwargs=True)
    return Planted((block,), f"{block}: residual added twice")


def _inplace(model, inputs, block):
    path, norm = F._first(model, block, lambda p, m: F._is_norm(m), "norm")
    forward = norm.forward

    def bad(x, *a, **k):
        y = forward(x, *a, **k)
        x.mul_(0.99)  # the in-place bug: scales the residual stream it was handed
        return y

    norm.forward = bad
    return Planted((path,), f"{path}: scales its input in place (x.mul_(0.99)) after normalising it")


def _fake_quant(model, inputs, block):
    import torch

    path, lin = F._mlp_linear(model, block)
    forward = lin.forward
    weight = lin.weight

    def quant(x, *a, **k):
        w = weight.detach()
        axis = 0 if type(lin).__name__ != "Conv1D" else 1
        scale = w.abs().amax(dim=1 - axis if w.dim() == 2 else tuple(range(1, w.dim())), keepdim=True).clamp_min(1e-12) / 127
        q = torch.round(w / scale).clamp(-127, 127) * scale
        with torch.no_grad():
            saved = weight.data
            weight.data = q
        try:
            return forward(x, *a, **k)
        finally:
            weight.data = saved

    lin.forward = quant
    return Planted((path,), f"{type(lin).__name__} {path}: weight fake-quantised to int8 per output channel inside its forward")


def _fp16_overflow(model, inputs, block):
    import torch

    path, mlp = F.mlp(model, block)

    def hook(mod, args, out):
        y = _first_tensor(out)
        if y is None or not y.is_floating_point():
            return None
        big = (y.to(torch.float16) * 1e5).to(y.dtype)  # the parent's own fp16 scaling: |y| > 0.66 overflows
        return _replace_first(out, big / 1e5)

    mlp.register_forward_hook(hook)
    return Planted((path,), f"{path}: its own code scales its output by 1e5 in fp16 (overflows), then back", expect=("overflow",))


def _dropout_on(model, inputs, block):
    import torch

    called = _called(model, inputs)
    drops = [(p, m) for p, m in F._inside(model, block) if isinstance(m, torch.nn.Dropout) and id(m) in called]
    if not drops:
        raise ValueError(f"{type(model).__name__}: no Dropout module called inside {block}")
    path, drop = drops[-1]
    drop.p = 0.1
    drop.train()
    return Planted((path,), f"Dropout {path}: left in training mode with p=0.1")


def _rope(model, inputs, block):
    culprit, what = F._rope_base(model, inputs, block)
    return Planted((culprit,), what + " (a producer every layer reads)")


def _embedding(model, inputs, block):
    import torch

    ids = inputs.get("input_ids")
    path, emb = F._first(model, "", lambda p, m: isinstance(m, torch.nn.Embedding), "Embedding")
    if ids is None:
        raise ValueError("no input_ids")
    _unshared(model, path)
    with torch.no_grad():
        emb.weight.mul_(1.01)  # shared with an untied-or-tied head: the embedding itself is where it enters
    return Planted((path,), f"Embedding {path}: table scaled by 1.01 (a producer every layer reads)")


def _causal_flag(model, inputs, block):
    path, attn = _attn(model, block)
    if not getattr(attn, "is_causal", False):
        raise ValueError(f"{path}: not causal")
    if _called(model, inputs).get(id(attn), {}).get("attention_mask") is None:
        raise ValueError(f"{path}: no attention mask reaches it (as a keyword)")

    def pre(mod, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None or not mask.is_floating_point():
            return None
        return args, {**kwargs, "attention_mask": mask.transpose(-1, -2).contiguous()}  # anti-causal: sees the future

    attn.register_forward_pre_hook(pre, with_kwargs=True)
    return Planted((path,), f"{path}: causal mask flipped (attends to the future)")


# -- benign changes --------------------------------------------------------------------------------


def _same(model, inputs, block):
    return Planted((), "nothing changed: the same model run twice", ("pass", "drift"))


def _threads(model, inputs, block):
    import torch

    n = 1 if torch.get_num_threads() > 1 else 2
    return Planted((), f"torch threads {torch.get_num_threads()} -> {n}", ("pass", "drift"), threads=n)


def _dtype(dtype_name: str):
    def plant(model, inputs, block):
        import torch

        dtype = getattr(torch, dtype_name)
        model.to(dtype)
        new = {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
        return Planted((), f"the whole target and its float inputs in {dtype_name}", ("pass", "drift"), inputs=new)
    return plant


def _autocast(model, inputs, block):
    import torch

    return Planted((), "target under torch.autocast('cpu', bfloat16)", ("pass", "drift"), autocast=torch.bfloat16)


def _sdpa(model, inputs, block):
    from transformers import AttentionInterface

    if not getattr(model, "_supports_sdpa", False) or "sdpa" not in AttentionInterface._global_mapping:
        raise ValueError(f"{type(model).__name__}: no sdpa attention")
    n = 0
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "_attn_implementation", None) == "eager":
            cfg._attn_implementation = "sdpa"
            n += 1
    if not n:
        raise ValueError("no eager attention to switch")
    return Planted((), "attention by scaled_dot_product_attention instead of eager", ("pass", "drift"))


def _compiled(model, inputs, block):
    return Planted((), "target run by torch.compile (Inductor)", ("pass", "drift"), compile=True)


def _ort(model, inputs, block):
    return Planted((), "target exported to ONNX (TorchScript exporter) and run under onnxruntime", ("pass", "drift"),
                   ort=True)


def _training_only(model, inputs, block):
    raise ValueError("a training class: run by sweep.training, not planted into a forward")


CLASSES: dict[str, Klass] = {k.name: k for k in [
    Klass("norm_eps", "fault", "a norm's epsilon x10", _wrap(F._norm_eps)),
    Klass("activation", "fault", "an activation swapped for a variant", _wrap(F._activation)),
    Klass("weight_row", "fault", "one weight row scaled by 1.01", _wrap(F._weight_row)),
    Klass("swap_qk", "fault", "q and k projection weights swapped (two culprits)", _swap_qk),
    Klass("transposed", "fault", "a square weight loaded transposed", _transposed),
    Klass("rope_base", "fault", "rotary frequencies x1.01 (shared producer)", _rope),
    Klass("attention_scale", "fault", "attention scale x1.05", _wrap(F._attention_scale)),
    Klass("mask_ignored", "fault", "attention mask dropped at one attention", _mask_hook(lambda m: None, "attention mask ignored")),
    Klass("mask_shifted", "fault", "attention mask shifted by one key", _mask_hook(_mask_shift, "attention mask shifted by one key")),
    Klass("causal_flag", "fault", "causal mask flipped at one attention", _causal_flag),
    Klass("gqa_mapping", "fault", "GQA heads tiled instead of grouped", _gqa_mapping),
    Klass("router_order", "fault", "MoE router rows in another expert order", _router_order),
    Klass("dropout_on", "fault", "a dropout left in training mode", _dropout_on),
    Klass("residual_doubled", "fault", "a block adds its residual twice", _residual_doubled),
    Klass("inplace", "fault", "a norm scales its input in place", _inplace),
    Klass("embedding", "fault", "embedding table x1.01 (shared producer)", _embedding),
    Klass("bf16_input", "fault", "a Linear fed a bf16-rounded input", _wrap(F._linear_bf16_input)),
    Klass("fake_quant", "fault", "int8 fake quantisation inside one Linear", _fake_quant),
    Klass("fp16_overflow", "fault", "a parent's own fp16 code overflows", _fp16_overflow),
    Klass("identical", "benign", "the same model twice", _same),
    Klass("threads", "benign", "another thread count", _threads),
    Klass("bf16_model", "benign", "the whole target in bf16", _dtype("bfloat16")),
    Klass("fp16_model", "benign", "the whole target in fp16", _dtype("float16")),
    Klass("autocast", "benign", "bf16 autocast", _autocast),
    Klass("sdpa", "benign", "SDPA instead of eager attention", _sdpa),
    Klass("compiled", "benign", "torch.compile (Inductor)", _compiled),
    Klass("ort", "benign", "an ORT port: exported to ONNX, run under onnxruntime", _ort),
    *[Klass(name, "training", summary, _training_only) for name, summary in (
        ("train_backward", "a custom autograd backward 2 % off (forward exact)"),
        ("train_lr_group", "one param group's learning rate x1.1"),
        ("train_eps_group", "one param group's AdamW eps 1e-8 -> 1e-5"),
        ("train_wd_group", "one param group's weight decay 0.01 -> 0.1"),
        ("train_from_step", "a norm's eps changed from step 1 on"),
        ("train_loss_scale", "the loss scaled by 1.1 and never unscaled"))],
]}


def plant(name: str, model, inputs: dict[str, Any]) -> Planted:
    """Inject class `name` into `model` (in place) in its middle block; ValueError when it does not apply."""
    return CLASSES[name].plant(model, inputs, F.middle_block(model))

"""Issue 20's classes of diagnosis mistakes, on cases built beyond the issue's examples: culprits in execution
order (not parameter registration order), compare and diagnose agreeing on low-precision targets."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import opdiff
from opdiff.compare import compare
from opdiff.diagnose import diagnose


class Attn(torch.nn.Module):
    """k and v registered before q, q computed first: registration order is not execution order."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.v, self.k, self.q = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.o = torch.nn.Linear(d, d)

    def forward(self, x):
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        w = torch.softmax(q @ k.transpose(-1, -2) / 8, dim=-1)
        return self.o(w @ v)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.attn, self.head = torch.nn.Linear(16, 32), Attn(), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.attn(torch.tanh(self.pre(x))))


def _swap(a, b):
    with torch.no_grad():
        w = a.weight.clone()
        a.weight.copy_(b.weight)
        b.weight.copy_(w)


FAULTS = {
    "swapped-qk": lambda m: _swap(m.attn.q, m.attn.k),
    "swapped-qv": lambda m: _swap(m.attn.q, m.attn.v),
    "q-and-k-scaled": lambda m: (m.attn.q.weight.data.mul_(1.05), m.attn.k.weight.data.mul_(1.05)),
}


@pytest.mark.parametrize("level", ["module", "api", "aten"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_two_weight_faults_blame_the_one_that_runs_first(tmp_path, fault, level):
    torch.manual_seed(0)
    golden = Net().eval()
    target = copy.deepcopy(golden)
    FAULTS[fault](target)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    for model, side in ((golden, "g"), (target, "t")):
        with opdiff.capture(model, tmp_path / side, level=level, mode="tensor"), torch.no_grad():
            model(x)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "fault", d.summary
    assert d.culprit.module == "attn.q", d.summary  # q runs first; k and v are registered first


def test_bf16_target_with_a_real_fault_fails_in_compare_and_diagnose(tmp_path):
    """A bf16 model whose one activation is swapped (SiLU for GELU): compare fails pairs, so diagnose must not
    pass; a clean bf16 copy passes both."""
    torch.manual_seed(0)
    golden = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                 torch.nn.Linear(64, 8)).eval()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    clean = copy.deepcopy(golden).to(torch.bfloat16)
    faulty = copy.deepcopy(clean)
    faulty[3] = torch.nn.SiLU()
    with opdiff.capture(golden, tmp_path / "g", level="module"), torch.no_grad():
        golden(x)
    for name, model in (("clean", clean), ("faulty", faulty)):
        with opdiff.capture(model, tmp_path / name, level="module"), torch.no_grad():
            model(x.to(torch.bfloat16))
    for name in ("clean", "faulty"):
        cmp = compare(tmp_path / "g", tmp_path / name)
        d = diagnose(tmp_path / "g", tmp_path / name, comparison=cmp, replay=False)
        compare_fails = cmp.counts()["FAIL"] > 0
        assert compare_fails == (d.exit_code == 1), f"{name}: compare {cmp.counts()} vs diagnose {d.summary}"
    assert d.verdict == "fault" and d.culprit.module == "3", d.summary


def _moe_pair():
    """A tiny Mixtral and a copy whose layer-1 router takes the top-k of the logits instead of the probabilities."""
    import torch.nn.functional as F
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32, num_local_experts=4,
                        num_experts_per_tok=2)
    golden = MixtralForCausalLM(cfg).eval()
    target = copy.deepcopy(golden)
    gate = target.model.layers[1].mlp.gate

    def forward(hidden_states):
        hidden_states = hidden_states.reshape(-1, gate.hidden_dim)
        logits = F.linear(hidden_states, gate.weight)
        values, index = torch.topk(logits, gate.top_k, dim=-1)  # the bug: golden reads softmax(logits)
        return logits, values / values.sum(dim=-1, keepdim=True), index
    gate.forward = forward
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    return golden, target, {"input_ids": ids}


@pytest.mark.parametrize("level", ["module", "api", "aten"])
def test_router_reading_logits_blames_the_router_not_the_root(tmp_path, level):
    pytest.importorskip("transformers")
    golden, target, inputs = _moe_pair()
    for model, side in ((golden, "g"), (target, "t")):
        with opdiff.capture(model, tmp_path / side, level=level, mode="tensor"), torch.no_grad():
            model(**inputs)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "fault", d.summary
    assert d.culprit.module == "model.layers.1.mlp.gate", d.summary  # was <root> ("parent") at api and aten


@pytest.mark.parametrize("level", ["api", "aten"])
@pytest.mark.parametrize("with_optimizer", [False, True], ids=["optimizer-unattached", "optimizer-attached"])
def test_one_param_groups_eps_is_the_update_not_the_backward(tmp_path, level, with_optimizer):
    """AdamW's eps changed in one param group: the optimizer's update is the culprit, also when the capture was
    not handed the optimizer (its ops used to be taken for gradient processing in the backward pass)."""
    for side, eps in (("g", 1e-8), ("t", 1e-6)):
        torch.manual_seed(0)
        model = Net().train()
        opt = torch.optim.AdamW([{"params": list(model.pre.parameters()) + list(model.head.parameters())},
                                 {"params": list(model.attn.parameters()), "eps": eps}], lr=1e-3)
        x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
        with opdiff.capture(model, tmp_path / side, level=level, backward=True,
                            optimizer=opt if with_optimizer else None) as cap:
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "fault", d.summary
    assert d.culprit.direction == "update", d.summary
    assert d.culprit.module.startswith("attn."), d.summary

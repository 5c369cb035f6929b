"""Issue 20: ops a module's own forward pre-hooks run belong to that module's call (not its parent's) at every
capture level, so a mask rewritten on the way into one attention blames that attention; a parent that
rewrites it in its own code is still blamed itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from opdiff.capture import capture
from opdiff.diagnose import diagnose


class Attn(torch.nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        s = q @ k.transpose(-1, -2) / 4
        if mask is not None:
            s = s + mask
        return self.o(torch.softmax(s, dim=-1) @ v)


class Block(torch.nn.Module):
    def __init__(self, shift: bool = False):
        super().__init__()
        self.norm, self.attn, self.mlp = torch.nn.LayerNorm(16), Attn(), torch.nn.Linear(16, 16)
        self.shift = shift  # the parent's own code rolls the mask (a fault of the block, not of attn)

    def forward(self, x, mask):
        m = torch.roll(mask, 1, dims=-1) if self.shift else mask
        h = x + self.attn(self.norm(x), mask=m)
        return h + self.mlp(h)


class Net(torch.nn.Module):
    def __init__(self, shift_in: int | None = None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(shift=i == shift_in) for i in range(3))

    def forward(self, x, mask):
        for b in self.blocks:
            x = b(x, mask)
        return x


def _inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 6, 16, generator=g)
    mask = torch.zeros(2, 1, 6, 6)
    mask[..., 4:] = torch.finfo(torch.float32).min  # the last keys masked out
    return x, mask


def _model(shift_in: int | None = None) -> Net:
    torch.manual_seed(0)
    return Net(shift_in).eval()


def _dump(model: Net, path, level: str) -> torch.Tensor:
    x, mask = _inputs()
    with capture(model, path, level=level, mode="tensor"):
        with torch.no_grad():
            return model(x, mask)


def _hooked(change) -> Net:
    model = _model()

    def pre(mod, args, kwargs):
        return args, {**kwargs, "mask": change(kwargs["mask"])}

    model.blocks[1].attn.register_forward_pre_hook(pre, with_kwargs=True)
    return model


@pytest.mark.parametrize("level", ["module", "api", "aten"])
@pytest.mark.parametrize("change", [lambda m: torch.roll(m, 1, dims=-1), lambda m: torch.zeros_like(m)],
                         ids=["shifted", "dropped"])
def test_mask_rewritten_by_a_pre_hook_blames_the_attention(tmp_path, level, change):
    _dump(_model(), tmp_path / "g", level)
    _dump(_hooked(change), tmp_path / "t", level)
    d = diagnose(str(tmp_path / "g"), str(tmp_path / "t"), replay=False, workers=1)
    assert d.verdict == "fault", d.summary
    assert d.culprit is not None and d.culprit.module == "blocks.1.attn", d.summary


@pytest.mark.parametrize("level", ["module", "aten"])
def test_mask_rolled_by_the_parents_own_code_blames_the_parent(tmp_path, level):
    _dump(_model(), tmp_path / "g", level)
    _dump(_model(shift_in=1), tmp_path / "t", level)
    d = diagnose(str(tmp_path / "g"), str(tmp_path / "t"), replay=False, workers=1)
    assert d.verdict == "fault", d.summary
    assert d.culprit is not None and d.culprit.module == "blocks.1", d.summary


def test_capture_under_user_pre_hooks_changes_nothing_and_records_the_callers_input(tmp_path):
    from opdiff.store import load

    x, mask = _inputs()
    plain = _hooked(lambda m: torch.roll(m, 1, dims=-1))
    with torch.no_grad():
        want = plain(x, mask)
    got = _dump(_hooked(lambda m: torch.roll(m, 1, dims=-1)), tmp_path / "t", "module")
    assert torch.equal(want, got)  # capture changes nothing the hooks compute
    d = load(tmp_path / "t")
    rec = next(r for r in d.records if r.module == "blocks.1.attn" and r.role == "input" and "mask" in r.name)
    assert d.tensor(rec).tolist() == mask.numpy().tolist()  # what the caller passed, before the user's hook

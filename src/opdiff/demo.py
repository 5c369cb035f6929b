"""`opdiff demo`: the whole job end to end on a real transformer, with a fault kept secret.

Builds a model from opdiff.testing.zoo, runs golden and a target carrying a fault picked at random
(revealed only after the diagnosis), captures both, compares, diagnoses, writes the reports,
and says whether the diagnosis found the fault. Needs torch and transformers.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from .base.outdir import prepare_outputs
from .errors import OpdiffError

# what the demo may secretly inject: a real fault (or other inputs), unless a benign change is asked for
DEMO_FAULTS = ("norm_eps", "activation", "weight_row", "attention_scale", "softmax_fp16", "linear_bf16_input",
               "fused_bug", "inputs_noise")
DEMO_BENIGN = ("bf16_autocast", "fused_ok", "threads")  # `--benign`: a change that should PASS (or drift)
DEMO_SIZE = {"layers": 6, "width": 128}  # small enough for a minute on 2 cores, big enough to look real
OUTPUTS = ("golden", "target", "compare.csv", "compare.xlsx", "compare.json", "diagnosis.json")


@dataclass
class DemoResult:
    out: Path
    model: str
    level: str
    fault: str
    description: str
    expected_module: str | None
    verdict: str
    culprit_module: str | None
    found: bool
    reports: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    seed: int | None = None


def prepare_out(out: Path, force: bool) -> None:
    """An empty output directory; with `force`, the demo's own earlier outputs are replaced (nothing else)."""
    prepare_outputs(out, force, OUTPUTS, hint="use --force to replace the demo's outputs")


def _size(model: str) -> dict[str, Any]:
    return {"t5": {"layers": 3, "width": 128}, "resnet": {}}.get(model, DEMO_SIZE)


def new_seed() -> int:
    """A seed for a demo run that was given none; printed, so the same draw can be repeated."""
    return random.SystemRandom().randrange(1, 100_000)


def pool(model: Any, benign: bool = False) -> list[str]:
    """What a secret draw picks from for `model`: the faults of DEMO_FAULTS it can carry, or with `benign`
    the harmless changes of DEMO_BENIGN; never a mix, so a first demo does not show a PASS page by chance."""
    from .testing import faults

    return [f for f in (DEMO_BENIGN if benign else DEMO_FAULTS) if faults.applicable(f, model)]


def pick(model_name: str, seed: int | None, fault: str | None, benign: bool = False) -> tuple[str, int | None]:
    """The secret: which fault (from DEMO_FAULTS, or DEMO_BENIGN when `benign`), in which block (None: the middle one)."""
    from .testing import faults, zoo

    rng = random.Random(seed)
    model, _ = zoo.build(model_name, **_size(model_name))
    if fault is None:
        fault = rng.choice(pool(model, benign))
    elif fault not in faults.FAULTS:
        raise OpdiffError(f"--fault: unknown fault {fault!r} (choose from {', '.join(faults.FAULTS)})")
    _, stack = faults.blocks(model)
    layer = rng.randrange(1, len(stack) - 1) if len(stack) > 2 else None
    return fault, layer


def run_demo(out: str | Path = "opdiff-demo", *, model: str = "gpt2", level: str = "aten", force: bool = False,
             fault: str | None = None, seed: int | None = None, benign: bool = False,
             console: Console | None = None) -> DemoResult:
    """Run the demo; the fault stays hidden until the diagnosis is printed. Without `seed`, one is drawn
    and printed (`--seed` repeats the run); `benign` draws a harmless change instead of a fault."""
    from . import report
    from .capture import capture
    from .compare import compare
    from .diagnose import diagnose
    from .store import load
    from .testing import faults, zoo

    c = console or Console()
    if model not in zoo.BUILDERS:
        raise OpdiffError(f"--model: unknown model {model!r} (choose from {', '.join(zoo.BUILDERS)})")
    out = Path(out)
    prepare_out(out, force)
    secs: dict[str, float] = {}
    t0 = time.perf_counter()
    seed = new_seed() if seed is None else seed
    secret, layer = pick(model, seed, fault, benign)
    golden, inputs, target, inj = faults.build_pair(model, secret, layer, **_size(model))
    what = "a secret change" if fault else ("a secret benign change" if benign else "a secret fault")
    c.print(f"[bold]opdiff demo[/]: a {type(golden).__name__} ({sum(p.numel() for p in golden.parameters()):,} parameters) "
            f"from transformers; the target carries {what}.")
    c.print(f"seed {seed} (repeat this run with --seed {seed})", highlight=False)
    with capture(golden, out / "golden", level=level, mode="tensor"):
        faults.run(golden, inputs)
    with capture(target, out / "target", level=level, mode="tensor"):
        faults.run(target, inj.inputs, inj)
    secs["build+capture"] = time.perf_counter() - t0
    g, t = load(out / "golden"), load(out / "target")
    c.print(f"captured golden ({len(g)} records) and target ({len(t)} records) at {level} level into {out}")

    t1 = time.perf_counter()
    cmp = compare(g, t)
    reports = []
    for fmt in ("csv", "xlsx", "json"):
        path = out / f"compare.{fmt}"
        report.write(cmp, fmt, path)
        reports.append(str(path))
    report.render(cmp, c, top=3, outputs=reports, allow_unmatched=True)
    secs["compare"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    d = diagnose(g, t, comparison=cmp)
    secs["diagnose"] = time.perf_counter() - t2
    c.rule("diagnosis")
    report.render(d, c, golden=str(out / "golden"), target=str(out / "target"))
    report.write(d, "json", out / "diagnosis.json")
    report.write(d, "html", out / "report.html", comparison=cmp, title=f"opdiff demo: {model} at {level} level")
    reports += [str(out / "diagnosis.json"), str(out / "report.html")]

    culprit = d.culprit.module if d.culprit else None
    found = d.verdict in inj.verdicts and (inj.module is None or culprit == inj.module)
    c.rule("the secret")
    c.print(f"injected: [bold]{secret}[/] — {inj.description}")
    expected = f"verdict {' or '.join(inj.verdicts)}" + (f", culprit {inj.module}" if inj.module else "")
    c.print(f"expected {expected}; diagnosis said {d.verdict}" + (f", culprit {culprit}" if culprit else ""))
    c.print("[bold green]diagnosis found it[/]" if found else "[bold red]diagnosis missed it[/]")
    secs["total"] = time.perf_counter() - t0
    c.print(f"reports: {', '.join(reports)}  ({secs['total']:.1f} s)")
    return DemoResult(out, model, level, secret, inj.description, inj.module, d.verdict, culprit, found, reports, secs,
                      seed)

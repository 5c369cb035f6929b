"""One sweep case: build golden and target, prove the planted claim, capture both, compare, diagnose, grade.

`python -m opdiff.testing.sweep.case ARCH CLASS LEVEL PRECISION OUT` runs it alone and writes
OUT/cases/<id>.json - the command the sweep prints to reproduce a case.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import archs, catalog, grade, oracle, ort

LEVELS = ("module", "api", "aten")
PRECISIONS = ("fp32", "bf16")  # the target's dtype (golden is fp32)


@dataclass(frozen=True)
class Case:
    arch: str
    klass: str
    level: str
    precision: str

    @property
    def id(self) -> str:
        return f"{self.arch}.{self.klass}.{self.level}.{self.precision}"

    def command(self, out: str) -> str:
        return f"PYTHONPATH=src python -m opdiff.testing.sweep.case {self.arch} {self.klass} {self.level} {self.precision} {out}"


def result_path(out: str | os.PathLike[str], case: Case) -> Path:
    return Path(out) / "cases" / f"{case.id}.json"


def _to(model, inputs, precision: str):
    import torch

    if precision == "fp32":
        return inputs
    dtype = torch.bfloat16
    model.to(dtype)
    return {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}


def _target_dtype(planted: catalog.Planted, model):
    import torch

    if planted.autocast is not None:
        return planted.autocast
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _capture(model, path: Path, level: str, inputs, planted: catalog.Planted | None) -> Any:
    import torch

    from ...capture import capture

    opts: dict[str, Any] = {"level": level, "mode": "tensor"}
    if planted is not None and planted.compile:
        opts["compile"] = "children"
    ctx = planted.running() if planted is not None else _Null()
    with torch.no_grad(), ctx, capture(model, path, **opts):
        out = model(**inputs)
    return archs.output_tensor(out).detach().clone()


def _plain(model, inputs) -> Any:
    """The model output without capture (the oracle's reference)."""
    import torch

    with torch.no_grad():
        return archs.output_tensor(model(**inputs)).detach().clone()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def prepare(case: Case):
    """(golden, golden inputs, target, target inputs, planted, proof) - the oracle has checked the claim."""
    import torch

    klass = catalog.CLASSES[case.klass]
    golden, inputs = archs.build(case.arch)
    target, _ = archs.build(case.arch)
    t_inputs = _to(target, inputs, case.precision)
    planted = catalog.plant(case.klass, target, t_inputs)
    if planted.compile and case.level != "module":
        raise ValueError("compiled targets are captured at module level only")
    if planted.ort and (case.level != "module" or case.precision != "fp32"):
        raise ValueError("an ORT port is captured at module level (onnxruntime has no api/aten ops), of the fp32 model")
    if planted.inputs is not None:
        t_inputs = planted.inputs
    dtype = _target_dtype(planted, target)
    if klass.kind == "fault":
        clean, _ = archs.build(case.arch)
        _to(clean, inputs, case.precision)
        proof = oracle.prove_fault(clean, target, planted.culprits, t_inputs, dtype)
    else:
        with torch.no_grad():
            g = archs.output_tensor(golden(**inputs))
            try:
                with planted.running():
                    t = archs.output_tensor(target(**t_inputs))
            except RuntimeError as exc:  # the model's own code cannot run this way (e.g. under bf16 autocast)
                raise ValueError(f"the target cannot run so: {str(exc).splitlines()[0][:200]}") from None
        proof = oracle.prove_benign(g, t, dtype)
    return golden, inputs, target, t_inputs, planted, proof


def run(case: Case, work: Path) -> dict[str, Any]:
    """The case's result record (see grade.py for the grades), on one thread; the caller's thread count is
    put back after (a test process goes on with other tests)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(case, work)
    finally:
        torch.set_num_threads(threads)


def _run(case: Case, work: Path) -> dict[str, Any]:
    from ...base.errors import OpdiffError
    from ...compare import compare
    from ...diagnose import diagnose
    from ...diagnose.gate import judge

    t0 = time.perf_counter()
    rec: dict[str, Any] = {**asdict(case), "id": case.id, "kind": catalog.CLASSES[case.klass].kind}
    if rec["kind"] == "training":
        return {**run_training(case, work), **rec, "seconds": time.perf_counter() - t0}
    try:
        golden, inputs, target, t_inputs, planted, proof = prepare(case)
    except (ValueError, archs.Unbuildable) as exc:
        return {**rec, "grade": grade.NOT_APPLICABLE, "reason": str(exc)[:300]}
    rec.update(culprits=list(planted.culprits), description=planted.description, expect=list(planted.expect),
               oracle={"valid": proof.valid, "effect_units": proof.effect, "detail": proof.detail})
    if not proof.valid:
        return {**rec, "grade": grade.INVALID, "seconds": time.perf_counter() - t0}
    gdir, tdir = work / "golden", work / "target"
    if planted.ort:  # the target runs the export under onnxruntime: prove the claim on that run's output
        try:
            onnx_path, feeds = ort.export(target, t_inputs, work / "ort")
            proof = oracle.prove_benign(_plain(golden, inputs), ort.plain_output(target, t_inputs, onnx_path, feeds),
                                        _target_dtype(planted, target))
        except ValueError as exc:
            return {**rec, "grade": grade.NOT_APPLICABLE, "reason": str(exc)[:300], "seconds": time.perf_counter() - t0}
        rec["oracle"] = {"valid": proof.valid, "effect_units": proof.effect, "detail": proof.detail + " (ORT run)"}
        if not proof.valid:
            return {**rec, "grade": grade.INVALID, "seconds": time.perf_counter() - t0}
    try:
        g_out = _capture(golden, gdir, case.level, inputs, None)
        if planted.ort:
            ort.capture(onnx_path, feeds, tdir)
            t_out = g_out
        else:
            t_out = _capture(target, tdir, case.level, t_inputs, planted)
        if planted.compile:  # the compiled run exists only under capture: prove the claim on its output
            proof = oracle.prove_benign(g_out, t_out, _target_dtype(planted, target))
            rec["oracle"] = {"valid": proof.valid, "effect_units": proof.effect, "detail": proof.detail + " (compiled run)"}
            if not proof.valid:
                return {**rec, "grade": grade.INVALID, "seconds": time.perf_counter() - t0}
        cmp = compare(str(gdir), str(tdir), workers=1)
        judge(cmp)  # what `opdiff compare` exits on (compare/gate.py)
        d = diagnose(str(gdir), str(tdir), comparison=cmp, replay=False, workers=1)
    except (OpdiffError, RuntimeError, ValueError, TypeError) as exc:
        return {**rec, "grade": grade.ERROR, "reason": f"{type(exc).__name__}: {str(exc)[:300]}",
                "seconds": time.perf_counter() - t0}
    culprit = d.culprit.module if d.culprit is not None else None
    rec.update(verdict=d.verdict, culprit=culprit, summary=d.summary[:400], compare_passed=cmp.passed(),
               diagnose_passed=d.exit_code == 0, thresholds_passed=cmp.passed_thresholds(),
               candidates=[c.module for c in (d.candidates or [])[:5]])
    rec["grade"] = grade.grade(rec["kind"], planted.culprits, planted.expect, d.verdict, culprit)
    rec["disagree"] = rec["compare_passed"] != rec["diagnose_passed"]
    if os.environ.get(PATCH_ENV) and not planted.compile:
        rec["patch"] = _patch(d, golden, inputs, target, t_inputs, planted, rec["kind"])
    rec["seconds"] = time.perf_counter() - t0
    return rec


PATCH_ENV = "OPDIFF_SWEEP_PATCH"  # set (bench/diagnosis_sweep.py --patch): each case is also confirmed by patching


def _patch(d: Any, golden: Any, inputs: Any, target: Any, t_inputs: Any, planted: catalog.Planted,
           kind: str) -> dict[str, Any]:
    """Confirm the diagnosis by patching (diagnose_models' proof, the target run inside the planted context)
    and grade the verdict it leaves, as the statistics' verdict is graded."""
    from ...capture.torch.patching import TorchPatcher, model_runner
    from ...diagnose.run import confirm_by_patching

    plain = model_runner(target, t_inputs, 0)

    def target_run(install: Any) -> None:
        with planted.running():
            plain(install)
    t0 = time.perf_counter()
    try:
        patcher = TorchPatcher(runners={"golden": model_runner(golden, inputs, 0), "target": target_run})
        confirm_by_patching(d, patcher)
    except (RuntimeError, ValueError, TypeError) as exc:
        return {"status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:200]}"}
    proof = d.patch
    culprit = d.culprit.module if d.culprit is not None else None
    return {"status": proof.status if proof else None, "verdict": d.verdict, "culprit": culprit,
            "culprits": [c.module for c in proof.culprits] if proof else [],
            "ops": [c.op for c in proof.culprits] if proof else [],
            "grade": grade.grade(kind, planted.culprits, planted.expect, d.verdict, culprit),
            "error_before": proof.error_before if proof else None, "error_after": proof.error_after if proof else None,
            "seconds": time.perf_counter() - t0}


def run_training(case: Case, work: Path) -> dict[str, Any]:
    """A training class: prove, capture both runs' steps (forward, backward, update), diagnose, grade."""
    from ...base.errors import OpdiffError
    from ...capture import capture
    from ...compare import compare
    from ...diagnose import diagnose
    from ...diagnose.gate import judge
    from . import training

    try:
        g, truth = training.setup(case.klass, case.arch, "golden")
        proof = training.prove(case.klass, case.arch, truth)
    except (ValueError, archs.Unbuildable) as exc:
        return {"grade": grade.NOT_APPLICABLE, "reason": str(exc)[:300]}
    rec: dict[str, Any] = {"culprits": list(truth.culprits), "description": truth.description, "expect": list(truth.expect),
                           "truth_step": truth.step, "truth_direction": truth.direction,
                           "oracle": {"valid": proof.valid, "effect_units": proof.effect, "detail": proof.detail}}
    if not proof.valid:
        return {**rec, "grade": grade.INVALID}
    t, _ = training.setup(case.klass, case.arch, "target")
    try:
        for s, name in ((g, "golden"), (t, "target")):
            with capture(s.model, work / name, level=case.level, mode="tensor", backward=True, optimizer=s.optimizer) as cap:
                training.train(s, cap)
        # as the two commands do: `opdiff compare` judges every step by the one gate, `opdiff diagnose` too
        cmp = compare(str(work / "golden"), str(work / "target"), workers=1)
        judge(cmp)
        d = diagnose(str(work / "golden"), str(work / "target"), replay=False, workers=1)
    except (OpdiffError, RuntimeError, ValueError, TypeError) as exc:
        return {**rec, "grade": grade.ERROR, "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    c = d.culprit
    rec.update(verdict=d.verdict, culprit=c.module if c is not None else None, summary=d.summary[:400],
               step=c.step if c is not None else None, direction=c.direction if c is not None else None,
               compare_passed=cmp.passed(), diagnose_passed=d.exit_code == 0, thresholds_passed=cmp.passed_thresholds())
    rec["grade"] = grade.grade_training(truth.step, truth.direction, truth.culprits, truth.expect, d.verdict, rec["step"],
                                        rec["direction"], rec["culprit"])
    rec["disagree"] = rec["compare_passed"] != rec["diagnose_passed"]
    return rec


def main(argv: list[str]) -> int:
    """Run one case and write its JSON (OUT/cases/<id>.json); print the record."""
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    arch, klass, level, precision, out = argv
    case = Case(arch, klass, level, precision)
    work = Path(out) / "work" / case.id
    shutil.rmtree(work, ignore_errors=True)
    try:
        rec = run(case, work)
    except Exception as exc:  # a crash is a result of the sweep, recorded with its trace
        rec = {**asdict(case), "id": case.id, "grade": grade.ERROR, "reason": f"{type(exc).__name__}: {exc}"[:300],
               "trace": traceback.format_exc()[-2000:]}
    finally:
        if not os.environ.get("OPDIFF_SWEEP_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    path = result_path(out, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=str))
    tmp.replace(path)
    print(json.dumps({k: rec.get(k) for k in ("id", "grade", "verdict", "culprit", "culprits", "reason")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

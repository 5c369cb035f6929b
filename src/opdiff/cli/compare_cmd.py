"""`opdiff compare GOLDEN TARGET -o OUT`: the thin CLI over opdiff.compare and opdiff.report.

Exit status: 0 the run passes, 1 it fails, 2 bad input. Whether it passes is one judgement of the whole
comparison (compare/gate.py): by default diagnose's verdict on it (--gate noise, the gate `opdiff diagnose`
exits on), or every pair against the fixed per-pair rules (--gate thresholds, msprobe's semantics).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..base import gcpause
from ..base.errors import OpdiffError
from ..base.outdir import check_replaceable, check_writable, claim_dir
from .common import process_exits
from .dask_opts import dask_options
from .parallel_opts import open_sides, parallel_options, parallel_report

FORMATS = ("csv", "xlsx", "json", "html", "model-explorer", "msprobe-csv", "msprobe-xlsx")
MSPROBE_FORMATS = "msprobe-csv,msprobe-xlsx,json"  # what --preset msprobe writes unless --format says
REPORT_STEM = "compare"
EXPLORER = "model-explorer"  # the Model Explorer overlays: a folder, not a compare.<format> file
GATES = ("auto", "noise", "thresholds")  # compare/gate.py GATES (not imported: the kernels load after the input check)


def _formats(text: str) -> list[str]:
    fmts = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise OpdiffError(f"--format: unknown format(s) {', '.join(bad) or '(none)'} (choose from {', '.join(FORMATS)})")
    return list(dict.fromkeys(fmts))


def _prepare_out(out: Path, force: bool, fmts: list[str]) -> None:
    """Before any comparison work: the directory can be written and each report name is opdiff's to replace."""
    claim_dir(out, force, hint="use --force to write into it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OpdiffError(f"{out}: cannot create output directory: {exc.strerror or exc}") from None
    check_writable(out)
    for path in _paths(out, fmts):
        check_replaceable(path, directory=path.name == EXPLORER)  # the overlays: a folder, replaced whole


def _paths(out: Path, fmts: list[str]) -> list[Path]:
    """Where each report goes: `compare.<format>`, the Model Explorer overlays in a folder."""
    return [out / (f if f == EXPLORER else f"{REPORT_STEM}.{f.replace('-', '.')}") for f in fmts]  # as report.output_path


@click.command("compare")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Output directory for the reports.")
@click.option("--mode", type=click.Choice(["auto", "tensor", "stats", "hash"]), default="auto", show_default=True,
              help="What to compare: real data, statistics or content hashes (auto: the richest both dumps have).")
@click.option("--map", "map_file", type=click.Path(), multiple=True,
              help="Mapping file (YAML/JSON): names, renames, fusions; msprobe layer/API mapping (repeatable).")
@click.option("--thresholds", "thresholds_file", type=click.Path(), help="Verdict rules file (YAML/JSON).")
@click.option("--preset", default="default", show_default=True,
              help="Verdict rule preset: default, msprobe-torchair, msaccucmp, bitwise; msprobe: msprobe's "
                   "result files (compare.msprobe.csv/.xlsx, msprobe's columns and Result rules).")
@click.option("--pass-if", "pass_if", multiple=True, metavar="EXPR",
              help="PASS condition replacing the preset's tensor rules, e.g. 'Cosine>=0.999' (repeatable).")
@click.option("--warn-if", "warn_if", multiple=True, metavar="EXPR",
              help="WARNING condition used with --pass-if (repeatable; without it: not PASS is FAIL).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Parallel workers (default: all cores).")
@click.option("--rank", type=int, default=None, help="Rank to compare (default: the first).")
@click.option("--step", type=int, default=None, help="Step to compare (default: the first).")
@click.option("--allow-partial", is_flag=True, help="Compare an incomplete (cut-off) dump up to where it stops.")
@click.option("--allow-unmatched", is_flag=True, help="Records without a counterpart do not fail the comparison.")
@click.option("--force", is_flag=True, help="Write into an existing non-empty output directory.")
@click.option("--format", "formats", default=None,
              help=f"Report formats, comma-separated, from: {', '.join(FORMATS)} [default: csv,xlsx,json].")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, help="Worst pairs to print.")
@click.option("--gate", type=click.Choice(GATES), default="auto", show_default=True,
              help="What decides the exit status: noise (diagnose's verdict: a pair's error against the noise "
                   "propagated from its inputs, as `opdiff diagnose`), thresholds (every pair against the fixed "
                   "per-pair rules, msprobe's semantics); auto: thresholds when --thresholds, --pass-if or a preset "
                   "other than default/msprobe names the rules, else noise.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@dask_options
@parallel_options
def compare_cmd(golden, target, out, mode, map_file, thresholds_file, preset, pass_if, warn_if, workers, rank, step,
                allow_partial, allow_unmatched, force, formats, top, gate, no_progress, scheduler, placement, shard_mb,
                layout_file, merge):
    """Compare every tensor of TARGET with its counterpart in GOLDEN and write reports to OUT.

    Exits 0 when the run passes (--gate), 1 when it fails, 2 on bad input.
    """
    from ..match.mapping import load_mappings
    from ..metrics.thresholds import load_thresholds, parse_expr, with_rules
    from ..metrics.thresholds import preset as get_preset

    rule = gate_rule(gate, preset, thresholds_file, pass_if)
    if preset == "msprobe":  # msprobe's own result files; opdiff's verdict (exit status) by its default rules
        preset, formats = "default", formats or MSPROBE_FORMATS
    fmts = _formats(formats or "csv,xlsx,json")
    th = load_thresholds(thresholds_file, base=preset) if thresholds_file else get_preset(preset)
    if warn_if and not pass_if:
        raise OpdiffError("--warn-if needs --pass-if")
    if pass_if:
        th = with_rules(th, [parse_expr(e) for e in pass_if], [parse_expr(e) for e in warn_if])
    mapping = load_mappings(map_file)
    if scheduler and merge:  # the dumps may sit on other hosts: refused by the flag, before reading them
        raise OpdiffError("--scheduler compares rank i with rank i and cannot merge ranks: drop --scheduler or "
                          "--merge-ranks")
    if scheduler:  # every selected (rank, step) part, on Dask (docs/scale.md)
        from .dask_opts import run_compare

        return run_compare(golden, target, Path(out), scheduler=scheduler, placement=placement, shard_mb=shard_mb,
                           fmts=fmts, top=top, allow_unmatched=allow_unmatched, force=force, mapping=mapping,
                           mode=mode, thresholds=th, rank=rank, step=step, allow_partial=allow_partial)
    with gcpause.paused():  # ~a million long-lived objects: no full collections over them (base/gcpause.py)
        g, t = open_sides(golden, target, rank, step, allow_partial, layout_file, merge)
        out_dir = Path(out)
        _prepare_out(out_dir, force, fmts)
        from .. import report
        from ..compare.run import compare  # the kernels load only once the input is known to be good
        from .parallel_opts import merged

        every_step = rank is None and step is None and not merged(g) and not merged(t)  # --step/--rank: that part only
        cmp = compare(g, t, mapping=mapping, mode=mode, thresholds=th, workers=workers, progress=not no_progress,
                      all_steps=every_step)
        from ..diagnose.gate import judge

        judge(cmp, rule="thresholds" if rule == "thresholds" else "noise", allow_unmatched=allow_unmatched)  # the run's pass/fail, before anything is reported
        paths = _paths(out_dir, fmts)
        # the verdict first: the report files (XLSX alone takes seconds on big comparisons) are written
        # after it, before the command returns; each to a temporary file renamed into place
        report.render(cmp, top=top, outputs=[str(p) for p in paths], allow_unmatched=allow_unmatched)
        report.write_many(cmp, list(zip(fmts, paths)))  # CSV, XLSX and JSON in one pass over the rows
        _say_steps(cmp, allow_unmatched)
        ranks_failed = parallel_report(g, t, cmp.results, th, out_dir)
        code = 0 if cmp.passed(allow_unmatched) and not ranks_failed else 1
        if process_exits():  # every output written and closed: the OS takes the memory back, no freeing
            gcpause.keep_until_exit(cmp, g, t)
        return code


def gate_rule(gate: str, preset: str, thresholds_file: str | None, pass_if: tuple[str, ...]) -> str:
    """The rule --gate names; auto: the fixed per-pair rules when the user named some, else the noise rule."""
    if gate != "auto":
        return gate
    chose_rules = bool(thresholds_file or pass_if) or preset not in ("default", "msprobe")
    return "thresholds" if chose_rules else "noise"


def _say_steps(cmp, allow_unmatched: bool) -> None:
    """One line for the steps compared: how many, which fail the fixed thresholds, where the run diverges."""
    if not cmp.other_steps:
        return
    bad = cmp.failed_steps(allow_unmatched)
    j = cmp.judgement
    diverges = f"; the run first diverges at step {j.step}" if j is not None and not j.passed and j.step is not None \
        else ""
    click.echo(f"{len(cmp.other_steps) + 1} steps compared (rank {cmp.target.rank}), each in the CSV, XLSX and JSON reports; "
               + (f"pairs over the fixed thresholds at step(s) {', '.join(str(s) for _, s in bad)}" if bad
                  else "no other step has a pair over the fixed thresholds") + diverges)


def register(cli: click.Group) -> None:
    cli.add_command(compare_cmd)

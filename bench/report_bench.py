"""HTML report at scale: a synthetic comparison of 100,000 records -> the report's file size and its
load time in chromium (time from navigation until the error-along-execution chart is drawn).

    python bench/report_bench.py [--records 100000] [--out /tmp/opdiff-report-bench] [--reuse]

Needs plotly (the `report` extra), playwright (the `browser` extra) and /usr/bin/chromium
(.ci/install-browser). Figures go to docs/report.md by hand; this script only prints them.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def tensors(n_records: int, fault_at: int | None, seed: int):
    """n_records/2 ops of one input and one output each (64 fp32 values), 100 ops per module; the
    target carries rounding-sized noise everywhere and a 1 % error in the output of op `fault_at`."""
    from opdiff.testing.synthetic import Tensor

    rng = np.random.default_rng(0)
    noise = np.random.default_rng(seed)
    x = rng.standard_normal(64).astype(np.float32)
    for k in range(n_records // 2):
        drift = np.float32(1.01 if k == fault_at else 1.0)
        module = f"layers.{k // 400}.block{(k // 100) % 4}.op{k % 100}"
        y = np.tanh(x).astype(np.float32)
        yt = y * drift + (noise.standard_normal(64).astype(np.float32) * 3e-8 * (1 + k % 7) if fault_at is not None else 0)
        yield Tensor(module, "Tanh", "input", "0", x)
        yield Tensor(module, "Tanh", "output", "0", yt.astype(np.float32))
        x = y


def build(out: Path, n: int, reuse: bool) -> tuple[Path, Path]:
    from opdiff.testing.synthetic import write_dump

    g, t = out / "golden", out / "target"
    if not (reuse and g.exists() and t.exists()):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        write_dump(g, tensors(n, None, 1))
        write_dump(t, tensors(n, n // 4, 2))
    return g, t


def load_time(html: Path, repeat: int) -> list[float]:
    """Seconds from navigation to the chart drawn, per fresh page."""
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            t0 = time.perf_counter()
            page.goto(html.as_uri(), timeout=300_000)
            page.wait_for_selector("body[data-chart=drawn]", timeout=300_000)
            times.append(time.perf_counter() - t0)
            page.close()
        browser.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=Path("/tmp/opdiff-report-bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reuse", action="store_true", help="keep the dumps of an earlier run in --out")
    a = ap.parse_args()
    from opdiff import load
    from opdiff.compare import compare
    from opdiff.diagnose import diagnose
    from opdiff.report import write_html

    t0 = time.perf_counter()
    g, t = build(a.out, a.records, a.reuse)
    print(f"dumps: {a.records} records per side in {time.perf_counter() - t0:.1f} s")
    gd, td = load(g), load(t)
    t1 = time.perf_counter()
    cmp = compare(gd, td, workers=2)
    d = diagnose(gd, td, comparison=cmp, replay=False)
    print(f"compare + diagnose: {time.perf_counter() - t1:.1f} s; verdict {d.verdict}, counts {cmp.counts()}")
    html = a.out / "report.html"
    t2 = time.perf_counter()
    write_html(cmp, html, diagnosis=d, title=f"report bench: {a.records} records")
    print(f"write_html: {time.perf_counter() - t2:.1f} s, {html.stat().st_size / 1e6:.1f} MB ({html})")
    times = load_time(html, a.repeat)
    print("chromium, navigation to chart drawn: " + ", ".join(f"{s:.2f} s" for s in times))


if __name__ == "__main__":
    main()

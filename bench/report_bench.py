"""Diagnose and the HTML report at scale (issue 23, target 4): a synthetic comparison of 100,000 records ->
diagnose's CPU time over compare's, the report's file size and its load time in chromium.

    python bench/report_bench.py [--records 100000] [--out /tmp/opdiff-report-bench] [--reuse] [--repeat 3]

Compare runs with one worker so that both CPU figures are this process's own. "Chart drawn" is the page's
own stamp (performance.now(), milliseconds since navigation started) taken in the first animation frame
after plotly drew the error-along-execution chart, when the page sets body[data-chart=drawn]; "ready" is
when the module tree and the opening selection (details, sample charts) are there too. The wall time from
Playwright's goto() to the marker is printed beside them.

Needs plotly (the `report` extra), playwright (the `browser` extra) and /usr/bin/chromium
(.ci/install-browser). Figures go to docs/report.md by hand; this script only prints them.
"""

from __future__ import annotations

import argparse
import os
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


def load_time(html: Path, repeat: int) -> list[dict[str, float]]:
    """Per fresh page: seconds from navigation to the data decoded, the chart drawn and the page ready (the
    page's own stamps), and Playwright's wall time from goto() to the chart marker."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("OPDIFF_CHROMIUM", "/usr/bin/chromium"), args=ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            t0 = time.perf_counter()
            page.goto(html.as_uri(), timeout=300_000)
            page.wait_for_selector("body[data-chart=drawn]", timeout=300_000)
            wall = time.perf_counter() - t0
            page.wait_for_selector("body[data-ready]", state="attached", timeout=300_000)
            stamps = page.evaluate("window.opdiff.timing")
            out.append({"wall": wall, **{k: v / 1000 for k, v in stamps.items()}})
            page.close()
        browser.close()
    return out


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
    compare(gd, td, workers=1)  # loads (or compiles) the kernels
    c0 = time.process_time()
    cmp = compare(gd, td, workers=1)
    c_cmp = time.process_time() - c0
    cpus = []
    for _ in range(a.repeat):
        c0 = time.process_time()
        d = diagnose(gd, td, comparison=cmp, replay=False)
        cpus.append(time.process_time() - c0)
    print(f"compare: {c_cmp:.2f} s CPU; diagnose beyond it: best {min(cpus):.2f} s CPU of {a.repeat} = "
          f"{min(cpus) / c_cmp:.1%} of compare's (load average {os.getloadavg()[0]:.1f}); verdict {d.verdict}, "
          f"counts {cmp.counts()}")
    html = a.out / "report.html"
    t2 = time.perf_counter()
    write_html(cmp, html, diagnosis=d, title=f"report bench: {a.records} records")
    print(f"write_html: {time.perf_counter() - t2:.1f} s, {html.stat().st_size / 1e6:.1f} MB ({html})")
    for k, st in enumerate(load_time(html, a.repeat)):
        print(f"chromium load {k + 1}: script starts {st.get('script', 0):.2f} s, data decoded {st.get('decoded', 0):.2f} s, "
              f"chart drawn {st.get('chart', 0):.2f} s, ready {st.get('ready', 0):.2f} s after navigation "
              f"(goto -> chart marker {st['wall']:.2f} s wall)")


if __name__ == "__main__":
    main()

"""TensorFlow capture overhead on a small Keras MLP-block model: ratio of each capture to its plain run.

    .venv/bin/python bench/tf_capture_bench.py                          # 4 blocks, width 256, batch 32
    .venv/bin/python bench/tf_capture_bench.py --blocks 8 --width 512 --repeat 5

Layer level (every Keras layer call, eager) is timed against the plain eager call `model(x)`.
Op level (every op through tfdbg) runs the model as the capture's own tf.function, traced inside
the capture, so it is timed against a fresh `tf.function(model)(x)` (trace + one call), and the
warm call of that function is printed too. Each time is the `with` block's wall time, the dump
written and closed (best of --repeat, alternating with the plain run to share its machine load). Sizes are the dump on disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from capture_bench import dir_size, timed

import opdiff.tf


def build(blocks: int, width: int) -> keras.Model:
    """A seeded residual MLP: LayerNorm -> Dense(2w, gelu) -> Dense(w) per block, a Dense head."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((width,))
    h = inp
    for i in range(blocks):
        y = keras.layers.LayerNormalization(epsilon=1e-5, name=f"norm{i}")(h)
        y = keras.layers.Dense(2 * width, activation="gelu", name=f"up{i}")(y)
        h = keras.layers.Add(name=f"res{i}")([h, keras.layers.Dense(width, name=f"down{i}")(y)])
    return keras.Model(inp, keras.layers.Dense(16, name="head")(h), name="mlp")


def best(fn, repeat: int) -> float:
    return min(timed(fn)[0] for _ in range(repeat))


def best_pair(plain, captured, repeat: int) -> tuple[float, float]:
    """Best wall times of the plain run and the captured one, alternated so both see the same machine load."""
    times = [(timed(plain)[0], timed(captured)[0]) for _ in range(repeat)]
    return min(p for p, _ in times), min(c for _, c in times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    model = build(args.blocks, args.width)
    x = tf.constant(np.random.RandomState(0).randn(args.batch, args.width).astype(np.float32))
    model(x)  # build and warm the eager path
    tmp = tempfile.mkdtemp(prefix="opdiff-tf-bench-")
    out = os.path.join(tmp, "dump")

    def captured(level: str, mode: str):
        def go() -> None:
            shutil.rmtree(out, ignore_errors=True)
            with opdiff.tf.capture(model, out, level=level, mode=mode) as cap:
                (cap if level == "op" else model)(x)
        return go

    print(f"TF {tf.__version__}, keras {keras.__version__}: {args.blocks} blocks x width {args.width}, "
          f"batch {args.batch}, best of {args.repeat}", file=sys.stderr)
    eager = best(lambda: model(x), args.repeat)
    fresh = best(lambda: tf.function(model)(x), args.repeat)
    warm_fn = tf.function(model)
    warm_fn(x)
    warm = best(lambda: warm_fn(x), args.repeat)
    print(f"plain eager {eager * 1e3:.1f} ms; tf.function fresh (trace + call) {fresh * 1e3:.1f} ms, "
          f"warm {warm * 1e3:.2f} ms")
    print(f"{'level':6} {'mode':7} {'plain ms':>9} {'time ms':>9} {'ratio':>7}  vs            {'records':>7} {'dump':>9}")
    try:
        for level, plain_fn, against in (("layer", lambda: model(x), "eager"),
                                         ("op", lambda: tf.function(model)(x), "fresh tf.fn")):
            for mode in ("stats", "hash", "tensor"):
                plain, t = best_pair(plain_fn, captured(level, mode), args.repeat)
                n = len(opdiff.load(out).records)
                print(f"{level:6} {mode:7} {plain * 1e3:9.1f} {t * 1e3:9.1f} {t / plain:7.1f}x {against:13} {n:7d} "
                      f"{dir_size(out) / 1e6:7.2f}MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

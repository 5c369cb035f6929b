"""Run msaccucmp's own numpy functions (format conversions, comparison algorithms) on arrays from a job file.

Run by the mindstudio-probe interpreter (tests/test_ge_formats.py), never in the test process:
`python msaccucmp_ref.py JOB.json OUT_DIR`. JOB lists conversions {name, module, shape_from,
shape_to, array} and metric pairs {name, target, golden} (paths to .npy files); conversions are
saved as OUT_DIR/{name}.npy, metrics go to OUT_DIR/metrics.json as the strings msaccucmp returns.
"""

import importlib
import json
import os
import sys
from pathlib import Path

import msprobe
import numpy as np

ROOT = Path(msprobe.__file__).parent / "msaccucmp"
sys.path.insert(0, str(ROOT))  # msaccucmp imports its modules as top-level packages (cmp_utils ...)

ALGORITHMS = ["CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
              "KullbackLeiblerDivergence", "StandardDeviation", "MeanAbsoluteError", "RootMeanSquareError",
              "MaxRelativeError", "MeanRelativeError"]


def main(job_path: str, out: str) -> None:
    job = json.loads(Path(job_path).read_text())
    os.makedirs(out, exist_ok=True)
    for c in job.get("conversions", []):
        mod = importlib.import_module(f"format_manager.builtin_format_convert.{c['module']}")
        arr = np.load(c["array"], allow_pickle=False).reshape(-1)
        np.save(Path(out) / f"{c['name']}.npy", np.ascontiguousarray(mod.convert(c["shape_from"], c["shape_to"], arr)))
    from algorithm_manager.algorithm_parameter import AlgorithmParameter
    from cmp_utils import utils_type

    results = {}
    for m in job.get("metrics", []):
        t = np.load(m["target"], allow_pickle=False).astype(np.float64).reshape(-1)
        g = np.load(m["golden"], allow_pickle=False).astype(np.float64).reshape(-1)
        args = AlgorithmParameter()
        args.shape_type = utils_type.ShapeType.Vector
        args.my_output_dump_file, args.ground_truth_dump_file = m["target"], m["golden"]
        row = {}
        for alg in ALGORITHMS:
            fn = importlib.import_module(f"algorithm_manager.builtin_algorithm.alg_{alg}").compare
            row[alg] = fn(t, g, args)[0]
        results[m["name"]] = row
    (Path(out) / "metrics.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""Parameter records of an ORT run: the weights the exported graph holds, named as the torch capture names them.

The torch golden records every parameter once per step (level "param", under its first owner for tied
weights). Without the target's counterpart such a record has nothing to pair with, and a tied weight whose
owner is never called under its own name (T5's `shared`, called as `encoder.embed_tokens`) has nothing
compared after it in its module: the comparison cannot vouch for it. The export notes the parameter names
in the torch capture's order (`PARAMS_KEY`); the TorchScript exporter keeps them as initializer names
under the wrapper, so each is read back from the graph the session is built from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from onnx import numpy_helper

from .export import PARAMS_KEY


def read_parameters(proto: Any, prefix: str) -> Iterator[tuple[str, str, str, np.ndarray]]:
    """(module path, parameter name, initializer name, array) for each noted parameter the graph holds."""
    noted = next((p.value for p in proto.metadata_props if p.key == PARAMS_KEY), None)
    try:
        names = json.loads(noted) if noted else []
    except ValueError:
        return
    inits = {i.name: i for i in proto.graph.initializer}
    for full in names if isinstance(names, list) else []:
        init = inits.get(f"{prefix}.{full}") if isinstance(full, str) else None
        if init is None:
            continue
        module, _, pname = full.rpartition(".")
        yield module, pname, init.name, numpy_helper.to_array(init)

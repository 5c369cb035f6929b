"""Tiered capture: `opdiff.hunt(golden_fn, target_fn, out)` finds a culprit without a full tensor dump.

Pass 1 captures both runs in statistics mode over the whole model and localises the suspect
region; pass 2 re-runs both in tensor mode restricted to that region; diagnose names the op.
Needs torch (the functions capture their models with opdiff.capture). See docs/scale.md.
"""

from .run import HuntResult, NotDeterministic, hunt
from .volume import PassInfo

__all__ = ["hunt", "HuntResult", "PassInfo", "NotDeterministic"]

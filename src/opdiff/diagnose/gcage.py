"""The objects a diagnosis keeps (its graph: ~3 per record) moved to the collector's oldest generation at once.

diagnose() runs with the collector paused (base/gcpause.py); the first allocation after it would make a
young-generation collection walk every object the pass made (~300,000 at 100,000 records, about a tenth of
diagnose's time), only to find them all alive: the Diagnosis holds them. `gc.freeze()` then `gc.unfreeze()`
moves every tracked object into the oldest generation by list splicing (no walk): full collections still see
them, so a cycle among them is still collected, just later. Skipped when the caller froze objects itself
(gc.freeze before a fork): unfreezing would release theirs.
"""

from __future__ import annotations

import gc


def age_all() -> bool:
    """Move every tracked object into the oldest generation without walking them; False when not done (the
    caller holds frozen objects)."""
    if gc.get_freeze_count():
        return False
    gc.freeze()
    gc.unfreeze()
    return True

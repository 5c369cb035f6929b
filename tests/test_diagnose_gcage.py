"""diagnose's graph moved to the oldest GC generation without a walk (diagnose/gcage.py)."""

from __future__ import annotations

import gc

import pytest

from opdiff.diagnose import gcage


class _Obj:
    pass


def test_age_all_moves_new_objects_to_the_oldest_generation() -> None:
    if gc.get_freeze_count():
        pytest.skip("this process already holds frozen objects")
    was = gc.isenabled()
    gc.disable()
    try:
        made = [_Obj() for _ in range(1000)]
        assert gc.get_count()[0] >= 1000
        assert gcage.age_all() is True
        assert gc.get_count()[0] == 0  # no young collection is due over them
        assert gc.get_freeze_count() == 0  # nothing is left frozen
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(o) in oldest for o in made)
    finally:
        if was:
            gc.enable()


def test_age_all_leaves_a_callers_frozen_objects_frozen() -> None:
    before = gc.get_freeze_count()
    was = gc.isenabled()
    gc.disable()
    try:
        gc.freeze()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gcage.age_all() is False
        assert gc.get_freeze_count() == frozen
    finally:
        if not before:
            gc.unfreeze()
        if was:
            gc.enable()

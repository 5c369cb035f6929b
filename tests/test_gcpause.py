"""base/gcpause: the cyclic collector held off inside the block and given back as it was."""

from __future__ import annotations

import gc
import weakref

from opdiff.base import gcpause


def test_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():  # nested: the inner block leaves it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # off before: stays off
    finally:
        gc.enable()


def test_paused_gives_it_back_on_an_error_and_cycles_are_collected_after():
    class Node:
        pass

    try:
        with gcpause.paused():
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle made inside the block
            alive = weakref.ref(a)
            del a, b
            assert alive() is not None  # reference counting alone cannot free a cycle
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.isenabled()
    gc.collect()
    assert alive() is None  # collected once the collector is back

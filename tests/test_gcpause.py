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


def test_keep_until_exit_leaves_the_objects_to_the_os_and_atexit_still_runs(tmp_path):
    """In a child process: the kept objects are never freed (no finaliser runs at exit), atexit handlers and
    buffered output still do."""
    import subprocess
    import sys

    code = ("import atexit, gc, sys, weakref\n"
            "from opdiff.base import gcpause\n"
            "class Big:\n"
            "    def __del__(self): print('freed', flush=True)\n"
            "big = Big()\n"
            "atexit.register(lambda: print('atexit ran, frozen', gc.get_freeze_count() > 0))\n"
            "gcpause.keep_until_exit(big)\n"
            "del big\n"
            "sys.stdout.write('buffered, never flushed by hand')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "freed" not in p.stdout
    assert "atexit ran, frozen True" in p.stdout and "buffered, never flushed by hand" in p.stdout

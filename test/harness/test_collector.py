"""test/conftest.py: the garbage collector is off only while collecting."""

import gc


def test_the_collector_is_on_for_the_tests():
    assert gc.isenabled()


def test_what_collecting_left_is_frozen():
    assert gc.get_freeze_count() > 0

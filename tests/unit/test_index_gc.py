"""protect/index.no_gc: the walk's objects are not scanned when the collector
comes back on (they go to the oldest generation, or stay frozen in the CLI's
own process), and a program's own frozen objects are left as they were."""
from __future__ import annotations

import gc

import pytest

from confine.protect import index


@pytest.fixture(autouse=True)
def collector_as_before(monkeypatch):
    gc.unfreeze()                  # what another test (the CLI's path) froze
    monkeypatch.setattr(index, "OWN_PROCESS", False)
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()


def _walk(n: int = 20000) -> list:
    with index.no_gc():
        made = [(i, [i]) for i in range(n)]
        assert not gc.isenabled()
    return made


def _young(made: list, generations: tuple[int, ...] = (0,)) -> int:
    ids = {id(x) for x in made}
    return sum(1 for g in generations for o in gc.get_objects(generation=g) if id(o) in ids)


def test_the_walks_objects_go_to_the_oldest_generation_unscanned():
    gc.collect()
    made = _walk()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert _young(made, (0, 1)) == 0 and _young(made, (2,)) == len(made)
    assert gc.get_count()[0] < 100                       # nothing left for a gen-0 pass
    control = [(i, [i]) for i in range(2000)]            # made with the collector on
    assert gc.get_count()[0] > 0 or _young(control) > 0


def test_a_programs_own_frozen_objects_stay_as_they_were():
    keep = [[1], [2]]
    gc.freeze()
    frozen = gc.get_freeze_count()
    made = _walk()
    assert gc.get_freeze_count() == frozen               # neither released nor grown
    assert _young(made, (0, 1)) > 0          # the collector saw or will see them (young)
    del keep


def test_in_confines_own_process_the_walks_objects_stay_frozen(monkeypatch):
    monkeypatch.setattr(index, "OWN_PROCESS", True)
    before = gc.get_freeze_count()
    made = _walk()
    assert gc.get_freeze_count() >= before + len(made)
    assert _young(made, (0, 1, 2)) == 0


def test_the_collector_stays_off_when_it_was_off():
    gc.disable()
    _walk(10)
    assert not gc.isenabled()

"""The notifying filter's program is built once per combination of its options
(runtime/channels.py): every combination gives exactly what a fresh build
gives, and different combinations never share an entry."""
from __future__ import annotations

import itertools

from confine.kernel import seccomp
from confine.runtime import channels


def test_cached_program_is_the_fresh_build_for_every_combination():
    channels._PROGRAMS.clear()
    seen = {}
    for combo in itertools.product((False, True), repeat=4):
        files, meta, bind, signals = combo
        fresh = seccomp.notify_program(seccomp.build_notify(files=files, meta=meta, bind=bind,
                                                            signals=signals))
        assert channels._notify_program(*combo) == fresh
        assert channels._notify_program(*combo) is channels._notify_program(*combo)
        seen[combo] = fresh
    # control: the options change the program, so a wrong key would be caught above
    assert len(set(seen.values())) == len(seen)

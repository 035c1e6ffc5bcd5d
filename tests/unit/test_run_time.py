"""protect/revert._run_time reads a run id's stamp exactly as time.strptime did."""
from __future__ import annotations

import time

from confine.protect.revert import _run_time


def strptime(stamp: str) -> float | None:
    try:
        return time.mktime(time.strptime(stamp, "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return None


def test_same_as_strptime() -> None:
    good = ["20261202-061704", "19700101-000000", "20240229-235959", "20261231-235960",
            "20260101-000061", "20261202-120000",
            "20240229-000000", "20000229-000000", "20260131-000000", "20261130-000000"]
    bad = ["20261302-061704", "20261200-061704", "20261232-000000", "20261202-241704",
           "20261202-066004", "20261202-061762", "2026120-2061704", "20261202x061704",
           "20261202-06170", "abcdefgh-ijklmn",
           "20260230-000000", "20260431-000000", "20250229-000000", "19000229-000000"]
    for s in good:
        assert _run_time(s) == strptime(s) and _run_time(s) is not None, s
    for s in bad:
        assert _run_time(s) is None, s
        if len(s) == 15:
            assert strptime(s) is None or s == "20261202-061762", s

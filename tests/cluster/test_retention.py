"""The retention rule (cluster/retention.py): properties of the trim point."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstreams_embedded import errors
from tstreams_embedded.cluster.retention import Retention, trim_point

idx = st.integers(min_value=0, max_value=1000)


@given(entries=st.integers(0, 50), base=idx, count=st.integers(0, 300), applied_back=st.integers(0, 300),
       needed=st.lists(st.integers(0, 1300), max_size=3), over_bytes=st.booleans(), bytes_back=st.integers(0, 300))
def test_trim_point(entries: int, base: int, count: int, applied_back: int, needed: list[int], over_bytes: bool,
                    bytes_back: int) -> None:
    r = Retention(entries=entries, bytes=1 << 16)
    last = base + count
    applied = max(base, last - applied_back)
    bytes_upto = max(base, last - bytes_back) if over_bytes else None
    size = (1 << 16) + 1 if over_bytes else 10
    upto = trim_point(r, base, last, size, applied, needed, bytes_upto)
    assert base <= upto <= max(base, applied), "never past the applied index"
    if upto == base:
        return
    over_count = count > entries + r.slack
    if over_count:
        assert last - upto >= min(entries, last - base) or over_bytes, "keeps the newest entries"
    if not over_bytes:
        assert over_count
        assert all(upto <= first - 1 for first in needed), "keeps what live followers need"
    else:
        assert bytes_upto is not None and upto <= max(bytes_upto, last - entries)


def test_nothing_to_trim_below_the_bounds() -> None:
    r = Retention(entries=10, bytes=1 << 20)
    assert trim_point(r, 0, 11, 100, 11) == 0  # within the slack
    assert trim_point(r, 0, 12, 100, 12) == 2
    assert trim_point(r, 0, 12, 100, 12, needed_from=[1]) == 0  # a live follower at 0
    assert trim_point(r, 0, 12, 100, 1) == 1  # applied index bound
    assert trim_point(r, 0, 12, (1 << 20) + 1, 12, needed_from=[1], bytes_upto=5) == 5  # hard byte bound


@pytest.mark.parametrize("config", [{"log_retain_entries": -1}, {"log_retain_entries": True},
                                    {"log_retain_bytes": 10}, {"log_retain_bytes": "1"}])
def test_bad_retention_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidArgument):
        Retention.from_config(config)

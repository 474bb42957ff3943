"""How a back-end's errors are sorted: changed, permanent, or left to the retries.

A 412 (or S3's ``PreconditionFailed``) means the object changed under its index; the digits
412 inside a port or an address do not (a connection refused on 127.0.0.1:34125 is transient
and must be retried, not reported as a changed object).
"""

from __future__ import annotations

import pytest

from seekdata.sources.remote import faults
from seekdata.sources.remote.answers import call_sorted as _call


def raising(exc: Exception):
    def fn() -> None:
        raise exc

    return fn


@pytest.mark.parametrize(
    "text",
    [
        "An error occurred (PreconditionFailed) when calling the GetObject operation",
        "HTTP 412 Precondition Failed",
        "status=412, message='Precondition Failed'",
    ],
)
def test_a_412_is_a_changed_object(text: str) -> None:
    with pytest.raises(faults.Changed):
        _call(raising(OSError(text)))


@pytest.mark.parametrize(
    "text",
    [
        "Cannot connect to host 127.0.0.1:34125 ssl:default [Connection refused]",
        "Cannot connect to host 127.0.0.1:4120",
        "read 4120 bytes, expected 8192",
    ],
)
def test_the_digits_412_elsewhere_are_left_to_the_retries(text: str) -> None:
    with pytest.raises(OSError, match=r"Cannot connect|bytes") as info:
        _call(raising(OSError(text)))
    assert not isinstance(info.value, faults.Changed | faults.Permanent)

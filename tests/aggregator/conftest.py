"""Fixtures of the aggregator tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver on 127.0.0.1, stopped when the test ends."""
    with OtlpReceiver() as r:
        yield r

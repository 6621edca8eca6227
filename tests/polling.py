"""Waiting in a test: poll for what it waits for, with a deadline, rather than sleep a guess."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, every: float = 0.1) -> T:
    """`condition()`'s first truthy value, asked every `every` seconds; after `timeout` seconds
    its last (falsy) value, for the caller's assert to report."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(every)
    return value

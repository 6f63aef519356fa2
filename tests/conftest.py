"""Test-suite policy (README "The two commands"; `.ci/run`): a per-test time limit, so that a hang is a
failure with a message and never a silently stopped CI job.

Every test runs under a ``SIGALRM`` alarm of ``TPDE_TEST_TIMEOUT`` seconds (default 300; tests marked
``slow`` get ``TPDE_SLOW_TEST_TIMEOUT``, default 1200), or the value of its ``@pytest.mark.timeout(seconds)``
marker.  The limits are a hundred times the typical test time measured on the 2-core CI machine, so only a
hang reaches them.  (``pytest-timeout`` would do the same; this keeps the test dependencies small.)
"""

from __future__ import annotations

import os
import signal

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit overriding the default")


def _limit(item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if item.get_closest_marker("slow") is not None:
        return float(os.environ.get("TPDE_SLOW_TEST_TIMEOUT", "1200"))
    return float(os.environ.get("TPDE_TEST_TIMEOUT", "300"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - Windows: no alarm, no limit
        yield
        return
    limit = _limit(item)

    def expire(signum, frame):
        pytest.fail(f"test exceeded its time limit of {limit:g} s (a hang?)", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def derivation():
    """``derivation(kinds, **options)``: ``kind_derivation`` of the built-in kinds, made once per session.
    A derivation is frozen (tuples of frozen steps) and takes seconds to derive and check; test_steps.py,
    test_steps_objects.py and test_derive_kernel.py ask for the same few chains."""
    from symbolic_tpde.documents.steps import kind_derivation

    made: dict = {}

    def get(kinds: tuple, **options):
        key = (tuple(kinds), tuple(sorted(options.items())))
        if key not in made:
            made[key] = kind_derivation(tuple(kinds), **options)
        return made[key]
    return get

from __future__ import annotations

import pytest

from queue_workflows.common.backoff import Backoff, retry_delay


def test_grows_geometrically_to_the_cap_without_jitter():
    backoff = Backoff(initial=0.1, maximum=1.0, factor=2.0, jitter=0.0)
    assert [round(backoff.next_delay(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)


def test_jitter_stays_within_its_band():
    low = Backoff(initial=1.0, maximum=10.0, jitter=0.2, random_fn=lambda: 0.0)
    high = Backoff(initial=1.0, maximum=10.0, jitter=0.2, random_fn=lambda: 1.0)
    assert low.next_delay() == pytest.approx(0.8) and high.next_delay() == pytest.approx(1.2)


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"initial": 2, "maximum": 1}, {"factor": 0.5}, {"jitter": 1.0}])
def test_nonsense_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_retry_delay_doubles_per_attempt_up_to_the_cap():
    delays = [retry_delay(n, base=2.0, cap=30.0, jitter=0.0) for n in range(1, 7)]
    assert delays == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_backoff_stays_at_its_cap_through_an_outage_of_any_length():
    backoff = Backoff(initial=0.05, maximum=1.0, jitter=0.0)
    backoff.attempt = 5000  # 2.0**5000 overflows a float
    assert backoff.next_delay() == 1.0
    assert backoff.next_delay() == 1.0

"""Prometheus metric families from (label values, value) pairs, for the sidecar's and the leader's custom collectors."""

from __future__ import annotations

from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

Samples = list[tuple[list[str], float | None]]
F = TypeVar("F", GaugeMetricFamily, CounterMetricFamily)


def gauge(name: str, doc: str, labels: list[str], samples: Samples) -> GaugeMetricFamily:
    """A gauge family; a None value is left out (a figure not read is not served as a number)."""
    return _filled(GaugeMetricFamily(name, doc, labels=labels), samples)


def counter(name: str, doc: str, labels: list[str], samples: Samples) -> CounterMetricFamily:
    return _filled(CounterMetricFamily(name, doc, labels=labels), samples)


def _filled(family: F, samples: Samples) -> F:
    for values, value in samples:
        if value is not None:
            family.add_metric(values, value)
    return family

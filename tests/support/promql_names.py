"""The metric names a PromQL expression reads, and the names the monitoring profile's dashboard and alert rules use.

A small PromQL-aware tokenizer: string literals, label matchers (`{...}`), grouping and matching
label lists (`by (...)`, `without`, `on`, `ignoring`, `group_left`, `group_right`), ranges and
durations (`[5m]`, `offset 1h`), numbers, keywords, functions and Grafana variables are not
metric names; every other identifier is. A word followed by `(` that is no PromQL function is an
error, not a name, so a misspelt function cannot hide a metric.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "rules" / "queue-workflows.yml"
DASHBOARDS = sorted((MONITORING / "grafana" / "dashboards").glob("*.json"))

AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                          "quantile", "limitk", "limit_ratio"})
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time", "ceil", "changes",
    "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "deg", "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
    "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time",
    "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate",
    "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
                      "atan2", "inf", "nan", "start", "end"})
# Series Prometheus makes itself for every target or rule, which no service exports.
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
                            "scrape_series_added", "ALERTS", "ALERTS_FOR_STATE"})
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_DURATION_OR_NUMBER = re.compile(r"(?<![\w:])(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|0x[0-9a-f]+)(?:ms|[smhdwy])?(?:\d+(?:ms|[smhdwy]))*(?![\w:])",
                                 re.I)
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads (Prometheus's own `up` and the like included)."""
    text = _STRING.sub(" ", expr)
    text = _VARIABLE.sub(" ", text)
    text = _MATCHERS.sub(" ", text)  # no braces nest once strings are gone
    text = _LABEL_LIST.sub(r" \1 ", text)
    while _RANGE.search(text):  # a subquery's range may hold a duration only, but nest inside calls
        text = _RANGE.sub(" ", text)
    text = _DURATION_OR_NUMBER.sub(" ", text)
    names = set()
    for match in _WORD.finditer(text):
        word = match.group(0)
        if word.lower() in KEYWORDS:
            continue
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or (word in AGGREGATIONS and re.match(r"(by|without)\b", rest)):
            if word not in FUNCTIONS and word not in AGGREGATIONS:
                raise ValueError(f"{word}(...) in {expr!r} is no PromQL function or aggregation")
        else:
            names.add(word)
    return names


def families(name: str) -> tuple[str, ...]:
    """The names an exposition may carry `name` under: itself, and without a histogram's or counter's suffix."""
    return (name, *(name.removesuffix(s) for s in SUFFIXES if name.endswith(s)))


def dashboard_exprs() -> dict[str, str]:
    """Every query of every shipped dashboard, as `file: panel title (refId)` -> expr, rows' nested panels included."""
    found: dict[str, str] = {}
    for path in DASHBOARDS:
        for panel in panels(json.loads(path.read_text())):
            for target in panel.get("targets", []):
                found[f"{path.name}: {panel.get('title')} ({target.get('refId')})"] = target["expr"]
    return found


def panels(dashboard: dict) -> list[dict]:
    flat = []
    for panel in dashboard.get("panels", []):
        flat.append(panel)
        flat.extend(panel.get("panels", []))
    return flat


def rule_exprs(path: Path = RULES) -> dict[str, str]:
    return {f"{path.name}: {rule.get('alert') or rule.get('record')}": rule["expr"]
            for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]}


def used_names() -> dict[str, set[str]]:
    """metric name -> where the dashboard or the rules read it (Prometheus's own series left out)."""
    used: dict[str, set[str]] = {}
    for where, expr in {**dashboard_exprs(), **rule_exprs()}.items():
        for name in metric_names(expr) - PROMETHEUS_OWN:
            used.setdefault(name, set()).add(where)
    return used


def missing(used: dict[str, set[str]], exported: set[str]) -> dict[str, list[str]]:
    """The used names no exported family or sample carries, each with where it is used."""
    return {name: sorted(where) for name, where in sorted(used.items()) if not set(families(name)) & exported}

"""The reference mini-language: $value, $from (dotted, defaults), $eq, $ne, $filter, late references."""

from __future__ import annotations

import pytest

from queue_workflows.refs import MalformedReferenceError, Scope, Unresolved, check, resolve, resolve_inputs, resolve_ref

SCOPE = Scope(
    context={"url": "u", "cfg": {"depth": 2}},
    outputs={"fetch": {"items": [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}], "size": 3}},
    node_ids=frozenset({"fetch", "later"}),
)


def test_value_is_taken_verbatim():
    assert resolve({"$value": {"$from": "x"}}, SCOPE) == {"$from": "x"}


def test_from_paths():
    assert resolve({"$from": "url"}, SCOPE) == "u"
    assert resolve({"$from": "context.cfg.depth"}, SCOPE) == 2
    assert resolve({"$from": "fetch.items.1.k"}, SCOPE) == "b"
    assert resolve({"$from": "fetch.items.-1.n"}, SCOPE) == 3
    assert resolve({"$from": "size"}, SCOPE) == 3  # outputs merge into the run context
    assert resolve({"a": [{"$from": "url"}, 1]}, SCOPE) == {"a": ["u", 1]}


def test_missing_values_use_the_default_or_stay_unresolved():
    assert resolve({"$from": "fetch.nope", "default": None}, SCOPE) is None
    assert resolve({"$from": "later.x", "default": {"$from": "url"}}, SCOPE) == "u"
    with pytest.raises(Unresolved, match="'later.x'"):
        resolve({"$from": "later.x"}, SCOPE)
    with pytest.raises(Unresolved):
        resolve({"$from": "fetch.items.9"}, SCOPE)


def test_eq_ne():
    assert resolve({"$eq": [{"$from": "fetch.size"}, 3]}, SCOPE) is True
    assert resolve({"$ne": [{"$from": "url"}, "u"]}, SCOPE) is False


def test_filter():
    expr = {"$filter": {"$from": "fetch.items"}, "where": {"k": "a"}}
    assert [i["n"] for i in resolve(expr, SCOPE)] == [1, 3]
    expr = {"$filter": {"$from": "fetch.items"}, "where": {"k": {"$ne": "a"}}}
    assert [i["n"] for i in resolve(expr, SCOPE)] == [2]
    expr = {"$filter": {"$from": "fetch.items"}, "where": {"n": {"$eq": {"$from": "cfg.depth"}}}}
    assert [i["k"] for i in resolve(expr, SCOPE)] == ["b"]


def test_resolve_inputs_splits_late_references():
    resolved, late = resolve_inputs({"a": {"$from": "url"}, "b": {"$from": "later.out"}, "c": 5}, SCOPE)
    assert resolved == {"a": "u", "c": 5}
    assert late == {"b": {"$from": "later.out"}}
    assert resolve_ref({"$from": "x.y"}, {"x": {"y": 1}}) == 1  # the seed's plain-context form


@pytest.mark.parametrize(
    "expr, message",
    [
        ({"$frm": "a"}, "unknown operator '$frm'"),
        ({"$from": ""}, "$from needs a dotted path"),
        ({"$from": 3}, "$from needs a dotted path"),
        ({"$eq": [1, 2, 3]}, "$eq takes a list of two operands"),
        ({"$from": "a", "$eq": [1, 1]}, "one operator per mapping"),
        ({"$filter": [], "where": {"k": {"$gt": 1}}}, "$filter condition on 'k'"),
        ({"$value": 1, "x": 2}, "$value does not take 'x'"),
    ],
)
def test_malformed(expr, message):
    with pytest.raises(MalformedReferenceError, match="here: malformed reference: " ) as info:
        check(expr, "here")
    assert message in str(info.value)

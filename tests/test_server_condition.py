"""The retry-condition language: examples, error positions, and properties (generated
expressions round-trip through the parser with the right precedence, agree with an
independent reference evaluator, and nothing ever raises on any JSON answer)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deferq.server.condition import (
    Binary,
    Condition,
    ConditionError,
    Literal,
    Not,
    Ref,
    evaluate,
    parse,
)

SEED_EXAMPLE = "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'"


@pytest.mark.parametrize(("answer", "retry"), [
    ({"code": 200}, False),
    ({"code": 500}, True),
    ({"code": 500, "data": {"status": 2}}, False),
    ({"code": 200, "data": {"msg": "failed"}}, True),
    ({"code": 200, "data": {"status": 2, "msg": "ok"}}, False),
    (None, True),  # no code at all: null != 200
    ("plain text", True),
    ([1, 2, 3], True),
])  # fmt: skip
def test_the_seed_example(answer, retry):
    assert Condition(SEED_EXAMPLE)(answer) is retry


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("{res.a} == 1", {"a": 1.0}, True),
    ("{res.a} == true", {"a": 1}, False),  # true is not 1
    ("{res.a} == null", {}, True),
    ("{res.a.0.b} == 'x'", {"a": [{"b": "x"}]}, True),
    ("{res.a.5} == null", {"a": [1]}, True),
    ("{res} == 'ok'", "ok", True),
    ("{res.n} > 2 && {res.n} <= 3.5", {"n": 3}, True),
    ("{res.n} < 'z'", {"n": 3}, False),  # a number and a string do not order
    ("{res.s} >= 'abc'", {"s": "abd"}, True),
    ("!{res.ok}", {"ok": False}, True),
    ("!{res.a} == 1", {"a": 1}, False),  # ! negates the comparison
    ("!({res.a}) == true", {"a": 1}, True),
    ("{res.list}", {"list": []}, False),
    ("{res.list}", {"list": [0]}, True),
    ("true || false && false", None, True),  # && binds tighter than ||
    ("(true || false) && false", None, False),
    ("'it\\'s' == \"it's\"", None, True),
    ("-1.5e1 < -14", None, True),
    ("{res.x-y_z} == 1", {"x-y_z": 1}, True),
])  # fmt: skip
def test_semantics(text, answer, expected):
    assert Condition(text)(answer) is expected


@pytest.mark.parametrize(("text", "position", "says"), [
    ("", 0, "empty"),
    ("{res.code} !! 200", 11, "unexpected '!'"),
    ("{res.code} = 200", 11, "unexpected character '='"),
    ("{res.code} == ", 14, "end of the condition"),
    ("({res.code} == 1", 16, "expected ')'"),
    ("{res.code} == 1)", 15, "unexpected ')'"),
    ("{req.code} == 1", 1, "must start with 'res'"),
    ("{res..code} == 1", 0, "bad path segment"),
    ("{res.code == 1", 0, "unclosed"),
    ("{res.a} == 'open", 11, "unterminated string"),
    ("{res.a} == yes", 11, "unknown word 'yes'"),
    ("1 < 2 < 3", 6, "do not chain"),
    ("1.2.3 == 1", 0, "malformed number"),
    ("1e999 == 1", 0, "out of range"),
    ("#", 0, "unexpected character"),
    ("(" * 60 + "1" + ")" * 60, 50, "nested deeper"),
    ("1" * 3000, 2000, "longer than"),
])  # fmt: skip
def test_errors_name_the_position(text, position, says):
    with pytest.raises(ConditionError) as error:
        parse(text)
    assert error.value.position == position
    assert says in str(error.value) and f"at position {position}" in str(error.value)


# -- properties -----------------------------------------------------------------------

SEGMENT = st.text("abcxyz_-019", min_size=1, max_size=4)
SCALARS = (st.none() | st.booleans() | st.integers(-1000, 1000)
           | st.floats(-1e6, 1e6, allow_nan=False) | st.text("ab'\"\\ 01", max_size=4))  # fmt: skip
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SEGMENT, inner, max_size=3),
    max_leaves=12,
)
LITERALS = st.builds(Literal, SCALARS)
REFS = st.builds(Ref, st.lists(SEGMENT, max_size=3).map(tuple))
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def trees():
    return st.recursive(
        LITERALS | REFS,
        lambda inner: st.builds(Not, inner)
        | st.builds(Binary, st.sampled_from(("||", "&&", *COMPARISONS)), inner, inner),
        max_leaves=10,
    )


def render(node) -> str:
    """The shortest text for a tree: parentheses only where precedence needs them."""
    if isinstance(node, Literal):
        return render_literal(node.value)
    if isinstance(node, Ref):
        return "{" + ".".join(("res", *node.path)) + "}"
    if isinstance(node, Not):
        inner = node.operand
        needs = isinstance(inner, Binary) and inner.op in ("||", "&&")
        return "!" + (f"({render(inner)})" if needs else render(inner))
    if node.op in ("||", "&&"):
        looser = ("||",) if node.op == "&&" else ()
        left = render(node.left)
        if isinstance(node.left, Binary) and node.left.op in looser:
            left = f"({left})"
        right = render(node.right)
        if isinstance(node.right, Binary) and node.right.op in (*looser, node.op):
            right = f"({right})"
        return f"{left} {node.op} {right}"
    sides = [render(side) if isinstance(side, Literal | Ref) else f"({render(side)})"
             for side in (node.left, node.right)]  # fmt: skip
    return f"{sides[0]} {node.op} {sides[1]}"


def render_literal(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(value)


# The reference evaluator: written apart from the implementation, on tagged values.
def tag(value):
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", float(value))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", tuple(tag(v) for v in value))
    return ("obj", tuple(sorted((k, tag(v)) for k, v in value.items())))


def reference(node, res):
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Ref):
        value = res
        for segment in node.path:
            if type(value) is dict and segment in value:
                value = value[segment]
            elif type(value) is list and segment.isdigit() and int(segment) < len(value):
                value = value[int(segment)]
            else:
                return None
        return value
    if isinstance(node, Not):
        return not truth(reference(node.operand, res))
    if node.op == "||":
        return truth(reference(node.left, res)) or truth(reference(node.right, res))
    if node.op == "&&":
        return truth(reference(node.left, res)) and truth(reference(node.right, res))
    a, b = tag(reference(node.left, res)), tag(reference(node.right, res))
    if node.op == "==":
        return a == b
    if node.op == "!=":
        return a != b
    if a[0] != b[0] or a[0] not in ("num", "str"):
        return False
    return {"<": a[1] < b[1], "<=": a[1] <= b[1], ">": a[1] > b[1], ">=": a[1] >= b[1]}[node.op]


def truth(value) -> bool:
    return tag(value) not in (("null",), ("bool", False), ("num", 0.0), ("str", ""), ("list", ()),
                              ("obj", ()))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(trees())
def test_printed_trees_parse_back_to_the_same_tree(tree):
    assert parse(render(tree)) == tree


@settings(max_examples=300, deadline=None)
@given(trees(), JSON)
def test_evaluation_agrees_with_the_reference(tree, answer):
    assert evaluate(parse(render(tree)), answer) is bool(truth(reference(tree, answer)))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.text("{}res.()!&|=<>'\"0123 atrue", max_size=40))
def test_any_text_parses_or_raises_condition_error(text):
    try:
        parse(text)
    except ConditionError as error:
        assert 0 <= error.position <= len(text)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([SEED_EXAMPLE, "{res.a.b} > 1 || !{res.c}", "{res.0} == {res.1.x}"]), JSON)
def test_evaluation_never_raises_on_any_json(text, answer):
    assert Condition(text)(answer) in (True, False)


def test_precedence_of_not_and_or():
    tree = parse("!true && false || true")
    assert tree == Binary("||", Binary("&&", Not(Literal(True)), Literal(False)), Literal(True))

"""The retry-condition language: examples, error positions, and properties (generated
expressions round-trip through the parser with the right precedence, agree with an
independent reference evaluator, and nothing ever raises on any JSON answer)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deferq.server.topics.condition import (
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
])
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
])
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
])
def test_errors_name_the_position(text, position, says):
    with pytest.raises(ConditionError) as error:
        parse(text)
    assert error.value.position == position
    assert says in str(error.value) and f"at position {position}" in str(error.value)


# -- properties -----------------------------------------------------------------------

SEGMENT = st.text("abcxyz_-019", min_size=1, max_size=4)
SCALARS = (st.none() | st.booleans() | st.integers(-1000, 1000)
           | st.floats(-1e6, 1e6, allow_nan=False) | st.text("ab'\"\\ 01", max_size=4))
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
             for side in (node.left, node.right)]
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
                              ("obj", ()))


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


# -- long chains, deep nesting, deep answers: evaluation always ends in a bool ----------
#
# The expected values below are computed without recursion (any/all over the chain, a
# loop over the nesting), so the check works at sizes where a recursive reference would
# itself run out of stack.

# Terms whose value is known for ANSWER, each with that value.
ANSWER = {"t": 1, "f": 0, "s": "x", "l": [1], "e": []}
TERMS = [("0", False), ("1", True), ("true", True), ("false", False), ("null", False),
         ("{res.t}", True), ("{res.f}", False), ("!{res.t}", False), ("!{res.f}", True),
         ("{res.s}=='x'", True), ("{res.t}!=1", False), ("{res.l}", True), ("{res.e}", False),
         ("{res.missing}", False), ("{res.t}>0", True)]
SHORT_TERMS = TERMS[:2]  # mostly these, so that chains within 2,000 characters are long


def chain(terms: list[tuple[str, bool]], ops: list[str], budget: int) -> tuple[str, bool]:
    """Terms joined by || and && (the i-th op after the i-th term), as long as the text
    fits `budget` characters, and its value: && binds tighter, so it is any(all(...))."""
    text, groups = terms[0][0], [[terms[0][1]]]
    for (term, value), op in zip(terms[1:], ops, strict=False):
        if len(text) + len(op) + len(term) > budget:
            break
        text += op + term
        if op.strip() == "||":
            groups.append([value])
        else:
            groups[-1].append(value)
    return text, any(all(group) for group in groups)




def chains(longest: int):
    """(terms, ops) of 1 to `longest` terms, the length drawn first so that long chains
    come up as often as short ones."""
    return st.integers(1, longest).flatmap(lambda n: st.tuples(
        st.lists(st.sampled_from(SHORT_TERMS * 8 + TERMS), min_size=n, max_size=n),
        st.lists(st.sampled_from(["||"] * 12 + ["&&", " || ", " && "]), min_size=n, max_size=n),
    ))


CHAINS = chains(20)


@pytest.mark.slow  # 150 chains of up to 700 terms: ~10 s
@settings(max_examples=150, deadline=None)
@given(chains(700))
def test_a_flat_chain_of_any_length_evaluates(drawn):
    text, expected = chain(*drawn, budget=2000)
    assert Condition(text)(ANSWER) is expected


def test_the_longest_flat_chains_evaluate():
    zeros = "||".join(["0"] * 667)  # 1,999 characters, 667 terms
    assert len(zeros) == 1999 and Condition(zeros)(None) is False
    assert Condition(zeros[:-1] + "1")(None) is True
    assert Condition("&&".join(["1"] * 667))(None) is True
    refs = "||".join(["{res.f}"] * 222)
    assert len(refs) <= 2000 and Condition(refs)(ANSWER) is False
    assert Condition("||".join(["{res.a}=={res.b}"] * 111))({"a": 1, "b": 2}) is False


@pytest.mark.slow  # 150 nestings of up to 40 levels: ~4 s
@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["", "!", "!!"]), CHAINS, st.sampled_from(["||", "&&"]),
                       st.booleans()),
             min_size=1, max_size=40),
    CHAINS,
)
def test_nesting_to_the_limit_with_chains_at_every_level(levels, innermost):
    """!(( chain ) op !( ( chain ) op ( ... ) )): at each level a parenthesis, maybe
    negated, holding a parenthesized chain and the level inside; up to MAX_DEPTH."""
    text, value = chain(*innermost, budget=300)
    text = f"({text})"
    # The whole expression is one level, the innermost parenthesis another, and a "!"
    # term of the innermost chain one more: 3. Each level adds its "(" and its "!"s.
    depth = 3
    for negation, drawn, op, inner_first in levels:
        if depth + len(negation) + 1 > 50:
            break
        side, side_value = chain(*drawn, budget=40)
        if len(text) + len(side) + 8 > 2000:
            break
        depth += len(negation) + 1
        left, right = (text, f"({side})") if inner_first else (f"({side})", text)
        text = f"{negation}({left}{op}{right})"
        value = (value or side_value) if op == "||" else (value and side_value)
        value = value if len(negation) % 2 == 0 else not value
    assert Condition(text)(ANSWER) is value


def nest(kinds: list[str], leaf):
    """A value nested len(kinds) deep: "[]" wraps in a list, any other kind is the key of
    a one-key object. Built from the inside out, without recursion."""
    value = leaf
    for kind in reversed(kinds):
        value = [value] if kind == "[]" else {kind: value}
    return value


KINDS = st.lists(st.sampled_from(["[]", "[]", "a", "b-1", "_"]), min_size=1, max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 1000), KINDS, SCALARS, st.data())
def test_comparing_deep_answers_gives_a_bool(depth, pattern, leaf, data):
    kinds = [pattern[i % len(pattern)] for i in range(depth)]
    same = {"a": nest(kinds, leaf), "b": nest(kinds, leaf)}
    assert Condition("{res.a}=={res.b}")(same) is True
    assert Condition("{res.a}!={res.b}")(same) is False
    assert Condition("{res.a} && {res.b} && !({res.a} < {res.b})")(same) is True

    where = data.draw(st.integers(0, depth), label="where they differ")
    if where == depth:
        other_leaf = data.draw(SCALARS.filter(lambda v: tag(v) != tag(leaf)), label="other leaf")
        other = nest(kinds, other_leaf)
    else:
        changed = list(kinds)
        changed[where] = "z" if kinds[where] == "[]" else "[]"
        other = nest(changed, leaf)
    differ = {"a": nest(kinds, leaf), "b": other}
    assert Condition("{res.a}=={res.b}")(differ) is False
    assert Condition("{res.a}!={res.b}")(differ) is True


def test_deep_answers_from_json_text():
    import orjson

    deep = "[" * 1000 + "]" * 1000  # orjson reads up to 1,024 levels
    answer = orjson.loads(f'{{"a": {deep}, "b": {deep}, "c": {"[" * 999 + "1" + "]" * 999}}}')
    assert Condition("{res.a}=={res.b}")(answer) is True
    assert Condition("{res.a}=={res.c}")(answer) is False
    assert Condition("{res.a}")(answer) is True
    assert Condition("{res.a.0.0.0} != null")(answer) is True


DEEP_REFS = st.sampled_from(["{res}", "{res.a}", "{res.b}", "{res.0}", "{res.a.0}", "{res.a.a}"])


@settings(max_examples=100, deadline=None)
@given(trees() | st.tuples(DEEP_REFS, st.sampled_from(COMPARISONS), DEEP_REFS).map(
    lambda t: parse(" ".join(t))), st.integers(1, 1000), KINDS, SCALARS)
def test_any_condition_on_a_deep_answer_gives_a_bool(tree, depth, pattern, leaf):
    kinds = [pattern[i % len(pattern)] for i in range(depth)]
    answer = {"a": nest(kinds, leaf), "b": nest(kinds[::-1], leaf), "0": nest(kinds, leaf)}
    assert evaluate(tree, answer) in (True, False)


def test_reads_answer():
    assert not Condition("true || 1 == 2 && !(null)").reads_answer
    assert Condition("true || {res} == 1").reads_answer
    assert Condition("||".join(["0"] * 600) + "||!{res.x}").reads_answer

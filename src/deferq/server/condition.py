"""The retry-condition language of topics (S2-5): a small grammar over the JSON answer.

    {res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'

Grammar (lowest precedence first; `!` negates the comparison that follows it):

    expr       := or_expr
    or_expr    := and_expr ( "||" and_expr )*
    and_expr   := not_expr ( "&&" not_expr )*
    not_expr   := "!" not_expr | comparison
    comparison := operand ( ("==" | "!=" | "<" | "<=" | ">" | ">=") operand )?
    operand    := NUMBER | STRING | "true" | "false" | "null" | REF | "(" expr ")"
    REF        := "{" "res" ( "." SEGMENT )* "}"      SEGMENT: letters, digits, _ or -

`res` is the callback's answer parsed as JSON (its raw text when it is not JSON). A
path that does not exist is null. Values compare like JSON values: numbers by value
(true is not 1), strings by text; `<`, `<=`, `>`, `>=` need two numbers or two strings,
otherwise they are false. In a boolean place a value is true unless it is false, null,
0, "" or an empty list or object. Parsing and evaluation never use eval; evaluating
never raises, whatever the answer holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_LENGTH = 2000  # characters: a condition is a line in a topic, not a program
MAX_DEPTH = 50  # nesting of ! and ( ), so a hostile expression cannot exhaust the stack
COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
KEYWORDS = {"true": True, "false": False, "null": None}


class ConditionError(ValueError):
    """A malformed condition; `position` is the 0-based offset of the problem."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.position = position


# -- syntax tree ------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class Ref:
    path: tuple[str, ...]  # the segments after "res"


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str  # "||", "&&" or a comparison
    left: Node
    right: Node


Node = Literal | Ref | Not | Binary


# -- tokens -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str  # "op", "num", "str", "word", "ref", "end"
    value: Any
    pos: int


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_LENGTH:
        raise ConditionError(f"condition longer than {MAX_LENGTH} characters", MAX_LENGTH)
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("||", "&&", "==", "!=", "<=", ">="), i):
            tokens.append(Token("op", text[i : i + 2], i))
            i += 2
        elif ch in "<>!()":
            tokens.append(Token("op", ch, i))
            i += 1
        elif ch in "'\"":
            i = _string(text, i, tokens)
        elif ch.isdigit() or (ch in "-." and i + 1 < len(text) and text[i + 1].isdigit()):
            i = _number(text, i, tokens)
        elif ch == "{":
            i = _ref(text, i, tokens)
        elif ch.isalpha():
            start = i
            while i < len(text) and (text[i].isalnum() or text[i] == "_"):
                i += 1
            word = text[start:i]
            if word not in KEYWORDS:
                raise ConditionError(
                    f"unknown word {word!r} (use true, false, null or a {{res...}} reference)",
                    start,
                )
            tokens.append(Token("word", KEYWORDS[word], start))
        else:
            raise ConditionError(f"unexpected character {ch!r}", i)
    tokens.append(Token("end", None, len(text)))
    return tokens


def _string(text: str, start: int, tokens: list[Token]) -> int:
    quote, i, chars = text[start], start + 1, []
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            chars.append(text[i + 1])  # \' \" \\ : the next character as it is
            i += 2
        elif ch == quote:
            tokens.append(Token("str", "".join(chars), start))
            return i + 1
        else:
            chars.append(ch)
            i += 1
    raise ConditionError("unterminated string", start)


def _number(text: str, start: int, tokens: list[Token]) -> int:
    i = start + 1
    while i < len(text) and (text[i].isdigit() or text[i] in ".eE" or
                             (text[i] in "+-" and text[i - 1] in "eE")):  # fmt: skip
        i += 1
    literal = text[start:i]
    try:
        value: float | int = int(literal) if literal.lstrip("-").isdigit() else float(literal)
    except ValueError:
        raise ConditionError(f"malformed number {literal!r}", start) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConditionError(f"number {literal!r} is out of range", start)
    tokens.append(Token("num", value, start))
    return i


def _ref(text: str, start: int, tokens: list[Token]) -> int:
    end = text.find("}", start)
    if end < 0:
        raise ConditionError("unclosed '{' of a reference", start)
    parts = text[start + 1 : end].split(".")
    if parts[0].strip() != "res":
        raise ConditionError("a reference must start with 'res', like {res.code}", start + 1)
    for segment in parts[1:]:
        if not segment or not all(c.isalnum() or c in "_-" for c in segment):
            raise ConditionError(f"bad path segment {segment!r} in a reference", start)
    tokens.append(Token("ref", tuple(parts[1:]), start))
    return end + 1


# -- parser -----------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at_op(self, *ops: str) -> bool:
        return self.current.kind == "op" and self.current.value in ops

    def expr(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConditionError(f"nested deeper than {MAX_DEPTH} levels", self.current.pos)
        node = self.binary_chain("||", self.and_expr)
        self.depth -= 1
        return node

    def and_expr(self) -> Node:
        return self.binary_chain("&&", self.not_expr)

    def binary_chain(self, op: str, operand: Any) -> Node:
        node = operand()
        while self.at_op(op):
            self.take()
            node = Binary(op, node, operand())
        return node

    def not_expr(self) -> Node:
        if self.at_op("!"):
            self.take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ConditionError(f"nested deeper than {MAX_DEPTH} levels", self.current.pos)
            node = Not(self.not_expr())
            self.depth -= 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        left = self.operand()
        if self.at_op(*COMPARISONS):
            op = self.take().value
            right = self.operand()
            if self.at_op(*COMPARISONS):
                raise ConditionError(
                    "comparisons do not chain: use && between them", self.current.pos
                )
            return Binary(op, left, right)
        return left

    def operand(self) -> Node:
        token = self.take()
        if token.kind in ("num", "str", "word"):
            return Literal(token.value)
        if token.kind == "ref":
            return Ref(token.value)
        if token.kind == "op" and token.value == "(":
            node = self.expr()
            if not self.at_op(")"):
                raise ConditionError("expected ')'", self.current.pos)
            self.take()
            return node
        if token.kind == "end":
            raise ConditionError("unexpected end of the condition", token.pos)
        raise ConditionError(f"unexpected {token.value!r}", token.pos)


def parse(text: str) -> Node:
    """Parse a condition; raise ConditionError naming the position of the first problem."""
    if not isinstance(text, str):
        raise ConditionError("a condition must be a string", 0)
    parser = _Parser(tokenize(text))
    if parser.current.kind == "end":
        raise ConditionError("the condition is empty", 0)
    node = parser.expr()
    if parser.current.kind != "end":
        raise ConditionError(f"unexpected {parser.current.value!r}", parser.current.pos)
    return node


# -- evaluation -------------------------------------------------------------------------


def evaluate(node: Node, res: Any) -> bool:
    """Whether the condition holds for the answer `res` (any JSON value). Never raises."""
    return truthy(_value(node, res))


def _value(node: Node, res: Any) -> Any:
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Ref):
        return lookup(res, node.path)
    if isinstance(node, Not):
        return not evaluate(node.operand, res)
    if node.op == "||":
        return evaluate(node.left, res) or evaluate(node.right, res)
    if node.op == "&&":
        return evaluate(node.left, res) and evaluate(node.right, res)
    return compare(node.op, _value(node.left, res), _value(node.right, res))


def lookup(value: Any, path: tuple[str, ...]) -> Any:
    """Follow a path into JSON: object keys by name, list items by index; missing is None."""
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return None
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, true is not 1, lists and objects item by item."""
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def compare(op: str, a: Any, b: Any) -> bool:
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    comparable = (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))
    if not comparable:
        return False
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and value != [] and value != {}


class Condition:
    """A parsed condition, kept with its source text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = parse(text)

    def __call__(self, res: Any) -> bool:
        return evaluate(self.tree, res)

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

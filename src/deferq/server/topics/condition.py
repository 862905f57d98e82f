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

Nothing here recurses without a bound: the parser recurses only into "(" and "!"
(at most MAX_DEPTH levels) and reads chains like `a || b || c` in a loop; evaluation
and equality walk the tree and the answer with explicit stacks, so a chain of any
length within MAX_LENGTH and an answer of any depth evaluate to a bool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
                             (text[i] in "+-" and text[i - 1] in "eE")):
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

    def binary_chain(self, op: str, operand: Callable[[], Node]) -> Node:
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
#
# Everything below walks trees and answers with explicit stacks, never by recursion: a
# flat chain `a || b || c ...` of 500 terms is a tree 500 levels deep, and an answer may
# nest lists 1,000 levels deep (orjson's limit), so recursion would hit Python's limit.


def evaluate(node: Node, res: Any) -> bool:
    """Whether the condition holds for the answer `res` (any JSON value). Never raises."""
    return truthy(value_of(node, res))


def value_of(root: Node, res: Any) -> Any:
    """The value of a tree for the answer `res`: a boolean for ||, &&, ! and comparisons,
    the literal or the looked-up value otherwise. || and && stop at the first decisive
    operand, like the language promises."""
    values: list[Any] = []
    stack: list[tuple[Node, int]] = [(root, 0)]  # (node, how far its evaluation got)
    while stack:
        node, step = stack.pop()
        if isinstance(node, Literal):
            values.append(node.value)
        elif isinstance(node, Ref):
            values.append(lookup(res, node.path))
        elif isinstance(node, Not):
            if step == 0:
                stack += [(node, 1), (node.operand, 0)]
            else:
                values.append(not truthy(values.pop()))
        elif node.op in ("||", "&&"):
            if step == 0:
                stack += [(node, 1), (node.left, 0)]
            elif step == 1:
                left = truthy(values.pop())
                if left is (node.op == "||"):  # true || ..., false && ...: decided
                    values.append(left)
                else:
                    stack += [(node, 2), (node.right, 0)]
            else:
                values.append(truthy(values.pop()))
        elif step == 0:  # a comparison: the left side is computed first
            stack += [(node, 1), (node.right, 0), (node.left, 0)]
        else:
            right = values.pop()
            values.append(compare(node.op, values.pop(), right))
    return values.pop()


def reads_answer(root: Node) -> bool:
    """Whether the condition refers to the answer at all (holds a {res...} reference)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Ref):
            return True
        if isinstance(node, Not):
            stack.append(node.operand)
        elif isinstance(node, Binary):
            stack += [node.left, node.right]
    return False


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
    """JSON equality: numbers by value, true is not 1, lists and objects item by item
    (however deep: pairs still to compare wait on a list, not on the call stack)."""
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if _is_number(x) and _is_number(y):
            if x != y:
                return False
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            pending += zip(x, y, strict=True)
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            pending += ((x[key], y[key]) for key in x)
        elif type(x) is not type(y) or isinstance(x, list | dict) or x != y:
            return False
    return True


def compare(op: str, a: Any, b: Any) -> bool:
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    comparable = (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))
    if not comparable:
        return False
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def truthy(value: Any) -> bool:
    """False, null, 0, "", [] and {} are false; every other value is true."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if _is_number(value):
        return bool(value != 0)
    if isinstance(value, str | list | dict):
        return len(value) > 0
    return True


class Condition:
    """A parsed condition, kept with its source text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = parse(text)

    def __call__(self, res: Any) -> bool:
        return evaluate(self.tree, res)

    @property
    def reads_answer(self) -> bool:
        """False for a condition without {res...}: its value does not depend on the answer."""
        return reads_answer(self.tree)

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

"""The claims' syntax: latency formulas and TTFT bands, parsed safely.

A latency claim is a formula in ``tokens`` (output tokens; also ``output_tokens``, ``input_tokens``)
with an optional tolerance: ``"0.42+0.008*tokens"``, ``"0.42 + 0.008*tokens ± 0.05"``. A TTFT claim
is ``"0.42±0.03"`` (or ``"0.42+-0.03"``, or ``"0.42"``). Formulas are parsed with :mod:`ast` into a
whitelisted tree (numbers, the variables, ``+ - * / **``, parentheses) and evaluated by walking it:
no ``eval``.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

__all__ = ["CLAIM_KINDS", "Band", "ClaimError", "Formula", "parse_band", "parse_formula"]

#: the kinds of claim: ``--expect-header``, ``--expect-ttft``, ``--expect-latency``
CLAIM_KINDS = ("header", "ttft", "latency")

VARIABLES = {"tokens": "output_tokens", "output_tokens": "output_tokens", "input_tokens": "input_tokens"}
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"
_TOLERANCE = re.compile(rf"^(?P<expr>.*?)\s*(?:±|\+/-|\+-)\s*(?P<tol>{_NUMBER})\s*s?\s*$", re.DOTALL)
_MAX_LEN = 200


class ClaimError(ValueError):
    """A claim string could not be parsed (the message says why)."""


_BINOPS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def _check(node: ast.AST) -> None:
    if isinstance(node, ast.Expression):
        _check(node.body)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ClaimError(f"operator {type(node.op).__name__} is not allowed (use + - * / **)")
        if isinstance(node.op, ast.Pow) and not (
            isinstance(node.right, ast.Constant) and isinstance(node.right.value, int | float)
            and abs(node.right.value) <= 4
        ):  # fmt: skip
            raise ClaimError("exponents must be constants between -4 and 4")
        _check(node.left)
        _check(node.right)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.UAdd | ast.USub):
            raise ClaimError("only unary + and - are allowed")
        _check(node.operand)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ClaimError(f"{node.value!r} is not a number")
    elif isinstance(node, ast.Name):
        if node.id not in VARIABLES:
            raise ClaimError(f"unknown variable {node.id!r}; use {', '.join(VARIABLES)}")
    else:
        raise ClaimError(f"{type(node).__name__} is not allowed in a formula")


def _eval(node: ast.AST, env: dict[str, float]) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            return left / right if right else math.inf
        return float(left**right)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        return env[VARIABLES[node.id]]
    raise ClaimError(f"{type(node).__name__} is not allowed in a formula")  # unreachable after _check


@dataclass(frozen=True)
class Formula:
    """A parsed latency formula with its tolerance (seconds, 0 when none was given)."""

    text: str
    tolerance: float
    _tree: ast.Expression

    def __call__(self, output_tokens: float, input_tokens: float = 0.0) -> float:
        return _eval(self._tree, {"output_tokens": output_tokens, "input_tokens": input_tokens})

    def uses(self, variable: str) -> bool:
        return any(isinstance(n, ast.Name) and VARIABLES[n.id] == variable for n in ast.walk(self._tree))


def _split_tolerance(text: str) -> tuple[str, float]:
    text = text.strip()
    if len(text) > _MAX_LEN:
        raise ClaimError(f"claim longer than {_MAX_LEN} characters")
    match = _TOLERANCE.match(text)
    if match is None:
        return text, 0.0
    return match.group("expr"), float(match.group("tol"))


def parse_formula(text: str) -> Formula:
    """``"0.42+0.008*tokens"`` (optionally ``± 0.05``) into a :class:`Formula`. Raises :class:`ClaimError`."""
    expr, tolerance = _split_tolerance(text)
    expr = expr.replace("\u00d7", "*").replace("\u00b7", "*")
    if not expr:
        raise ClaimError("empty formula")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ClaimError(f"not a formula: {expr!r} ({exc.msg})") from None
    _check(tree)
    return Formula(text.strip(), tolerance, tree)


@dataclass(frozen=True)
class Band:
    """``center ± tolerance`` seconds."""

    text: str
    center: float
    tolerance: float

    @property
    def low(self) -> float:
        return self.center - self.tolerance

    @property
    def high(self) -> float:
        return self.center + self.tolerance


def parse_band(text: str) -> Band:
    """``"0.42±0.03"``, ``"0.42+-0.03"`` or ``"0.42"`` (seconds). Raises :class:`ClaimError`."""
    expr, tolerance = _split_tolerance(text)
    expr = expr.removesuffix("s").strip()
    if not re.fullmatch(_NUMBER, expr):
        raise ClaimError(f"expected seconds like 0.42±0.03, got {text!r}")
    return Band(text.strip(), float(expr), tolerance)

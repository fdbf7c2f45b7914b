"""Conditions and sizes written as text (a schedule's history, `s.specialize("P >= 2")`):
Python's syntax read with `ast`, never `eval`. sympy's spellings of earlier histories
(`Eq(M, 1)`, `Mod`, `Min`, `ceiling`, `(M >= 6) & (N >= 32)`) read too."""
import ast
import operator

from .arith import Pow, numer_denom
from .core import Float, Integer, Rational, Symbol, SympifyError, later, sympify
from .functions import Abs, CeilDiv, Max, Min, Mod, ceiling, floor
from .logic import And, Eq, Ne, Not, Or, false, true

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: And, ast.BitOr: Or}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Eq: Eq, ast.NotEq: Ne}
def _ceil(x):
    """ceil(a/b) of integers as CeilDiv(a, b), what the printer writes that way (so a
    printed condition reads back as the same expression), else ceiling(x)."""
    num, den = numer_denom(x)
    if den.is_Integer and den.value > 0 and num.is_integer:
        return CeilDiv(num, den)
    return ceiling(x)


_FUNCTIONS = {"abs": Abs, "Abs": Abs, "min": Min, "max": Max, "Min": Min, "Max": Max,
              "Mod": Mod, "floor": floor,
              "ceiling": _ceil, "ceil": _ceil, "CeilDiv": CeilDiv, "Eq": Eq, "Ne": Ne,
              "And": And, "Or": Or, "Not": Not, "Integer": Integer, "Rational": Rational,
              "Pow": Pow}
# the words text may use besides its own names
WORDS = frozenset(_FUNCTIONS) | {"and", "or", "not", "True", "False", "true", "false"}


def parse(text, names):
    """The expression or condition `text`; a name is `names[name]` or a new integer symbol."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise SympifyError(f"cannot read {text!r}: {e.msg}") from None
    return _Reader(text, names).visit(tree.body)


class _Reader(ast.NodeVisitor):
    def __init__(self, text, names):
        self.text, self.names = text, names

    def generic_visit(self, node):
        raise SympifyError(f"cannot read {self.text!r}: {type(node).__name__} is not an "
                           "integer expression or a condition")

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            return true if v else false
        if isinstance(v, int):
            return Integer(v)
        if isinstance(v, float):
            return Float(v)
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.names:
            return sympify(self.names[node.id])
        if node.id in ("True", "true"):
            return true
        if node.id in ("False", "false"):
            return false
        return Symbol(node.id, integer=True)

    def visit_BinOp(self, node):
        op = _BINARY.get(type(node.op))
        if op is None:
            return self.generic_visit(node)
        return op(self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node):
        x = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return -x
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return Not(x)
        return self.generic_visit(node)

    def visit_BoolOp(self, node):
        join = And if isinstance(node.op, ast.And) else Or
        return join(*map(self.visit, node.values))

    def visit_Compare(self, node):
        if not all(type(op) in _COMPARE for op in node.ops):
            return self.generic_visit(node)
        sides = [self.visit(node.left)] + [self.visit(c) for c in node.comparators]
        return And(*(_COMPARE[type(op)](a, b)
                     for op, a, b in zip(node.ops, sides, sides[1:])))

    def visit_Call(self, node):
        f = _FUNCTIONS.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if f is None or node.keywords or not node.args:
            return self.generic_visit(node)
        return f(*map(self.visit, node.args))


later.parse = parse

"""Expressions and sizes as text, in the spelling a user types: `repr` of expressions and
definitions, shapes in displays and messages (`A[i, k] * B[k, j]`, `T - R + 1`, `N // 2`).
"""
import sympy as sp
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from .expr import Access, Const, IndexValue, Op, Reduce, _weak_kind


# Python's operator precedence, loosest first: how `repr` of an expression parenthesizes
_INFIX = {"less": ("<", 1), "less_equal": ("<=", 1), "greater": (">", 1),
          "greater_equal": (">=", 1), "equal": ("==", 1), "not_equal": ("!=", 1),
          "bitwise_or": ("|", 2), "logical_or": ("|", 2), "bitwise_xor": ("^", 3),
          "bitwise_and": ("&", 4), "logical_and": ("&", 4), "add": ("+", 5),
          "subtract": ("-", 5), "multiply": ("*", 6), "true_divide": ("/", 6),
          "floor_divide": ("//", 6), "remainder": ("%", 6), "power": ("**", 8)}
_ATOM = 9


class _SizePrinter(StrPrinter):
    """Sizes and index expressions as a user writes them: `T - R + 1`, `N // 2`."""

    def _print_Add(self, e, order=None):
        terms = sorted(e.args, key=lambda a: (a.is_number, a.could_extract_minus_sign(),
                                              sp.default_sort_key(a)))
        out = self._print(terms[0])
        for t in terms[1:]:
            if t.could_extract_minus_sign():
                out += f" - {self.parenthesize(-t, PRECEDENCE['Add'])}"
            else:
                out += f" + {self.parenthesize(t, PRECEDENCE['Add'])}"
        return out

    def _print_floor(self, e):
        num, den = sp.fraction(sp.together(e.args[0]))
        if den == 1:
            return f"floor({self._print(e.args[0])})"
        return f"{self.parenthesize(num, PRECEDENCE['Mul'])} // " \
               f"{self.parenthesize(den, PRECEDENCE['Mul'] + 1)}"


def format_size(e):
    """A size or index expression as text (`T - R + 1`, `j + N // 2`)."""
    return _SizePrinter().doprint(sp.sympify(e))


def format_expr(e):
    """An expression in the spelling a user would type (`A[i, k] * B[k, j]`,
    `sum(X[i, j], over=j) / N`), indices by their own names."""
    return _format(e)[0]


def _format(e):
    """(text, precedence) of an expression."""
    if isinstance(e, Const):
        v = e.value
        return repr(v), (7 if isinstance(v, (int, float)) and v < 0 else _ATOM)
    if isinstance(e, Access):
        return f"{e.tensor.name}[{', '.join(map(format_size, e.index))}]", _ATOM
    if isinstance(e, IndexValue):
        prec = 5 if isinstance(e.expr, sp.Add) else 6 if isinstance(e.expr, sp.Mul) else _ATOM
        return format_size(e.expr), prec
    if isinstance(e, Reduce):
        over = str(e.over[0]) if len(e.over) == 1 else f"({', '.join(map(str, e.over))})"
        return f"{e.combiner}({format_expr(e.body)}, over={over})", _ATOM
    if isinstance(e, Op):
        args = [_format(a) for a in e.args]
        if e.name in _INFIX and len(args) == 2:
            sym, prec = _INFIX[e.name]
            (lt, lp), (rt, rp) = args
            right_assoc = e.name == "power"
            if lp < prec or (right_assoc and lp == prec) or (prec == 1 and lp == 1):
                lt = f"({lt})"
            if rp < prec or (not right_assoc and rp == prec):
                rt = f"({rt})"
            return f"{lt} {sym} {rt}", prec
        if e.name in ("negative", "invert", "logical_not"):
            (t, p), = args
            sym = {"negative": "-", "invert": "~", "logical_not": "~"}[e.name]
            return f"{sym}{t if p >= 7 else f'({t})'}", 7
        if e.name == "cast":
            if _weak_kind(e.args[0]) is not None:     # an implicit promotion: N, 1.0
                return args[0]
            return f"{format_expr(e.args[0])}.astype({e.dtype.name})", _ATOM
        name = {"absolute": "abs", "rint": "round"}.get(e.name, e.name)
        return f"{name}({', '.join(t for t, _ in args)})", _ATOM
    return repr(e), _ATOM

"""Sizes and indices: the symbols of index notation, and their affine arithmetic.

- Sizes are sympy `Symbol`s (integer, non-negative); two sizes with one name are one size.
- An `Index` is a `sympy.Dummy`: identity by object, never by name. It prints as the name
  the user gave it. One process holds one object per index: an index that is unpickled or
  copied is the object it was made from (or, in another process, one object for all
  the copies of it that arrive there).
- Every index expression inside `tensor[...]` is affine in the indices, with integer
  coefficients and an offset that may contain sizes (`C[i, j + H]`, `x[2*i + 1]`).
- `format_size` prints sizes and index expressions as a user writes them (`T - R + 1`,
  `N // 2`).
"""
import weakref

import sympy as sp
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from .errors import ShapeError


def sizes(names):
    """`M, N, K = tex.sizes("M N K")`: symbolic sizes, bound from the arrays at call time."""
    syms = tuple(sp.Symbol(n, integer=True, nonnegative=True) for n in _split_names(names))
    return syms[0] if len(syms) == 1 else syms


class Index(sp.Dummy):
    """A loop index: a unique integer symbol carrying a display name and an optional extent.

    Identity is the pair (name, sympy's dummy index): `_live` maps it to the one object of
    this process, so unpickling (in this process or another) and copying give back that
    object, and every expression that mentions the index holds the same one."""
    _live = weakref.WeakValueDictionary()

    def __new__(cls, name, extent=None, dummy_index=None):
        if dummy_index is not None:
            known = cls._live.get((name, dummy_index))
            if known is not None:
                return known
        obj = super().__new__(cls, name, dummy_index=dummy_index, integer=True,
                              nonnegative=True)
        obj.extent = None if extent is None else as_size(extent, f"index {name}, extent")
        cls._live[(name, obj.dummy_index)] = obj
        return obj

    def __reduce_ex__(self, protocol):
        return (Index, (self.name, self.extent, self.dummy_index))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def _sympystr(self, printer):
        return self.name

    def _latex(self, printer):
        return self.name.replace("_", r"\_")


def indices(names, extent=None):
    """`i, j = tex.indices("i j")`; `extent=` fixes the range instead of inferring it."""
    idx = tuple(Index(n, extent) for n in _split_names(names))
    return idx[0] if len(idx) == 1 else idx


def param(name):
    """A call-time integer parameter (`split_k(k, parts=tex.param("P"))`)."""
    return Param(name)


class Param(sp.Symbol):
    """A scalar given to the compiled function by keyword at call time."""

    def __new__(cls, name):
        return super().__new__(cls, name, integer=True, positive=True)

    def __getnewargs_ex__(self):
        return (self.name,), {}


class CeilDiv(sp.Function):
    """ceiling(a / b) for integers, the trip count of a split's outer loop. sympy's own
    `ceiling(Min(1020, 1024 - 1020*io)/6)` wrongly simplifies to the quotient (it takes
    the Min of two even numbers over 6 for an integer), so splits use this function,
    which evaluates only on integer arguments."""
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer and b != 0:
            return sp.Integer(-(-int(a) // int(b)))
        if b == 1:
            return a
        return None

    def _eval_is_nonnegative(self):
        a, b = self.args
        if a.is_nonnegative and b.is_positive:
            return True
        return None

    def _sympystr(self, printer):
        from sympy.printing.precedence import PRECEDENCE
        a, b = self.args
        return f"ceiling({printer.parenthesize(a, PRECEDENCE['Mul'])}/" \
               f"{printer.parenthesize(b, PRECEDENCE['Mul'] + 1)})"


class AutoParts(Param):
    """A split_k part count that the call path chooses from the sizes and the thread
    count (`s.auto()`'s split-K decision): `rows` is the extent of the loop that the
    threads would otherwise share, `length` the extent of the reduction."""

    def __new__(cls, name, rows, length):
        # not through sympy's symbol cache, which would hand back (and overwrite) the
        # AutoParts of another program with the same name
        obj = sp.Symbol.__xnew__(cls, name, integer=True, positive=True)
        obj.rows, obj.length = sp.sympify(rows), sp.sympify(length)
        return obj

    def _hashable_content(self):
        return super()._hashable_content() + (self.rows, self.length)

    def __getnewargs_ex__(self):
        return (self.name, self.rows, self.length), {}


def _split_names(names):
    out = names.replace(",", " ").split() if isinstance(names, str) else list(names)
    if not out:
        raise ValueError("expected at least one name")
    return out


def index_symbols(expr):
    return {s for s in sp.sympify(expr).free_symbols if isinstance(s, Index)}


def affine_terms(expr, where):
    """Split an affine index expression into ({Index: int coefficient}, offset)."""
    expr = sp.expand(sp.sympify(expr))
    idx = index_symbols(expr)
    coeffs = {}
    offset = expr
    for x in sorted(idx, key=lambda s: s.dummy_index):
        c = expr.coeff(x)
        if not c.is_Integer:
            raise ValueError(f"{where}: index expression {expr} is not affine in {x} "
                             f"(coefficient {c} is not an integer)")
        coeffs[x] = int(c)
        offset = offset - c * x
    offset = sp.expand(offset)
    if index_symbols(offset):
        raise ValueError(f"{where}: index expression {expr} is not affine in the indices")
    if offset.is_integer is not True:
        raise ValueError(f"{where}: index expression {expr} is not an integer: "
                         f"{_floor_hint(offset)}")
    return coeffs, offset


def _floor_hint(e):
    """How to say `e` (a size expression that may not be an integer) with floor division."""
    num, den = sp.fraction(sp.together(e))
    if den == 1:
        return f"{e} is not an integer size expression"
    text = f"({num})" if isinstance(num, sp.Add) else str(num)
    dtext = f"({den})" if not (den.is_Atom) else str(den)
    return f"sizes divide with //: write {text} // {dtext}, not {e}"


def as_size(d, where):
    """An integer size expression (sizes, integers, //, %, min, max), or raise."""
    try:
        d = sp.sympify(d)
    except (sp.SympifyError, TypeError):
        raise TypeError(f"{where}: {d!r} is not an integer or size expression") from None
    if isinstance(d, sp.Basic) and d.is_number and not d.is_Integer:
        raise ShapeError(f"{where}: {d} is not an integer")
    if d.is_integer is not True:
        raise ValueError(f"{where}: {_floor_hint(d)}")
    return d


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

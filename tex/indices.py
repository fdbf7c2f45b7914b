"""Sizes and indices: the symbols of index notation, and their affine arithmetic.

- Sizes are `Symbol`s (integer, non-negative; tex.symbolic, tex's own algebra); two
  sizes with one name are one size.
- An `Index` is a `Dummy`: identity by object, never by name. It prints as the name
  the user gave it. One process holds one object per index: an index that is unpickled or
  copied is the object it was made from (or, in another process, one object for all
  the copies of it that arrive there).
- Every index expression inside `tensor[...]` is affine in the indices, with integer
  coefficients and an offset that may contain sizes (`C[i, j + H]`, `x[2*i + 1]`).
- `format_size` prints sizes and index expressions as a user writes them (`T - R + 1`,
  `N // 2`).
"""
import functools
import keyword
import weakref

import tex.symbolic as sym
from tex.symbolic import PRECEDENCE, StrPrinter
from tex.symbolic import CeilDiv, Min, lower_bound  # noqa: F401 (tex.indices' names too)

from .errors import ShapeError


def sizes(names):
    """`M, N, K = tex.sizes("M N K")`: symbolic sizes, bound from the arrays at call time."""
    syms = tuple(sym.Symbol(n, integer=True, nonnegative=True)
                 for n in _split_names(names, "sizes"))
    return syms[0] if len(syms) == 1 else syms


class Index(sym.Dummy):
    """A loop index: a unique integer symbol carrying a display name and an optional extent.

    Identity is the pair (name, dummy index): `_live` maps it to the one object of
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

    _size_text = _sympystr      # format_size's printer

    def _latex(self, printer):
        return self.name.replace("_", r"\_")


def indices(names, extent=None):
    """`i, j = tex.indices("i j")`; `extent=` fixes the range instead of inferring it."""
    idx = tuple(Index(n, extent) for n in _split_names(names, "indices"))
    return idx[0] if len(idx) == 1 else idx


def param(name):
    """A call-time integer parameter (`split_k(k, parts=tex.param("P"))`)."""
    return Param(argument_name(name, "parameter", call_argument=True))


def argument_name(name, what, call_argument=False):
    """`name`, if a compiled function can take it as a keyword argument: an identifier
    and not a Python keyword (f(lambda=...) is not Python); a `call_argument` (an input
    tensor's, a parameter's) not `out` either, the results' keyword."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{what} name {name!r} is not an identifier")
    if keyword.iskeyword(name):
        raise ValueError(f"{what} name {name!r} is a Python keyword: compiled functions take "
                         f"{what}s as keyword arguments, so choose another name")
    if call_argument and name == "out":
        raise ValueError(f"{what} name 'out' is taken: compiled functions take out= for "
                         "their results, so choose another name")
    return name


class Param(sym.Symbol):
    """A scalar given to the compiled function by keyword at call time."""

    def __new__(cls, name):
        return super().__new__(cls, name, integer=True, positive=True)

    def __reduce__(self):
        return (type(self), (self.name,))


def less(a, b, strict=True):
    """`a < b` (or `a <= b`) as a relation: `sym.true` or `sym.false` when
    `lower_bound` decides it, else kept as written (tex.symbolic's relations decide
    themselves when built)."""
    return _relation(sym.StrictLessThan if strict else sym.LessThan, a, b)


def greater(a, b):
    """`a > b` as a relation, decided like `less` (a StrictGreaterThan when kept)."""
    return _relation(sym.StrictGreaterThan, a, b)


def at_least(a, b):
    """`a >= b` as a relation, decided like `less` (a GreaterThan when kept)."""
    return _relation(sym.GreaterThan, a, b)


def _relation(cls, a, b):
    return _built_relation(cls, sym.sympify(a), sym.sympify(b))


@functools.lru_cache(maxsize=8192)
def _built_relation(cls, a, b):
    """cls(a, b), memoized: a schedule asks about the same extents many times (a
    matmul's first compile: 280 relations, 171 distinct)."""
    return cls(a, b)


def negation(c):
    """Not(c): an inequality becomes its opposite, decided like `less`; anything else
    goes to Not."""
    c = sym.sympify(c)
    opposite = sym.NEGATED.get(type(c))
    return sym.Not(c) if opposite is None else _relation(opposite, *c.args)


def all_of(*conds):
    """And(*conds): true terms dropped, a false one decides, duplicates merged."""
    return sym.And(*conds)


def any_of(*conds):
    """Or(*conds), built like `all_of`."""
    return sym.Or(*conds)


class AutoParts(Param):
    """A part count that the call path chooses from the sizes and the thread count, by
    one of the runtime's rules (backends/llvm/runtime.PART_RULES): "split_k" (`s.auto()`'s
    split-K decision: `rows` is the extent of the loop that the threads would otherwise
    share, `length` the extent of the reduction), "split_k_stream" (the same for a few
    rows streaming B, from a shorter reduction in a loop) or "threads" (up to four parts a
    thread of a loop of `length` in blocks of `block`, when each thread gets four blocks
    or more, evenly, and `rows`, the work the threads would otherwise share in each
    block, is small: calls.thread_parts)."""

    def __new__(cls, name, rows, length, rule="split_k", block=1):
        obj = sym.Symbol.__new__(cls, name, integer=True, positive=True)
        obj.rows, obj.length, obj.rule = sym.sympify(rows), sym.sympify(length), rule
        obj.block = int(block)
        return obj

    def _hashable_content(self):
        return super()._hashable_content() + (self.rows, self.length, self.rule, self.block)

    def __reduce__(self):
        return (AutoParts, (self.name, self.rows, self.length, self.rule, self.block))


def _split_names(names, what=None):
    """"M N K" (or a list) -> names; for tex.sizes / tex.indices (`what`), each an
    identifier, each once (two indices named p in one call printed alike: E[p, p] read
    as a diagonal and was a copy)."""
    if not isinstance(names, (str, list, tuple)):
        example = '"i j"' if what == "indices" else '"M N"'
        raise TypeError(f"tex.{what or 'sizes'} takes names (a string like {example} or a list "
                        f"of strings), not {names!r}")
    out = names.replace(",", " ").split() if isinstance(names, str) else list(names)
    if not out:
        raise ValueError("expected at least one name")
    if what is not None:
        for n, name in enumerate(out):
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"tex.{what}: {name!r} is not a name (an identifier)")
            if name in out[:n]:
                raise ValueError(f"tex.{what}: {name!r} appears twice")
    return out


def index_symbols(expr):
    return {s for s in sym.sympify(expr).free_symbols if isinstance(s, Index)}


def affine_terms(expr, where):
    """Split an affine index expression into ({Index: int coefficient}, offset)."""
    expr = sym.expand(sym.sympify(expr))
    idx = index_symbols(expr)
    coeffs = {}
    offset = expr
    for x in sorted(idx, key=lambda s: s.dummy_index):
        c = expr.coeff(x)
        if not c.is_Integer:
            raise ValueError(f"{where}: index expression {format_size(expr)} is not affine "
                             f"in {x} (coefficient {format_size(c)} is not an integer)")
        coeffs[x] = int(c)
        offset = offset - c * x
    offset = sym.expand(offset)
    if index_symbols(offset):
        raise ValueError(f"{where}: index expression {format_size(expr)} is not affine in "
                         "the indices")
    if offset.is_integer is not True:
        raise ValueError(f"{where}: index expression {format_size(expr)} is not an "
                         f"integer: {_floor_hint(offset)}")
    return coeffs, offset


def _floor_hint(e):
    """How to say `e` (a size expression that may not be an integer) with floor division."""
    num, den = sym.numer_denom(e)
    if den == 1:
        return f"{e} is not an integer size expression"
    text = f"({format_size(num)})" if isinstance(num, sym.Add) else format_size(num)
    dtext = f"({format_size(den)})" if not (den.is_Atom) else format_size(den)
    return f"sizes divide with //: write {text} // {dtext}, not {format_size(e)}"


def as_size(d, where):
    """An integer size expression (sizes, integers, //, %, min, max), or raise."""
    try:
        d = sym.sympify(d)
    except (sym.SympifyError, TypeError):
        raise TypeError(f"{where}: {d!r} is not an integer or size expression") from None
    if isinstance(d, sym.Basic) and d.is_number and not d.is_Integer:
        raise ShapeError(f"{where}: {format_size(d)} is not an integer")
    if d.is_integer is not True:
        raise ValueError(f"{where}: {_floor_hint(d)}")
    return d


class _SizePrinter(StrPrinter):
    """Sizes, index expressions and conditions as a user writes them in Python:
    `T - R + 1`, `N // 2`, `N % 4`, `min(64, N - 64*jo)`, `ceil(N/64)`, `M == 1`,
    `M >= 6 and N >= 32`, `not (...)` (`str` says `Eq(M, 1)`, `Mod`, `Min`, `ceiling`
    and `(M >= 6) & (N >= 32)`, `~(...)`, as sympy did)."""

    def _print_Relational(self, e):
        lhs, op, rhs = _as_bound(e)
        level = PRECEDENCE["Relational"]
        return f"{self.parenthesize(lhs, level)} {op} {self.parenthesize(rhs, level)}"

    def _print_And(self, e):
        return " and ".join(self.parenthesize(a, PRECEDENCE["And"]) for a in e.args)

    def _print_Or(self, e):     # an `and` inside is parenthesized, as readers expect
        return " or ".join(self.parenthesize(a, PRECEDENCE["And"] + 1) for a in e.args)

    def _print_Not(self, e):
        return f"not {self.parenthesize(e.args[0], PRECEDENCE['Relational'])}"

    def _print_Min(self, e):
        return self._builtin("min", e)

    def _print_Abs(self, e):
        return self._builtin("abs", e)

    def _print_Max(self, e):
        return self._builtin("max", e)

    def _builtin(self, name, e):
        return f"{name}({', '.join(self._print(a) for a in e.args)})"

    printmethod = "_size_text"
    ceiling_name = "ceil"          # math.ceil, as Python reads it: ceil(N/64)

    def _print_ceiling(self, e):
        return f"ceil({self._print(e.args[0])})"

    def _print_Mod(self, e):
        return f"{self.parenthesize(e.args[0], PRECEDENCE['Mul'])} % " \
               f"{self.parenthesize(e.args[1], PRECEDENCE['Mul'] + 1)}"

    def _print_floor(self, e):
        num, den = sym.numer_denom(e.args[0])
        if den == 1:
            return f"floor({self._print(e.args[0])})"
        return f"{self.parenthesize(num, PRECEDENCE['Mul'])} // " \
               f"{self.parenthesize(den, PRECEDENCE['Mul'] + 1)}"

    def parenthesize(self, item, level, strict=False):
        """A quotient `a // b` or `a % b` inside a product or power is parenthesized:
        `3*(N // 4)`, not `3*N // 4`, which Python reads as (3*N) // 4."""
        if level >= PRECEDENCE["Mul"] and _is_quotient(item):
            return f"({self._print(item)})"
        return super().parenthesize(item, level, strict)

    def _print_Mul(self, e):
        if e.could_extract_minus_sign():        # -(N // 2), not -N // 2 (= (-N) // 2)
            pos = -e
            if _is_quotient(pos):
                return f"-({self._print(pos)})"
            if pos.is_Mul:
                return f"-{self._print_Mul(pos)}"
        return super()._print_Mul(e)


def _as_bound(rel):
    """A comparison with 0 as the reader writes it: the terms it subtracts on the left,
    the others on the right, `ii + 8*io < M` for `M - ii - 8*io - 1 >= 0` (sympy's
    canonical form). The constant goes to the side it adds to, or, when it is the
    1 that makes the comparison strict, away (integers: `Q <= P - 1` is `Q < P`)."""
    lhs, op, rhs = rel.lhs, rel.rel_op, rel.rhs
    if rhs != 0 or not isinstance(lhs, sym.Add) or op not in ("<", "<=", ">", ">="):
        return lhs, op, rhs
    c = sum((t for t in lhs.args if t.is_number), sym.Integer(0))
    neg = [-t for t in lhs.args if not t.is_number and t.could_extract_minus_sign()]
    pos = [t for t in lhs.args if not t.is_number and not t.could_extract_minus_sign()]
    if not neg or not (pos or c > 0) or not c.is_Integer:
        return lhs, op, rhs
    q, p = sym.Add(*neg), sym.Add(*pos)
    # P - Q + c (op) 0  is  Q (flipped op) P + c
    flipped = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}[op]
    integral = (p - q).is_integer is True
    if integral and c == -1 and flipped in ("<=", ">"):     # Q <= P - 1: Q < P
        return q, {"<=": "<", ">": ">="}[flipped], p
    if integral and c == 1 and flipped in ("<", ">="):      # Q < P + 1: Q <= P
        return q, {"<": "<=", ">=": ">"}[flipped], p
    return (q - c, flipped, p) if c < 0 else (q, flipped, p + c)


def _is_quotient(e):
    """Does `e` print as `a // b` or `a % b` (which bind as a product does)?"""
    return isinstance(e, sym.Mod) or \
        isinstance(e, sym.floor) and sym.numer_denom(e.args[0])[1] != 1


def size_template(e):
    """`M = %d` for a %-template that gives a size's value at a call (`%d` alone when
    the size is a number: `3 = 3` said nothing)."""
    e = sym.sympify(e)
    return "%d" if e.is_number else f"{format_size(e).replace('%', '%%')} = %d"


sym.core.later.ReprPrinter = _SizePrinter     # repr() of sizes and index expressions


def format_size(e):
    """A size or index expression as text (`T - R + 1`, `j + N // 2`)."""
    return _SizePrinter().doprint(sym.sympify(e))

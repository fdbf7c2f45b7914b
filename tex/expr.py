"""Tensor expressions: sizes, indices, tensors and the expression tree.

Invariants:
- Sizes are sympy `Symbol`s (integer, non-negative); two sizes with one name are one size.
- An `Index` is a `sympy.Dummy`: identity by object, never by name.
- Every index expression inside `tensor[...]` is affine in the indices, with integer
  coefficients and an offset that may contain sizes (`C[i, j + H]`, `x[2*i + 1]`).
- Expression nodes are immutable. Their `==` builds a comparison (as numpy's does), so
  compiler code compares nodes with `is` and keys dictionaries by `id` or by node identity.
"""
import numpy as np
import sympy as sp

from . import dtypes
from .errors import ShapeError


# ---------------------------------------------------------------- sizes and indices

def sizes(names):
    """`M, N, K = tex.sizes("M N K")`: symbolic sizes, bound from the arrays at call time."""
    syms = tuple(sp.Symbol(n, integer=True, nonnegative=True) for n in _split_names(names))
    return syms[0] if len(syms) == 1 else syms


class Index(sp.Dummy):
    """A loop index: a unique integer symbol carrying a display name and an optional extent."""

    def __new__(cls, name, extent=None):
        obj = super().__new__(cls, name, integer=True, nonnegative=True)
        obj.extent = None if extent is None else sp.sympify(extent)
        return obj


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
    return coeffs, offset


# ---------------------------------------------------------------- expression nodes

class Expr:
    """An elementwise expression with a numpy dtype. Operators build new nodes."""
    __slots__ = ("dtype",)
    __hash__ = object.__hash__

    def __add__(self, o): return op("add", self, o)
    def __radd__(self, o): return op("add", o, self)
    def __sub__(self, o): return op("subtract", self, o)
    def __rsub__(self, o): return op("subtract", o, self)
    def __mul__(self, o): return op("multiply", self, o)
    def __rmul__(self, o): return op("multiply", o, self)
    def __truediv__(self, o): return op("true_divide", self, o)
    def __rtruediv__(self, o): return op("true_divide", o, self)
    def __floordiv__(self, o): return op("floor_divide", self, o)
    def __rfloordiv__(self, o): return op("floor_divide", o, self)
    def __mod__(self, o): return op("remainder", self, o)
    def __rmod__(self, o): return op("remainder", o, self)
    def __pow__(self, o): return op("power", self, o)
    def __rpow__(self, o): return op("power", o, self)
    def __neg__(self): return op("negative", self)
    def __pos__(self): return self
    def __abs__(self): return op("absolute", self)
    def __invert__(self): return op("invert", self)
    def __and__(self, o): return op("bitwise_and", self, o)
    def __rand__(self, o): return op("bitwise_and", o, self)
    def __or__(self, o): return op("bitwise_or", self, o)
    def __ror__(self, o): return op("bitwise_or", o, self)
    def __xor__(self, o): return op("bitwise_xor", self, o)
    def __rxor__(self, o): return op("bitwise_xor", o, self)
    def __lt__(self, o): return op("less", self, o)
    def __le__(self, o): return op("less_equal", self, o)
    def __gt__(self, o): return op("greater", self, o)
    def __ge__(self, o): return op("greater_equal", self, o)
    def __eq__(self, o): return op("equal", self, o)
    def __ne__(self, o): return op("not_equal", self, o)

    def __bool__(self):
        raise TypeError("a tex expression has no truth value; use tex.where for a choice")

    def astype(self, dtype):
        return cast(self, dtype)


class Const(Expr):
    """A constant. `weak` constants come from Python scalars and promote as numpy's do."""
    __slots__ = ("value", "weak")

    def __init__(self, value, dtype=None):
        # Python ints and floats are weak (NEP 50); a Python bool is simply bool
        self.weak = dtype is None and not isinstance(value, bool)
        self.dtype = np.result_type(value) if dtype is None else dtypes.as_dtype(dtype)
        self.value = self.dtype.type(value).item() if not self.weak else value

    def __repr__(self):
        return repr(self.value)


class Access(Expr):
    """`tensor[index...]`: one element of a tensor, each index an affine sympy expression."""
    __slots__ = ("tensor", "index")

    def __init__(self, tensor, index):
        self.tensor, self.index, self.dtype = tensor, tuple(index), tensor.dtype

    def __repr__(self):
        return f"{self.tensor.name}[{', '.join(map(str, self.index))}]"


class IndexValue(Expr):
    """The value of an affine index expression, as int64 (`tex.compute("I", (i,), i * 2)`)."""
    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr, self.dtype = sp.sympify(expr), dtypes.INT64

    def __repr__(self):
        return str(self.expr)


class Op(Expr):
    """An elementwise operation named by its numpy ufunc (or `cast`, `where`, `erf`)."""
    __slots__ = ("name", "args")

    def __init__(self, name, args, dtype):
        self.name, self.args, self.dtype = name, tuple(args), dtype

    def __repr__(self):
        return f"{self.name}({', '.join(map(repr, self.args))})"


COMBINERS = ("sum", "prod", "max", "min", "argmax", "argmin")


class Reduce(Expr):
    """A reduction of `body` over `over` (a tuple of Index) with a combiner from COMBINERS.
    `dtype` is the accumulator and result type (int64 for argmax/argmin)."""
    __slots__ = ("combiner", "body", "over", "fast_math")

    def __init__(self, combiner, body, over, dtype, fast_math=True):
        self.combiner, self.body, self.over = combiner, body, tuple(over)
        self.dtype, self.fast_math = dtype, fast_math

    def __repr__(self):
        return f"{self.combiner}({self.body!r}, over={self.over})"


def as_expr(x):
    """Wrap Python scalars, indices and index expressions as expression nodes."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float, np.generic)):
        return Const(x.item() if isinstance(x, np.generic) else x,
                     x.dtype if isinstance(x, np.generic) else None)
    if isinstance(x, sp.Basic):
        if index_symbols(x):
            return IndexValue(x)
        if x.is_Integer:
            return Const(int(x))
        raise TypeError(f"{x} is a size expression; sizes are not values inside expressions")
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tex expression")


def _operand_dtype(e):
    """What numpy's type resolution sees for an operand: a weak scalar's Python type."""
    return type(e.value) if isinstance(e, Const) and e.weak else e.dtype


_UFUNC_NAMES = {
    "add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "power",
    "negative", "absolute", "invert", "bitwise_and", "bitwise_or", "bitwise_xor",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "maximum", "minimum",
    "exp", "log", "sqrt", "tanh",
}


def op(name, *args):
    """Build an elementwise node; the result dtype is numpy's ufunc type resolution."""
    args = tuple(as_expr(a) for a in args)
    if name not in _UFUNC_NAMES:
        raise ValueError(f"unknown elementwise operation {name!r}")
    ufunc = getattr(np, name)
    try:
        resolved = ufunc.resolve_dtypes(tuple(_operand_dtype(a) for a in args) + (None,))
    except (TypeError, np.exceptions.DTypePromotionError) as err:
        types = ", ".join(str(_operand_dtype(a)) for a in args)
        raise TypeError(f"{name} is not defined for ({types}): {err}") from None
    in_types, out = resolved[:-1], resolved[-1]
    unfit = [(a, t) for a, t in zip(args, in_types) if _weak_int_out_of_range(a, t)]
    if unfit:
        # numpy: a Python int that the integer type cannot hold is compared exactly,
        # and refused (OverflowError) by arithmetic; never wrapped silently
        common = None
        if name in _COMPARISONS:
            common = np.result_type(*(np.min_scalar_type(a.value) if _is_weak(a) else a.dtype
                                      for a in args))
        if common is None or common.kind not in "iuf":
            (a, t), = unfit[:1]
            raise OverflowError(f"{name}: Python integer {a.value} out of bounds for {t}")
        in_types = (common,) * len(args)
    args = tuple(a if a.dtype == t else cast(a, t) for a, t in zip(args, in_types))
    return Op(name, args, dtypes.as_dtype(out, f"result of {name}"))


_COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}


def _is_weak(e):
    return isinstance(e, Const) and e.weak


def _weak_int_out_of_range(e, dt):
    if not (_is_weak(e) and type(e.value) is int and np.dtype(dt).kind in "iu"):
        return False
    info = np.iinfo(dt)
    return not info.min <= e.value <= info.max


def cast(x, dtype):
    """Convert to `dtype` with numpy's `astype` semantics (unsafe casts allowed)."""
    x, dt = as_expr(x), dtypes.as_dtype(dtype)
    if x.dtype == dt:
        return x
    if isinstance(x, Const):
        return Const(np.array(x.value).astype(dt).item(), dt)
    return Op("cast", (x,), dt)


def where(cond, a, b):
    """`where(cond, a, b)`: a where cond is true, else b; numpy's promotion of a and b."""
    cond, a, b = as_expr(cond), as_expr(a), as_expr(b)
    # weak Python scalars promote by value (NEP 50): where(c, x_f32, 1.0) stays float32
    dt = np.result_type(*(x.value if _is_weak(x) else x.dtype for x in (a, b)))
    return Op("where", (cast(cond, "bool"), cast(a, dt), cast(b, dt)), dtypes.as_dtype(dt))


# ---------------------------------------------------------------- math functions

def exp(x): return op("exp", x)
def log(x): return op("log", x)
def sqrt(x): return op("sqrt", x)
def tanh(x): return op("tanh", x)
def abs(x): return op("absolute", x)  # noqa: A001 - the public name is tex.abs
def maximum(a, b): return op("maximum", a, b)
def minimum(a, b): return op("minimum", a, b)


def erf(x):
    x = as_expr(x)
    dt = x.dtype if dtypes.is_float(x.dtype) else dtypes.FLOAT64
    return Op("erf", (cast(x, dt),), dt)


def relu(x):
    return maximum(x, 0)


def sigmoid(x):
    return 1 / (1 + exp(-as_expr(x)))


def gelu(x, approximate="none"):
    """GELU: `x * Phi(x)` with the erf form, or the tanh approximation."""
    x = as_expr(x)
    if not dtypes.is_float(x.dtype):
        x = cast(x, dtypes.FLOAT64)     # as numpy's x * 0.5 would; x*x*x must not wrap
    if approximate == "none":
        return 0.5 * x * (1 + erf(x * 0.7071067811865476))
    if approximate == "tanh":
        return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")


# ---------------------------------------------------------------- reductions

def _reduction(combiner, body, over, dtype, fast_math):
    body = as_expr(body)
    over = tuple(over) if isinstance(over, (tuple, list)) else (over,)
    if not over:
        raise ValueError(f"{combiner}: over= needs at least one index")
    for x in over:
        if not isinstance(x, Index):
            raise TypeError(f"{combiner}: over= takes tex.indices, not {x!r}")
    used = expr_indices(body)
    for x in over:
        if x not in used:
            raise ValueError(f"{combiner}: the body does not use index {x} named in over=")
    if combiner in ("argmax", "argmin"):
        acc = dtypes.INT64
        if dtype is not None and dtypes.as_dtype(dtype) != acc:
            raise TypeError(f"{combiner}: the result is an int64 position; dtype= must be int64")
    elif dtype is not None:
        acc = dtypes.as_dtype(dtype, f"{combiner}(dtype=)")
    elif combiner in ("sum", "prod"):
        acc = _numpy_sum_dtype(body.dtype)
    else:
        acc = body.dtype
    return Reduce(combiner, body, over, acc, fast_math)


def _numpy_sum_dtype(dt):
    """`numpy.sum`'s default: small integers and bool widen to the platform integer."""
    if dt.kind == "b" or (dt.kind == "i" and dt.itemsize < 8):
        return dtypes.INT64
    if dt.kind == "u" and dt.itemsize < 8:
        return np.dtype("uint64")
    return dt


def sum(body, over, dtype=None, fast_math=True):  # noqa: A001 - the public name is tex.sum
    return _reduction("sum", body, over, dtype, fast_math)


def prod(body, over, dtype=None, fast_math=True):
    return _reduction("prod", body, over, dtype, fast_math)


def max(body, over, dtype=None, fast_math=True):  # noqa: A001
    return _reduction("max", body, over, dtype, fast_math)


def min(body, over, dtype=None, fast_math=True):  # noqa: A001
    return _reduction("min", body, over, dtype, fast_math)


def argmax(body, over, dtype=None):
    return _reduction("argmax", body, over, dtype, True)


def argmin(body, over, dtype=None):
    return _reduction("argmin", body, over, dtype, True)


# ---------------------------------------------------------------- traversal helpers

def children(e):
    if isinstance(e, Op):
        return e.args
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def walk(e):
    """Every node of the tree, parents before children."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def expr_indices(e):
    """The indices an expression uses (reduced ones included)."""
    out = set()
    for node in walk(e):
        if isinstance(node, Access):
            for ix in node.index:
                out |= index_symbols(ix)
        elif isinstance(node, IndexValue):
            out |= index_symbols(node.expr)
    return out


def free_indices(e):
    """The indices an expression depends on once its reductions are done."""
    if isinstance(e, Reduce):
        return free_indices(e.body) - set(e.over)
    if isinstance(e, Op):
        return set().union(*(free_indices(a) for a in e.args)) if e.args else set()
    return expr_indices(e)


def rebuild(e, fn):
    """Rebuild a tree bottom-up: `fn(node, new_children)` returns the replacement node."""
    kids = children(e)
    new = tuple(rebuild(k, fn) for k in kids)
    return fn(e, new)


def with_children(e, new):
    if isinstance(e, Op):
        return e if all(a is b for a, b in zip(e.args, new)) else Op(e.name, new, e.dtype)
    if isinstance(e, Reduce):
        return e if new[0] is e.body else Reduce(e.combiner, new[0], e.over, e.dtype, e.fast_math)
    return e


def check_rank(tensor, index):
    if len(index) != len(tensor.shape):
        raise ShapeError(f"tensor {tensor.name} has rank {len(tensor.shape)} "
                         f"but was indexed with {len(index)} indices")

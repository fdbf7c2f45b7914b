"""Tensor expressions: sizes, indices, tensors and the expression tree.

Invariants:
- Sizes are sympy `Symbol`s (integer, non-negative); two sizes with one name are one size.
- An `Index` is a `sympy.Dummy`: identity by object, never by name. It prints as the name
  the user gave it. One process holds one object per index: an index that is unpickled or
  copied is the object it was made from (or, in another process, one object for all
  the copies of it that arrive there).
- Every index expression inside `tensor[...]` is affine in the indices, with integer
  coefficients and an offset that may contain sizes (`C[i, j + H]`, `x[2*i + 1]`).
- Expression nodes are immutable. Their `==` builds a comparison (as numpy's does), so
  compiler code compares nodes with `is` and keys dictionaries by `id` or by node identity.
"""
import weakref

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
        raise TypeError(
            f"a tex expression has no truth value (here: {self!r}): for the larger or "
            "smaller of two values use tex.maximum(a, b) or tex.minimum(a, b), not "
            "Python's max()/min(); for a choice use tex.where(cond, a, b); combine "
            "conditions with & and |, not `and`/`or`")

    def astype(self, dtype):
        return cast(self, dtype)

    def __repr__(self):
        from .printing import format_expr
        return format_expr(self)

    def __copy__(self):             # immutable: a copy is the node itself
        return self

    def __deepcopy__(self, memo):
        return self

    # numpy calls these for np.exp(expr), np.maximum(expr, 0), np.where(c, a, b), ...
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from .interop import array_ufunc
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from .interop import array_function
        return array_function(func, args, kwargs)


class Const(Expr):
    """A constant. `weak` constants come from Python scalars and promote as numpy's do."""
    __slots__ = ("value", "weak")

    def __init__(self, value, dtype=None):
        # Python ints and floats are weak (NEP 50); a Python bool is simply bool
        self.weak = dtype is None and not isinstance(value, bool)
        self.dtype = np.result_type(value) if dtype is None else dtypes.as_dtype(dtype)
        self.value = self.dtype.type(value).item() if not self.weak else value


class Access(Expr):
    """`tensor[index...]`: one element of a tensor, each index an affine sympy expression."""
    __slots__ = ("tensor", "index")

    def __init__(self, tensor, index):
        self.tensor, self.index, self.dtype = tensor, tuple(index), tensor.dtype


class IndexValue(Expr):
    """The value of an affine index expression, as int64 (`tex.compute("I", (i,), i * 2)`)."""
    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr, self.dtype = sp.sympify(expr), dtypes.INT64


class Op(Expr):
    """An elementwise operation named by its numpy ufunc (or `cast`, `where`, `erf`).
    `weak`: every operand was a weak scalar or a size, so the result promotes as a
    Python scalar would (`_weak_kind`)."""
    __slots__ = ("name", "args", "weak")

    def __init__(self, name, args, dtype, weak=False):
        self.name, self.args, self.dtype, self.weak = name, tuple(args), dtype, weak


COMBINERS = ("sum", "prod", "max", "min", "argmax", "argmin")


class Reduce(Expr):
    """A reduction of `body` over `over` (a tuple of Index) with a combiner from COMBINERS.
    `dtype` is the accumulator and result type (int64 for argmax/argmin)."""
    __slots__ = ("combiner", "body", "over", "fast_math")

    def __init__(self, combiner, body, over, dtype, fast_math=True):
        self.combiner, self.body, self.over = combiner, body, tuple(over)
        self.dtype, self.fast_math = dtype, fast_math


def as_expr(x):
    """Wrap Python scalars, indices, sizes and index expressions as expression nodes. A
    size expression (`N`, `N // 2`) is an int64 value read at call time that promotes
    like the Python int it stands for (see `_weak_kind`)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float, np.generic)):
        return Const(x.item() if isinstance(x, np.generic) else x,
                     x.dtype if isinstance(x, np.generic) else None)
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return Const(x.item(), x.dtype)
    if isinstance(x, sp.Basic):
        if index_symbols(x):
            return IndexValue(x)
        if x.is_Integer:
            return Const(int(x))
        return _size_value(x)
    if isinstance(x, np.ndarray):
        raise TypeError(f"a numpy array (shape {x.shape}) cannot be part of a tex expression: "
                        "declare it with tex.tensor(...) and pass the array at call time")
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tex expression")


def _size_value(e):
    """A size expression as a value. Integer parts are one int64 IndexValue each; true
    division, float factors and square roots become operations, as they would on the
    Python ints a numpy user holds (`x.shape[1] / 2` is a float)."""
    if e.is_integer:
        return IndexValue(e)
    if e.is_Number:
        return Const(float(e))
    num, den = sp.fraction(e)
    if den != 1:
        return op("true_divide", _size_value(num), _size_value(den))
    if isinstance(e, (sp.Add, sp.Mul)):
        parts = [_size_value(a) for a in e.args]
        out = parts[0]
        for p in parts[1:]:
            out = op("add" if isinstance(e, sp.Add) else "multiply", out, p)
        return out
    if isinstance(e, sp.Pow):
        if e.exp == sp.Rational(1, 2):
            return op("sqrt", _size_value(e.base))
        return op("power", _size_value(e.base), _size_value(e.exp))
    raise TypeError(f"cannot use the size expression {e} as a value")


def _weak_kind(e):
    """The Python type a weak operand stands for (NEP 50), or None for a typed one.

    Python ints and floats are weak, and so are sizes (`N` is the Python int
    `x.shape[1]` a numpy user would write) and expressions of sizes and Python
    scalars only (`1 / tex.sqrt(D)` is `1 / math.sqrt(d)`): `tex.sum(X[i, j], over=j) / N`
    on float32 stays float32, as `x.sum(1) / x.shape[1]` does in numpy."""
    if isinstance(e, Const):
        return type(e.value) if e.weak else None
    if isinstance(e, IndexValue):
        return None if index_symbols(e.expr) else int
    if isinstance(e, Op) and e.weak:
        return int if e.dtype.kind in "iu" else float
    return None


def _runtime_weak(e):
    """A weak operand whose value is known only at call time (a size expression)."""
    return _weak_kind(e) is not None and not isinstance(e, Const)


def _operand_dtype(e):
    """What numpy's type resolution sees for an operand: a weak scalar's Python type."""
    return _weak_kind(e) or e.dtype


_UFUNC_NAMES = {
    "add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "power",
    "negative", "absolute", "invert", "bitwise_and", "bitwise_or", "bitwise_xor",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "maximum", "minimum",
    "exp", "log", "sqrt", "tanh", "sin", "cos", "floor", "ceil", "rint", "sign",
    "isnan", "isfinite", "log1p", "expm1",
}


def op(name, *args):
    """Build an elementwise node; the result dtype is numpy's ufunc type resolution."""
    args = tuple(as_expr(a) for a in args)
    if name not in _UFUNC_NAMES:
        raise ValueError(f"unknown elementwise operation {name!r}")
    ufunc = getattr(np, name)
    operands = [_operand_dtype(a) for a in args]
    resolved = _resolve(ufunc, name, operands)
    if any(_runtime_weak(a) and t.kind in "iu" and t.itemsize < 8
           for a, t in zip(args, resolved[:-1])):
        # a size never narrows: its value is known only at call time, so numpy's guard
        # for a Python int that a narrow type cannot hold (OverflowError) cannot run
        operands = [dtypes.INT64 if _runtime_weak(a) else t for a, t in zip(args, operands)]
        resolved = _resolve(ufunc, name, operands)
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
    weak = all(_weak_kind(a) is not None for a in args) and out in (dtypes.INT64, dtypes.FLOAT64)
    args = tuple(a if a.dtype == t else cast(a, t) for a, t in zip(args, in_types))
    return Op(name, args, dtypes.as_dtype(out, f"result of {name}"), weak)


def _resolve(ufunc, name, operands):
    try:
        return ufunc.resolve_dtypes(tuple(operands) + (None,))
    except (TypeError, np.exceptions.DTypePromotionError) as err:
        types = ", ".join(getattr(t, "__name__", str(t)) for t in operands)
        raise TypeError(f"{name} is not defined for ({types}): {err}") from None


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
    # weak Python scalars promote by value (NEP 50): where(c, x_f32, 1.0) stays float32;
    # a size stands for a Python int (0 here), and never narrows an integer type
    dt = np.result_type(*(x.value if _is_weak(x) else _weak_kind(x)(0) if _runtime_weak(x)
                          else x.dtype for x in (a, b)))
    if dt.kind in "iu" and dt.itemsize < 8 and (_runtime_weak(a) or _runtime_weak(b)):
        dt = np.result_type(*(dtypes.INT64 if _runtime_weak(x) else _operand_dtype(x)
                              for x in (a, b)))
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
    body, over = reduction_operands(combiner, body, over)
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


def reduction_operands(name, body, over):
    """(body as an expression, over as a tuple of indices the body uses), or raise with
    a message that starts with the reduction's `name`."""
    body = as_expr(body)
    over = tuple(over) if isinstance(over, (tuple, list)) else (over,)
    if not over:
        raise ValueError(f"{name}: over= needs at least one index")
    for x in over:
        if not isinstance(x, Index):
            hint = ""
            if name in ("max", "min"):
                hint = (f"; tex.{name} reduces over indices (tex.{name}(x, over=j)): "
                        f"for the elementwise {name}imum of two values use "
                        f"tex.{name}imum(a, b)")
            raise TypeError(f"{name}: over= takes tex.indices, not {x!r}{hint}")
    used = expr_indices(body)
    for x in over:
        if x not in used:
            raise ValueError(f"{name}: the body does not use index {x} named in over=")
    return body, over


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


def rebuild(e, fn, memo=None):
    """Rebuild a tree bottom-up: `fn(node, new_children)` returns the replacement node.
    A subtree shared by several parents (softmax's `exp(x - max)`) is rebuilt once."""
    memo = {} if memo is None else memo
    if id(e) not in memo:
        new = tuple(rebuild(k, fn, memo) for k in children(e))
        memo[id(e)] = fn(e, new)
    return memo[id(e)]


def with_children(e, new):
    if isinstance(e, Op):
        return e if all(a is b for a, b in zip(e.args, new)) else Op(e.name, new, e.dtype,
                                                                      e.weak)
    if isinstance(e, Reduce):
        return e if new[0] is e.body else Reduce(e.combiner, new[0], e.over, e.dtype, e.fast_math)
    return e


def check_rank(tensor, index):
    if len(index) != len(tensor.shape):
        raise ShapeError(f"tensor {tensor.name} has rank {len(tensor.shape)} "
                         f"but was indexed with {len(index)} indices")


"""Tensor expressions: the expression tree over tensors' elements, its construction with
numpy's type rules, and its printing (`repr`: the spelling a user types).

Invariants (sizes and indices: tex/indices.py):
- Expression nodes are immutable. Their `==` builds a comparison (as numpy's does), so
  compiler code compares nodes with `is` and keys dictionaries by `id` or by node identity.
"""
import functools

import numpy as np
import tex.symbolic as sym

from . import dtypes
from .combiners import COMBINERS
from .errors import ShapeError
# the symbols of index notation, defined in tex/indices.py, importable from here too
from .indices import (AutoParts, CeilDiv, Index, Min, Param, _split_names,  # noqa: F401
                      affine_terms, all_of, any_of, as_size, at_least, format_size,
                      index_symbols, indices, less, negation, param, sizes)


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
    def __lshift__(self, o): return op("left_shift", self, o)
    def __rlshift__(self, o): return op("left_shift", o, self)
    def __rshift__(self, o): return op("right_shift", self, o)
    def __rrshift__(self, o): return op("right_shift", o, self)
    def __lt__(self, o): return op("less", self, o)
    def __le__(self, o): return op("less_equal", self, o)
    def __gt__(self, o): return op("greater", self, o)
    def __ge__(self, o): return op("greater_equal", self, o)
    def __eq__(self, o): return op("equal", self, o)
    def __ne__(self, o): return op("not_equal", self, o)

    def __bool__(self):
        raise TypeError(f"a tex expression has no truth value (here: {self!r}): for the "
                        "larger or smaller of two values use tex.maximum(a, b) or "
                        "tex.minimum(a, b), not Python's max()/min(); for a choice use "
                        "tex.where(cond, a, b); combine conditions with & and |, not `and`/`or`")

    def astype(self, dtype):
        return cast(self, dtype)

    def __repr__(self):
        return format_expr(self)

    def __copy__(self):             # immutable: a copy is the node itself
        return self

    def __deepcopy__(self, memo):
        return self

    # numpy calls these for np.exp(expr), np.maximum(expr, 0), np.where(c, a, b), ...
    # (answered by tex/interop.py, which sits above the library functions and installs
    # its handlers in NUMPY_HANDLERS when tex is imported)
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return NUMPY_HANDLERS["ufunc"](ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return NUMPY_HANDLERS["function"](func, args, kwargs)


NUMPY_HANDLERS = {}     # "ufunc", "function" -> tex.interop's array_ufunc, array_function


class Const(Expr):
    """A constant. `weak` constants come from Python scalars and promote as numpy's do."""
    __slots__ = ("value", "weak")

    def __init__(self, value, dtype=None):
        # Python ints and floats are weak (NEP 50); a Python bool is simply bool
        self.weak = dtype is None and not isinstance(value, bool)
        self.dtype = np.result_type(value) if dtype is None else dtypes.as_dtype(dtype)
        self.value = self.dtype.type(value).item() if not self.weak else value


def const_text(c):
    """A constant as its shortest text in its dtype: a float32 0.1 is `0.1`, not the
    float64 expansion of its value (0.10000000149011612)."""
    v = c.value
    if not c.weak and c.dtype.kind == "f" and c.dtype.itemsize < 8 and np.isfinite(v):
        return str(c.dtype.type(v))
    return repr(v)


class Access(Expr):
    """`tensor[index...]`: one element of a tensor, each index an affine expression (tex.symbolic)."""
    __slots__ = ("tensor", "index")

    def __init__(self, tensor, index):
        self.tensor, self.index, self.dtype = tensor, tuple(index), tensor.dtype


class IndexValue(Expr):
    """The value of an affine index expression, as int64 (`tex.compute("I", (i,), i * 2)`)."""
    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr, self.dtype = sym.sympify(expr), dtypes.INT64


class Op(Expr):
    """An elementwise operation named by its numpy ufunc (or `cast`, `where`, `erf`).
    `weak`: every operand was a weak scalar or a size, so the result promotes as a
    Python scalar would (`_weak_kind`)."""
    __slots__ = ("name", "args", "weak")

    def __init__(self, name, args, dtype, weak=False):
        self.name, self.args, self.dtype, self.weak = name, tuple(args), dtype, weak


class Reduce(Expr):
    """A reduction of `body` over `over` (a tuple of Index) with a combiner from COMBINERS.
    `dtype` is the accumulator and result type (int64 for argmax/argmin). A `strict`
    max/min/argmax/argmin refuses an empty range as numpy does (ValueError at call
    time); otherwise it gives the combiner's identity there (-inf for a float max: how
    `tex.max(..., initial=)` and the library's stabilizing maxima are built)."""
    __slots__ = ("combiner", "body", "over", "fast_math", "strict")

    def __init__(self, combiner, body, over, dtype, fast_math=True, strict=True):
        self.combiner, self.body, self.over = combiner, body, tuple(over)
        self.dtype, self.fast_math, self.strict = dtype, fast_math, strict


def some_indices(t):
    """What goes between the brackets of an element of `t`: `i, j`; `()` for a 0-d
    tensor (`S[()]`: `S[]` is not Python)."""
    if not t.shape:
        return "()"
    return ", ".join("ijklmn"[:len(t.shape)]) if len(t.shape) <= 6 else "i, j, ..."


def without_indices(t, spelling):
    """The message for a tensor used where an element of it is meant."""
    return (f"tensor {t.name} is used without indices: write {spelling} (with tex.indices) "
            "in a tex expression")


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
    if isinstance(x, sym.Basic):
        if isinstance(x, (sym.Relational, sym.And, sym.Or, sym.Not)):
            return _condition_value(x)           # a causal mask: tex.where(j <= i, ...)
        if index_symbols(x):
            # an integer index expression is one int64 value; `j * 0.5` is the float
            # arithmetic numpy does on np.arange(N) * 0.5
            return IndexValue(x) if x.is_integer else _size_value(x)
        if x.is_Integer:
            return Const(int(x))
        return _size_value(x)
    if isinstance(x, np.ndarray):
        raise TypeError(f"a numpy array (shape {x.shape}) cannot be part of a tex expression: "
                        "declare it with tex.tensor(...) and pass the array at call time")
    if getattr(x, "needs_indices", False):        # a Tensor (tensor.py)
        raise TypeError(without_indices(x, f"{x.name}[{some_indices(x)}]"))
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tex expression")


def _size_value(e):
    """A size expression as a value. Integer parts are one int64 IndexValue each; true
    division, float factors and square roots become operations, as they would on the
    Python ints a numpy user holds (`x.shape[1] / 2` is a float)."""
    if e.is_integer:
        return IndexValue(e)
    if e.is_Number:
        return Const(float(e))
    num, den = sym.fraction(e)
    if den != 1:
        return op("true_divide", _size_value(num), _size_value(den))
    if isinstance(e, (sym.Add, sym.Mul)):
        return _chain("add" if isinstance(e, sym.Add) else "multiply",
                      [_size_value(a) for a in e.args])
    if isinstance(e, sym.Pow):
        if e.exp == sym.Rational(1, 2):
            return op("sqrt", _size_value(e.base))
        return op("power", _size_value(e.base), _size_value(e.exp))
    raise TypeError(f"cannot use the size expression {e} as a value")


def _chain(name, parts):
    """parts[0] name parts[1] name ...: n-ary Add, Mul, And, Or as binary ops."""
    out = parts[0]
    for p in parts[1:]:
        out = op(name, out, p)
    return out


_RELATIONS = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal",
              "==": "equal", "!=": "not_equal"}


def _condition_value(c):
    """A relation of indices and sizes (`j <= i`) as a bool expression."""
    if isinstance(c, sym.Not):
        return op("logical_not", _condition_value(c.args[0]))
    if isinstance(c, (sym.And, sym.Or)):
        return _chain("logical_and" if isinstance(c, sym.And) else "logical_or",
                      [_condition_value(a) for a in c.args])
    if c.rel_op not in _RELATIONS:
        raise TypeError(f"cannot use the relation {c} as a value")
    return op(_RELATIONS[c.rel_op], as_expr(c.lhs), as_expr(c.rhs))


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
    "left_shift", "right_shift", "less", "less_equal", "greater", "greater_equal", "equal",
    "not_equal", "logical_and", "logical_or", "logical_not", "maximum", "minimum",
    "exp", "log", "sqrt", "tanh", "sin", "cos", "floor", "ceil", "rint", "sign",
    "isnan", "isfinite", "log1p", "expm1"}


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
        if name in _COMPARISONS:
            return _compare_beyond_range(ufunc, args)
        (a, t), = unfit[:1]
        raise OverflowError(f"{name}: Python integer {a.value} out of bounds for {t}")
    if name == "power" and out.kind in "iu" and isinstance(args[1], Const) \
            and args[1].value < 0:
        raise ValueError(f"power: integers to negative integer powers are not allowed "
                         f"({format_expr(args[0])} ** {args[1].value}), as in numpy; write "
                         f"the base as a float")
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


def _compare_beyond_range(ufunc, args):
    """A comparison of integers with a Python int that their type cannot hold: numpy 2
    answers it exactly, and the answer is the same for every element (an int above the
    type's range is above every element)."""
    if all(isinstance(a, Const) for a in args):
        return Const(bool(ufunc(*(np.array(a.value, dtype=object) for a in args))))
    stand_in = [(np.inf if a.value > 0 else -np.inf) if _is_weak(a) and type(a.value) is int
                else 0.0 for a in args]
    # the same answer everywhere, as an expression of the integer operand, which keeps
    # its indices (and so the definition's shape): x == x is true, x != x false
    x, = (a for a in args if not isinstance(a, Const))
    return op("equal" if ufunc(*stand_in) else "not_equal", x, x)


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


def elementwise_doc(fn, ufunc):
    """Give the one-line elementwise function `fn` its docstring: numpy's `ufunc` on tex
    expressions."""
    args = "X[i, j], Z[i, j]" if fn.__code__.co_argcount == 2 else "X[i, j]"
    fn.__doc__ = (f"numpy.{ufunc} of tex expressions, element by element, with numpy's "
                  f"dtype rules.\n\n    Arguments are tensor accesses, expressions or "
                  f"numbers:\n    tex.compute(\"Y\", (i, j), tex.{fn.__name__}({args}))")
    return fn


for _fn, _ufunc in ((exp, "exp"), (log, "log"), (sqrt, "sqrt"), (tanh, "tanh"),
                    (abs, "absolute"), (maximum, "maximum"), (minimum, "minimum")):
    elementwise_doc(_fn, _ufunc)


def erf(x):
    """The error function element by element (scipy.special.erf; integers as float64)."""
    x = as_expr(x)
    dt = x.dtype if dtypes.is_float(x.dtype) else dtypes.FLOAT64
    return Op("erf", (cast(x, dt),), dt)


def relu(x):
    """max(x, 0) element by element (tex.maximum(x, 0))."""
    return maximum(x, 0)


def sigmoid(x):
    """1 / (1 + exp(-x)) element by element."""
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

def _reduction(combiner, body, over, dtype, fast_math, strict=True):
    body, over = reduction_operands(combiner, body, over)
    if COMBINERS[combiner].positional:
        acc = dtypes.INT64
        if dtype is not None and dtypes.as_dtype(dtype) != acc:
            raise TypeError(f"{combiner}: the result is an int64 position; dtype= must be int64")
    elif dtype is not None:
        acc = dtypes.as_dtype(dtype, f"{combiner}(dtype=)")
    else:
        acc = _default_accumulator(combiner, body.dtype)
    if combiner in ("sum", "prod") and acc == dtypes.FLOAT16:
        # numpy adds half precision up in single precision and rounds once at the end:
        # a float16 accumulator stops growing at 2048 (a sum of 3000 ones)
        return cast(Reduce(combiner, body, over, dtypes.FLOAT32, fast_math, strict), acc)
    return Reduce(combiner, body, over, acc, fast_math, strict)


def _default_accumulator(combiner, dt):
    """The accumulator's dtype without dtype=: numpy's (sums of small integers and bool
    widen), an int64 position for argmax/argmin, else the body's."""
    if COMBINERS[combiner].positional:
        return dtypes.INT64
    return _numpy_sum_dtype(dt) if combiner in ("sum", "prod") else dt


def reduction_operands(name, body, over):
    """(body as an expression, over as a tuple of indices the body uses), or raise with
    a message that starts with the reduction's `name`."""
    if isinstance(body, np.ndarray):
        raise TypeError(f"tex.{name} builds an expression over tensors, "
                        f"tex.{name}(X[i, j], over=j); for a numpy array use np.{name} or "
                        "tex.einsum")
    body = as_expr(body)
    if over is None:
        raise TypeError(f"{name}: over= names the index or indices to reduce over: "
                        f"tex.{name}(X[i, j], over=j)")
    over = tuple(over) if isinstance(over, (tuple, list)) else (over,)
    if not over:
        raise ValueError(f"{name}: over= needs at least one index")
    twice = [x for n, x in enumerate(over) if x in over[:n]]
    if twice:
        raise ValueError(f"{name}: index {twice[0]} appears twice in over=")
    for x in over:
        if not isinstance(x, Index):
            hint = ""
            if name in ("max", "min"):
                hint = (f"; tex.{name} reduces over indices (tex.{name}(x, over=j)): "
                        f"for the elementwise {name}imum of two values use "
                        f"tex.{name}imum(a, b)")
            raise TypeError(f"{name}: over= takes tex.indices, not {x!r}{hint}")
    used, free = expr_indices(body), free_indices(body)
    for x in over:
        if x not in used:
            raise ValueError(f"{name}: the body does not use index {x} named in over=")
        if x not in free:
            raise ValueError(f"{name}: index {x} named in over= is already reduced over "
                             f"inside the body (each reduction needs an index of its own)")
    return body, over


def _numpy_sum_dtype(dt):
    """`numpy.sum`'s default: small integers and bool widen to the platform integer."""
    if dt.kind == "b" or (dt.kind == "i" and dt.itemsize < 8):
        return dtypes.INT64
    if dt.kind == "u" and dt.itemsize < 8:
        return np.dtype("uint64")
    return dt


def numpy_reduction_keywords(fn):
    """Refuse numpy's axis=/keepdims=/out=/where= on a reduction over indices with the
    tex spelling (they reached Python's "unexpected keyword argument")."""
    @functools.wraps(fn)
    def reduction(*args, **kwargs):
        numpy_only = [k for k in ("axis", "keepdims", "out", "where") if k in kwargs]
        if numpy_only:
            raise TypeError(f"tex.{fn.__name__} reduces over indices, not axes: "
                            f"tex.{fn.__name__}(X[i, j], over=j); {numpy_only[0]}= is "
                            f"numpy's (on arrays: np.{fn.__name__}(a, axis=1), or tex.einsum)")
        return fn(*args, **kwargs)
    return reduction


@numpy_reduction_keywords
def sum(body, over=None, dtype=None, fast_math=True):  # noqa: A001 - the public name is tex.sum
    """The sum of `body` over the index or tuple of indices `over`:
    `tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))`. `dtype` is the
    accumulator's and the result's (numpy's default: small integers and bool sum as
    int64); `fast_math=False` keeps the sequential order (no reassociation, so no
    vectors or split-K parts for a float sum)."""
    return _reduction("sum", body, over, dtype, fast_math)


@numpy_reduction_keywords
def prod(body, over=None, dtype=None, fast_math=True):
    """The product of `body` over `over` (see tex.sum)."""
    return _reduction("prod", body, over, dtype, fast_math)


@numpy_reduction_keywords
def max(body, over=None, dtype=None, fast_math=True, initial=None):  # noqa: A001
    """The maximum over `over`; an empty range is refused as numpy does, unless an
    `initial` value is given (numpy's `initial=`: the result is at least it)."""
    return _extreme("max", maximum, body, over, dtype, fast_math, initial)


@numpy_reduction_keywords
def min(body, over=None, dtype=None, fast_math=True, initial=None):  # noqa: A001
    """The minimum over `over` (see `max`)."""
    return _extreme("min", minimum, body, over, dtype, fast_math, initial)


def _extreme(combiner, pairwise, body, over, dtype, fast_math, initial):
    if initial is None:
        return _reduction(combiner, body, over, dtype, fast_math)
    red = _reduction(combiner, body, over, dtype, fast_math, strict=False)
    initial = as_expr(initial)
    if _weak_int_out_of_range(initial, red.dtype):
        raise OverflowError(f"{combiner}: initial={initial.value} is out of bounds for "
                            f"the {red.dtype} result")
    # numpy casts initial= to the reduction's dtype (np.max(int8s, initial=1.5) is an
    # int8 at least 1), it does not promote the result
    return pairwise(red, cast(initial, red.dtype))


@numpy_reduction_keywords
def argmax(body, over=None, dtype=None):
    """The position of the maximum of `body` along `over` (int64, the first on ties and
    at a NaN, as numpy.argmax): `tex.compute("P", (i,), tex.argmax(L[i, j], over=j))`.
    Over a tuple of indices, the position is flat in row-major order of their extents."""
    return _reduction("argmax", body, over, dtype, True)


@numpy_reduction_keywords
def argmin(body, over=None, dtype=None):
    """The position of the minimum of `body` along `over` (see tex.argmax)."""
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


def substitute_indices(e, mapping):
    """`e` with its indices replaced by `mapping` (Index -> index expression) in every
    read and index value."""
    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access):
            return Access(node.tensor, [sym.sympify(ix).xreplace(mapping) for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(mapping))
        return node
    return rebuild(e, fn)


def with_children(e, new):
    if isinstance(e, Op):
        return e if all(a is b for a, b in zip(e.args, new)) else Op(e.name, new, e.dtype,
                                                                      e.weak)
    if isinstance(e, Reduce):
        return e if new[0] is e.body else Reduce(e.combiner, new[0], e.over, e.dtype,
                                                  e.fast_math, e.strict)
    return e


def check_rank(tensor, index):
    if len(index) != len(tensor.shape):
        raise ShapeError(f"tensor {tensor.name} has rank {len(tensor.shape)} "
                         f"but was indexed with {len(index)} indices")


# ---------------------------------------------------------------- printing

# Python's operator precedence, loosest first: how `repr` of an expression parenthesizes
_INFIX = {"less": ("<", 1), "less_equal": ("<=", 1), "greater": (">", 1),
          "greater_equal": (">=", 1), "equal": ("==", 1), "not_equal": ("!=", 1),
          "bitwise_or": ("|", 2), "logical_or": ("|", 2), "bitwise_xor": ("^", 3),
          "bitwise_and": ("&", 4), "logical_and": ("&", 4), "left_shift": ("<<", 4.5),
          "right_shift": (">>", 4.5), "add": ("+", 5),
          "subtract": ("-", 5), "multiply": ("*", 6), "true_divide": ("/", 6),
          "floor_divide": ("//", 6), "remainder": ("%", 6), "power": ("**", 8)}
_ATOM = 9


def format_expr(e):
    """An expression in the spelling a user would type (`A[i, k] * B[k, j]`,
    `sum(X[i, j], over=j) / N`), indices by their own names."""
    return _format(e)[0]


def _format(e):
    """(text, precedence) of an expression."""
    if isinstance(e, Const):
        v = e.value
        return const_text(e), (7 if isinstance(v, (int, float)) and v < 0 else _ATOM)
    if isinstance(e, Access):
        return f"{e.tensor.name}[{', '.join(map(format_size, e.index)) or '()'}]", _ATOM
    if isinstance(e, IndexValue):
        prec = 5 if isinstance(e.expr, sym.Add) else 6 if isinstance(e.expr, sym.Mul) else _ATOM
        return format_size(e.expr), prec
    if isinstance(e, Reduce):
        over = str(e.over[0]) if len(e.over) == 1 else f"({', '.join(map(str, e.over))})"
        dtype = "" if e.dtype == _default_accumulator(e.combiner, e.body.dtype) else \
            f", dtype={e.dtype.name}"
        return f"{e.combiner}({format_expr(e.body)}, over={over}{dtype})", _ATOM
    if isinstance(e, Op):
        args = [_format(a) for a in e.args]
        if e.name in _INFIX and len(args) == 2:
            op_text, prec = _INFIX[e.name]
            (lt, lp), (rt, rp) = args
            right_assoc = e.name == "power"
            if lp < prec or (right_assoc and lp == prec) or (prec == 1 and lp == 1):
                lt = f"({lt})"
            if rp < prec or (not right_assoc and rp == prec):
                rt = f"({rt})"
            return f"{lt} {op_text} {rt}", prec
        if e.name in ("negative", "invert", "logical_not"):
            (t, p), = args
            op_text = {"negative": "-", "invert": "~", "logical_not": "~"}[e.name]
            return f"{op_text}{t if p >= 7 else f'({t})'}", 7
        if e.name == "cast":
            if _weak_kind(e.args[0]) is not None:     # an implicit promotion: N, 1.0
                return args[0]
            (t, p), = args
            return f"{t if p >= _ATOM else f'({t})'}.astype({e.dtype.name})", _ATOM
        name = {"absolute": "abs", "rint": "round"}.get(e.name, e.name)
        return f"{name}({', '.join(t for t, _ in args)})", _ATOM
    return repr(e), _ATOM

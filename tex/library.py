"""Functions built from tex's own operations, spelled as numpy and scipy spell them.

Elementwise: `sin`, `cos`, `floor`, `ceil`, `round` (numpy's: half to even), `clip`,
`sign`, `isnan`, `isfinite`, `log1p`, `expm1`, `silu`, `softplus`, `rsqrt`; each
follows numpy's dtype resolution (an integer argument of `sin` gives float64).

Reductions: `mean`, `var`, `std` (numpy's `ddof=0` default), `logsumexp` and `softmax`,
spelled like `tex.sum` (`tex.mean(X[i, j], over=j)`). They are plain expressions of
`tex.sum`/`tex.max` and sizes, so a definition that uses them is scheduled, fused and
compiled like any other; `compute` lifts the reductions inside them into definitions
of their own (one per distinct reduction: softmax's max is computed once).
"""
import builtins

import numpy as np
import tex.symbolic as sym

from . import dtypes
from .expr import (abs as abs_, as_expr, cast, elementwise_doc, exp, log, max as max_, maximum,
                   minimum, numpy_reduction_keywords, op, reduction_operands, sqrt, sum as sum_,
                   where)
from .tensor import index_extents


# ---------------------------------------------------------------- elementwise

def sin(x): return op("sin", x)
def cos(x): return op("cos", x)
def floor(x): return op("floor", x)
def ceil(x): return op("ceil", x)
def sign(x): return op("sign", x)
def isnan(x): return op("isnan", x)
def isfinite(x): return op("isfinite", x)
def log1p(x): return op("log1p", x)
def expm1(x): return op("expm1", x)


for _fn in (sin, cos, floor, ceil, sign, isnan, isfinite, log1p, expm1):
    elementwise_doc(_fn, _fn.__name__)


def round(x, decimals=0):  # noqa: A001 - the public name is tex.round
    """numpy's `round`: halves go to the even neighbour (`round(2.5) == 2.0`); integers
    are their own value for `decimals >= 0`."""
    x = as_expr(x)
    if not isinstance(decimals, int):
        raise TypeError(f"round: decimals must be an int, not {decimals!r}")
    if x.dtype.kind in "biu":
        if decimals >= 0:
            return x
        return cast(round(cast(x, dtypes.FLOAT64), decimals), x.dtype)
    if decimals == 0:
        return op("rint", x)
    scale = float(10 ** builtins.abs(decimals))    # numpy scales by a Python float
    if decimals > 0:
        return op("rint", x * scale) / scale
    return op("rint", x / scale) * scale


def clip(x, a_min=None, a_max=None):
    """numpy's `clip`: `minimum(maximum(x, a_min), a_max)`; NaN propagates."""
    if a_min is None and a_max is None:
        raise ValueError("clip: give a_min, a_max or both")
    out = as_expr(x)
    if out.dtype.kind in "iu":
        # numpy's clip drops a Python int bound beyond the integer type's range (a
        # uint8 clipped below at -3), where maximum() would refuse it
        info = np.iinfo(out.dtype)
        a_min = None if type(a_min) is int and a_min <= info.min else a_min
        a_max = None if type(a_max) is int and a_max >= info.max else a_max
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def _floating(x):
    """x as a float expression: integers go to float64, as numpy's exp would take them."""
    x = as_expr(x)
    return x if dtypes.is_float(x.dtype) else cast(x, dtypes.FLOAT64)


def rsqrt(x):
    """1 / sqrt(x)."""
    return 1 / sqrt(x)


def silu(x):
    """x * sigmoid(x), as x / (1 + exp(-x))."""
    x = _floating(x)
    return x / (1 + exp(-x))


def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)) (numpy's
    `logaddexp(0, x)`)."""
    x = _floating(x)
    return maximum(x, 0) + log1p(exp(-abs_(x)))


# ---------------------------------------------------------------- reductions

def _count(body, over, what):
    """The number of elements a reduction over `over` visits, as a size value: the
    product of the indices' extents, inferred from `body` as `compute` will."""
    ext = index_extents(what, body, over)
    return sym.Mul(*(ext[x] for x in over))


def _mean_dtype(dt, dtype):
    """numpy's accumulator for mean and var: float64 for integers and bools, float32
    for float16 (cast back at the end), else the element type; `dtype=` overrides."""
    if dtype is not None:
        return dtypes.as_dtype(dtype, "dtype=")
    if dt.kind in "biu":
        return dtypes.FLOAT64
    return np.dtype("float32") if dt == np.float16 else dt


def _result(value, body, dtype):
    return cast(value, np.float16) if dtype is None and body.dtype == np.float16 else value


@numpy_reduction_keywords
def mean(body, over, dtype=None):
    """`tex.mean(X[i, j], over=j)`: the sum over `over` divided by its element count
    (numpy's `mean`: integers average in float64; an empty range gives NaN)."""
    body, over = reduction_operands("mean", body, over)
    acc = _mean_dtype(body.dtype, dtype)
    n = _count(body, over, "mean")
    return _result(sum_(body, over, dtype=acc) / n, body, dtype)


@numpy_reduction_keywords
def var(body, over, ddof=0, dtype=None):
    """numpy's `var`: the mean of squared deviations from the mean, divided by
    `max(n - ddof, 0)` instead of n."""
    body, over = reduction_operands("var", body, over)
    acc = _mean_dtype(body.dtype, dtype)
    n = _count(body, over, "var")
    dev = cast(body, acc) - sum_(body, over, dtype=acc) / n
    count = n if ddof == 0 else maximum(as_expr(n) - ddof, 0)   # (printed as written)
    return _result(sum_(dev * dev, over, dtype=acc) / count, body, dtype)


@numpy_reduction_keywords
def std(body, over, ddof=0, dtype=None):
    """numpy's `std`: the square root of `var`."""
    body, over = reduction_operands("std", body, over)
    v = var(body, over, ddof, _mean_dtype(body.dtype, dtype))
    return _result(sqrt(v), body, dtype)


@numpy_reduction_keywords
def logsumexp(body, over):
    """scipy's `logsumexp`: log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m
    the maximum (0 where the maximum is infinite, so all -inf gives -inf, an empty range
    too, and +inf gives +inf)."""
    body, over = reduction_operands("logsumexp", body, over)
    x = _floating(body)
    m = max_(x, over, initial=-np.inf)
    shift = where(isfinite(m), m, 0)
    return log(sum_(exp(x - shift), over)) + shift


@numpy_reduction_keywords
def softmax(body, over):
    """scipy's `softmax`: exp(x - max) / sum(exp(x - max)), an expression indexed like
    its argument (`tex.softmax(S[i, j], over=j)` is indexed by i and j)."""
    body, over = reduction_operands("softmax", body, over)
    x = _floating(body)
    e = exp(x - max_(x, over, initial=-np.inf))
    return e / sum_(e, over)

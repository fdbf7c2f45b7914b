"""The NumPy reference: evaluates a Program with whole-array NumPy operations.

This is the specification every compiled kernel is tested against. It evaluates each
definition on the full grid of its indices (memory = product of the extents), so it is
meant for test-sized inputs. Semantics that NumPy leaves open are fixed here and matched
by the compiled code: sums and products over an empty range give the combiner's
identity, and max/min/argmax/argmin refuse one as numpy does (ValueError); integer
division by zero gives 0.
"""
import math

import numpy as np
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ShapeError
from tex.expr import Access, Const, IndexValue, Op, Reduce, affine_terms
from tex.indices import format_size
from tex.program import as_program



def bind_sizes(program, arrays, params=None):
    """{size or param symbol: int} from the input arrays; raises ShapeError on a mismatch."""
    values = {}
    for s, (pos, axis) in program.size_bindings().items():
        values[s] = int(arrays[pos].shape[axis])
    for p in program.params:
        if params is None or str(p) not in params:
            raise TypeError(f"missing call-time parameter {p}")
        values[p] = int(params[str(p)])
    for t, a in zip(program.inputs, arrays):
        if a.ndim != t.ndim:
            raise ShapeError(f"tensor {t.name}: expected rank {t.ndim}, got {a.ndim}")
        for axis, d in enumerate(t.shape):
            if int(d.xreplace(values)) != a.shape[axis]:
                raise ShapeError(f"tensor {t.name}, dimension {axis}: expected {format_size(d)} = "
                                 f"{int(d.xreplace(values))}, got {a.shape[axis]}")
    return values


def evaluate(program, arrays, params=None):
    """Evaluate `program` on input arrays (in program.inputs order); returns a tuple."""
    program = as_program(program)
    arrays = [np.asarray(a, dtype=t.dtype) for t, a in zip(program.inputs, arrays)]
    sizes = bind_sizes(program, arrays, params)
    env = dict(zip(program.inputs, arrays))
    for d in program.definitions:
        env[d] = _definition(d, env, sizes)
    return tuple(env[o] for o in program.outputs)


def _definition(d, env, sizes):
    order = list(d.indices) + [x for x in d.extents if x not in d.indices]
    ext = {x: int(sym.sympify(d.extents[x]).xreplace(sizes)) for x in order}
    grid = {x: np.arange(ext[x]).reshape([-1 if y is x else 1 for y in order]) for x in order}
    full = tuple(ext[x] for x in order)
    with np.errstate(all="ignore"):
        value = _eval(d.expr, env, sizes, grid)
        red = d.reduction
        dtype = red.body.dtype if red is not None else d.dtype
        value = np.broadcast_to(np.asarray(value, dtype=dtype), full)
    if red is not None:
        axes = tuple(order.index(x) for x in red.over)
        value = _reduce(red, value, axes)
    else:
        value = value.reshape(full)
    # np.array, not np.ascontiguousarray: that one turns a 0-d result into shape (1,)
    return np.array(np.broadcast_to(value, tuple(ext[x] for x in d.indices)), order="C")


def _index(ix, sizes, grid):
    coeffs, offset = affine_terms(ix, "reference")
    out = int(sym.sympify(offset).xreplace(sizes))
    for x, c in coeffs.items():
        out = out + c * grid[x]
    return out


def _eval(e, env, sizes, grid):
    if isinstance(e, Const):
        return np.asarray(e.value, dtype=e.dtype)
    if isinstance(e, IndexValue):
        return np.asarray(_index(e.expr, sizes, grid), dtype=np.int64)
    if isinstance(e, Access):
        arr = env[e.tensor]
        idx = tuple(_index(ix, sizes, grid) for ix in e.index)
        return arr[idx] if idx else arr[()]
    if isinstance(e, Reduce):
        return _eval(e.body, env, sizes, grid)
    if isinstance(e, Op):
        args = [_eval(a, env, sizes, grid) for a in e.args]
        return np.asarray(OPS[e.name](e, *args), dtype=e.dtype)
    raise TypeError(f"reference: cannot evaluate {e!r}")


def _int_div(e, a, b):
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.floor_divide(a, safe))


def _int_mod(e, a, b):
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.remainder(a, safe))


def _erf(e, a):
    return np.vectorize(math.erf, otypes=[np.float64])(a).astype(e.dtype)


def _power(e, a, b):
    if e.dtype.kind in "iu":
        return _int_power(a, b, e.dtype)
    return np.power(a, b)


def _int_power(a, b, dt):
    """Integer power by squaring, wrapping; a negative exponent gives the integer part of
    the true value (numpy raises): 1 for a base of 1, +-1 for -1, else 0."""
    a, b = np.broadcast_arrays(np.asarray(a, dt), np.asarray(b, dt))
    result = np.ones(a.shape, dt)
    base, exp = a.copy(), b.astype(np.int64)
    neg = exp < 0
    exp = np.where(neg, 0, exp)
    while np.any(exp > 0):
        odd = (exp & 1) == 1
        result = np.where(odd, result * base, result)
        base = base * base
        exp >>= 1
    unit_power = np.where((a == -1) & (b % 2 == 1), -1, 1).astype(dt)
    return np.where(neg, np.where((a == 1) | (a == -1), unit_power, 0), result)


def _ufunc(name):
    fn = getattr(np, name)
    return lambda e, *args: fn(*args)


OPS = {name: _ufunc(name) for name in (
    "add", "subtract", "multiply", "true_divide", "negative", "absolute", "invert",
    "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "less",
    "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and",
    "logical_or", "logical_not",
    "maximum", "minimum", "exp", "log", "sqrt", "tanh", "sin", "cos", "floor", "ceil",
    "rint", "sign", "isnan", "isfinite", "log1p", "expm1")}
OPS.update({
    "floor_divide": lambda e, a, b: _int_div(e, a, b) if e.dtype.kind in "iu"
    else np.floor_divide(a, b),
    "remainder": lambda e, a, b: _int_mod(e, a, b) if e.dtype.kind in "iu"
    else np.remainder(a, b),
    "power": _power,
    "erf": _erf,
    "cast": lambda e, a: np.asarray(a).astype(e.dtype),
    "where": lambda e, c, a, b: np.where(c, a, b),
})


def _reduce(red, value, axes):
    comb, acc = red.combiner, red.dtype
    kept = [s for a, s in enumerate(value.shape) if a not in axes]
    combiner = COMBINERS[comb]
    if not combiner.has_identity and 0 in [value.shape[a] for a in axes]:
        if combiner.positional:
            fill, dtype = 0, np.int64
        else:
            fill, dtype = combiner.identity(acc), acc
        if red.strict:      # numpy refuses, also into an empty result (tex.max(initial=) does not)
            raise ValueError(f"zero-size array to reduction operation {combiner.numpy} "
                             "which has no identity")
        return np.full(kept, fill, dtype)
    if combiner.positional:
        keep = [ax for ax in range(value.ndim) if ax not in axes]
        moved = np.moveaxis(value, axes, range(value.ndim - len(axes), value.ndim))
        # the reduced length explicitly: reshape cannot infer -1 when a kept axis is 0
        flat = moved.reshape([value.shape[a] for a in keep]
                             + [int(np.prod([value.shape[a] for a in axes]))])
        return (np.argmax if comb == "argmax" else np.argmin)(flat, axis=-1).astype(np.int64)
    value = value.astype(acc, copy=False)
    if acc.kind == "b":
        fn = {"sum": np.logical_or, "prod": np.logical_and, "max": np.logical_or,
              "min": np.logical_and}[comb]
        return fn.reduce(value, axis=axes) if value.size else \
            np.full([s for a, s in enumerate(value.shape) if a not in axes], comb in ("prod", "min"))
    if comb == "sum":
        return np.sum(value, axis=axes, dtype=acc)
    if comb == "prod":
        return np.prod(value, axis=axes, dtype=acc)
    fn = np.max if comb == "max" else np.min
    return fn(value, axis=axes)

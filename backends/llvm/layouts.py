"""A compiled program's layout variants: the same program compiled for the layout of the
arrays a call brings (scheduler/layouts.py says why), one per layout, on first need.

The call path of a function that has variants asks `by_layout` only when an input of
rank 2 or more is at least tex/layout.SMALL bytes and not C-contiguous (two attribute
reads a call otherwise; the call paths of einsum's kernels, of a user's schedule and of
the variants themselves have no such check).
Only a function compiled with the default schedule has variants: a schedule the user
wrote (or tex.tune found) names loops for the layout it was made for, and runs as
written. A variant
is the auto schedule of the rewritten program, compiled as the function was (its
flags), and called with each input transposed to its largest-stride-first order; an
output that follows its inputs' layout comes back transposed, a view in that layout.
"""
import warnings

import numpy as np

from tex.layout import SMALL, axis_order

from ...scheduler.layouts import movable_inputs, permuted, retyped
from ... import forksafe

NOTHING = object()          # by_layout's answer when the call runs the function itself
FAILED = object()           # a layout whose variant did not compile (_variant)
_lock = forksafe.lock()


def by_layout(compile, sig, arrays, params, out):
    """The result of a call through the variant for its arrays' layout, or NOTHING.
    `compile`: runtime.compile_without_variants (passed in: this module is runtime's;
    a variant's inputs come in the order it was made for)."""
    f = sig.owner()
    flags = getattr(f, "_layout_flags", None)
    if flags is None:
        return NOTHING
    movable = f._layout_movable
    if movable is None:
        movable = f._layout_movable = movable_inputs(f.program)
    orders = {pos: order for pos, a in enumerate(arrays)
              if pos in movable and (order := axis_order(a))}
    if not orders:
        return NOTHING
    layout = tuple(sorted(orders.items()))
    variant = _cached(compile, f, layout, orders, True, flags)
    if variant is FAILED:
        return NOTHING
    g, out_orders = variant
    moved = [a.transpose(orders[pos]) if pos in orders else a for pos, a in enumerate(arrays)]
    if out is not None:
        # an out= laid out as the following outputs would be is written through their
        # order (streaming); any other out= takes the variant whose outputs stay as written
        if len(out_orders) == 1 and out_orders[0] and out.__class__ is np.ndarray and \
                axis_order(out) == out_orders[0]:
            g(*moved, **params, out=out.transpose(out_orders[0]))
            return out
        variant = _cached(compile, f, layout, orders, False, flags)
        if variant is FAILED:
            return NOTHING
        return variant[0](*moved, **params, out=out)
    result = g(*moved, **params)
    if not any(out_orders):
        return result
    results = result if isinstance(result, tuple) else (result,)
    back = tuple(r if order is None else r.transpose(_inverse(order))
                 for r, order in zip(results, out_orders))
    return back if isinstance(result, tuple) else back[0]


class Retyped(Exception):
    """Raised by the call path's conversion of an input that a dtype variant takes
    (`retypes`): the call goes to `by_dtype`."""


def retypes(sig, pos, arr):
    """Whether input `pos` of a function with variants, given `arr` of another dtype,
    runs in the variant for its dtype (schedule/layouts.retyped) rather than as a
    converted copy (`_retypable`), at its second call of that dtype (a first call
    converts, as a call of some other dtype once would: no compile for it)."""
    f = sig.owner() if sig.owner is not None else None
    if f is None or f._layout_flags is None or not _retypable(f, pos, arr):
        return False
    seen = f._layout_variants.setdefault("dtypes seen", set())
    if (pos, arr.dtype) in seen:
        return True
    seen.add((pos, arr.dtype))
    return False


def _retypable(f, pos, arr):
    """A native ndarray of SMALL bytes or more whose dtype casts safely (exactly) to
    input `pos`'s, which is not a factor of a contraction (whose packed copies convert
    it anyway, and which a cast read would no longer be)."""
    t = f.program.inputs[pos]
    if arr.__class__ is not np.ndarray or arr.dtype == t.dtype or arr.nbytes < SMALL or \
            not arr.dtype.isnative or arr.dtype.kind not in "biuf" or \
            t.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, t.dtype, "safe"):
        return False
    if f._layout_movable is None:
        f._layout_movable = movable_inputs(f.program)
    return pos in f._layout_movable


def by_dtype(compile, sig, arrays, params, out):
    """The result of a call through the variant for its arrays' dtypes (`retypes`
    raised Retyped). A variant that does not compile leaves the call to the function as
    compiled, which converts its arrays."""
    f = sig.owner()
    program = f.program
    dtypes = {pos: a.dtype for pos, a in enumerate(arrays) if _retypable(f, pos, a)}
    key = ("dtypes", tuple(sorted((pos, dt.str) for pos, dt in dtypes.items())))
    variant = f._layout_variants.get(key)
    if variant is None:
        with _lock:
            variant = f._layout_variants.get(key)
            if variant is None:
                variant = f._layout_variants[key] = _retyped(compile, program, dtypes,
                                                             f._layout_flags)
    g = f._call if variant is FAILED else variant
    if variant is FAILED:
        arrays = [a.astype(program.inputs[pos].dtype) if pos in dtypes else a
                  for pos, a in enumerate(arrays)]
    return g(*arrays, **params) if out is None else g(*arrays, **params, out=out)


def _retyped(compile, program, dtypes, flags):
    """The compiled variant for inputs of `dtypes`, or FAILED with a warning."""
    try:
        return compile(retyped(program, dtypes), *flags)
    except Exception as err:        # noqa: BLE001 -- a variant is an optimization only
        warnings.warn(f"tex: {program.signature()}: no variant for the dtypes of this "
                      f"call's arrays ({type(err).__name__}: {err}); converting them",
                      RuntimeWarning, stacklevel=4)
        return FAILED


def _cached(compile, f, layout, orders, outputs_follow, flags):
    """f's variant for this layout (compiled on first need, once)."""
    key = (layout, outputs_follow)
    variant = f._layout_variants.get(key)
    if variant is None:
        with _lock:
            variant = f._layout_variants.get(key)
            if variant is None:
                variant = f._layout_variants[key] = _variant(compile, f.program, orders,
                                                             outputs_follow, flags)
    return variant


def _variant(compile, program, orders, outputs_follow, flags):
    """(the compiled variant, the axis order of each of its outputs or None), or FAILED
    with a warning: the calls of that layout then run the function as compiled, as they
    did before variants (slower, never wrong)."""
    try:
        rewritten, out_orders = permuted(program, orders, outputs_follow)
        g = compile(rewritten, *flags)
    except Exception as err:        # noqa: BLE001 -- a variant is an optimization only
        warnings.warn(f"tex: {program.signature()}: no variant for the layout of this "
                      f"call's arrays ({type(err).__name__}: {err}); running the kernel "
                      "compiled for row-major arrays", RuntimeWarning,
                      stacklevel=5)       # (_variant, _cached, by_layout, the call path)
        return FAILED
    return g, out_orders


def _inverse(order):
    inverse = [0] * len(order)
    for k, axis in enumerate(order):
        inverse[axis] = k
    return tuple(inverse)

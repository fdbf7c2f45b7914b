"""A kernel's non-zero status, on the call path's slow side: misaligned arrays and an
out= over an input retried on copies, a specialization's nest built and run, a Ctrl-C,
a failed bounds check, a buffer that could not be allocated."""
import ctypes

import numpy as np
import tex.symbolic as sym

from ...scheduler.primitives import show
from ...scheduler.target import overriding
from . import codegen, irtypes
from .bounds import BOUNDS_LOOPS
from .choices import call_values


def _status(sig, status, inputs, targets, params):
    """A non-zero kernel status: retry misaligned arrays with aligned copies, or raise
    the error the status stands for."""
    code, detail = status & 0xFF, status >> irtypes.STATUS_DETAIL_SHIFT
    if code == irtypes.STATUS_INTERRUPTED:
        # a SIGINT stopped the kernel (tex's handler chains to Python's): Python's
        # handler runs now; the default raises KeyboardInterrupt here. A handler that
        # does not raise (a program's own), or a call on a thread other than the main
        # one (where Python raises nothing), runs the kernel again: the signal was not
        # meant to end it
        ctypes.pythonapi.PyErr_CheckSignals()
        st = sig.cfunc(*inputs, *targets, *params)
        return _status(sig, st, inputs, targets, params) if st else None
    if code == irtypes.STATUS_OUT_OF_BOUNDS and sig.bounds is not None:
        raise IndexError(_bounds_message(sig, detail))
    if code == irtypes.STATUS_OVERLAP:
        # out= shares memory with an input: as if the inputs had been copied first
        shared = [any(np.may_share_memory(a, t) for t in targets) for a in inputs]
        shared = shared if any(shared) else [True] * len(inputs)   # (numpy saw none: all)
        ins = [_compact_copy(a) if s else a for a, s in zip(inputs, shared)]
        st = sig.cfunc(*ins, *targets, *params)
        return _status(sig, st, ins, targets, params) if st else None
    if code == irtypes.STATUS_DEFERRED:
        sig.build_choice(detail, inputs, params)
        st = sig.cfunc(*inputs, *targets, *params)
        return _status(sig, st, inputs, targets, params) if st else None
    if code in (irtypes.STATUS_NOMEM, irtypes.STATUS_TOO_LARGE):
        what = _describe_buffer(sig, detail - 1, inputs, params)
        if code == irtypes.STATUS_NOMEM:
            raise MemoryError(f"{sig.symbol}: could not allocate {what}")
        raise MemoryError(f"{sig.symbol}: {what} is larger than any machine's memory "
                          f"(more than 2**62 bytes)")
    if code != irtypes.STATUS_MISALIGNED:
        raise RuntimeError(f"{sig.symbol}: kernel returned status {status}")
    ins = [a if _element_aligned(a) else _compact_copy(a) for a in inputs]
    outs = [np.empty(t.shape, t.dtype) for t in targets]
    st = sig.cfunc(*ins, *outs, *params)
    if st & 0xFF == irtypes.STATUS_MISALIGNED:
        raise RuntimeError(f"{sig.symbol}: kernel returned status {st} on aligned copies")
    if st:
        _status(sig, st, ins, outs, params)    # raises, or ran a choice it had to build
    for t, o in zip(targets, outs):
        np.copyto(t, o)


def _element_aligned(a):
    """Data and strides in whole elements (what the kernel's entry checks of an input)."""
    size = a.dtype.itemsize
    return a.ctypes.data % size == 0 and all(st % size == 0 for st in a.strides)


def _compact_copy(a):
    """A copy of input `a` for a retry, its broadcast (stride-0) axes still broadcast: a
    copy of np.broadcast_to(x, (5000, 20000)) holds x, not 10^8 elements."""
    if 0 not in a.strides or a.size == 0:
        return np.array(a, copy=True)
    kept = tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)
    return np.broadcast_to(np.array(a[kept], copy=True), a.shape)


def _describe_buffer(sig, number, inputs, params):
    """`buffer C_part of shape (P, M, N) = (4, 100, 100), float32`: the intermediate
    buffer `number` (in codegen.kernel_buffers order) with its size at this call."""
    kernel = sig.kernel
    buffers = codegen.kernel_buffers(kernel)
    if not 0 <= number < len(buffers):
        return "an intermediate buffer"
    buf = buffers[number]
    values = call_values(kernel, inputs, params)
    shape = ", ".join(str(d) for d in buf.shape)
    try:
        sizes = ", ".join(str(sym.sympify(d).subs(values)) for d in buf.shape)
    except (TypeError, ValueError):
        sizes = "?"
    return f"buffer {buf.name} of shape ({shape}) = ({sizes}), {np.dtype(buf.dtype).name}"


def _bounds_message(sig, number):
    """The IndexError of a failed bounds check: the check (from the code generator,
    which numbers them deterministically) and the values the kernel recorded."""
    fast_math, address = sig.bounds
    built = sig.built           # (the build that ran: its kernel numbers the checks)
    with overriding(built.nests.target):
        check = codegen.bounds_checks(built.kernel, sig.symbol, fast_math,
                                      built.deferred)[number]
    record = (ctypes.c_int64 * (3 + BOUNDS_LOOPS)).from_address(address)
    value, dim, n = record[0], record[1], record[2]
    loops = ", ".join(f"{v.name}={x}" for v, x in zip(check.loops, record[3:3 + n]))
    where = f" (loops {loops})" if loops else ""
    return (f"{sig.symbol}: stage {check.stage}: tensor {check.buffer}, dimension "
            f"{check.axis} (size {check.dimension} = {dim}): index {show(check.index)} = "
            f"{value} is out of bounds{where}")

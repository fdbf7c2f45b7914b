"""The kernel's entry point, the function Python calls:

    i32 @k(ptr arr0, ..., i64 param0, ..., i64 threads)

It receives numpy array objects, reads their data pointers, shapes and strides from
numpy's array struct (no Python-side pointer extraction, which costs ~1 us an array),
checks that strides and data are aligned to the element size and that outputs have a
unit last stride (else it returns STATUS_MISALIGNED and Python retries on copies), that
no output's bytes overlap an input's (else STATUS_OVERLAP: Python retries on copies of
those inputs; a check of a few integer operations an array pair, where numpy's
may_share_memory costs ~0.3 us a pair on every call with `out=`), and calls the body
with the data pointers, element strides, sizes and parameters."""
import numpy as np
from llvmlite import ir

from .fastcall import FAST_SUFFIX
from .irtypes import I1, I8, I32, I64, PTR, STATUS_MISALIGNED, STATUS_OVERLAP

# numpy's PyArrayObject_fields: ob_refcnt, ob_type, data, nd, dimensions, strides
ARRAY_DATA, ARRAY_DIMS, ARRAY_STRIDES = 16, 32, 40


def emit_entry(module, name, kernel, body_fn):
    """Add `@name`, which calls `body_fn`, to `module`."""
    arrays = list(kernel.inputs) + list(kernel.outputs)
    fnty = ir.FunctionType(I32, [PTR] * len(arrays) + [I64] * (len(kernel.params) + 1))
    fn = ir.Function(module, fnty, name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    bad = fn.append_basic_block("misaligned")
    call_args, strides_args, ok = [], [], ir.Constant(I1, 1)
    dims, spans = {}, []
    for pos, buf in enumerate(arrays):
        obj = fn.args[pos]
        data = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_DATA)], source_etype=I8), typ=PTR)
        size = np.dtype(buf.dtype).itemsize
        addr = b.ptrtoint(data, I64)
        if size > 1:
            ok = b.and_(ok, b.icmp_unsigned("==", b.and_(addr, ir.Constant(I64, size - 1)),
                                            ir.Constant(I64, 0)))
        byte_strides = []
        call_args.append(data)
        if buf.ndim:
            dptr = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_DIMS)], source_etype=I8), typ=PTR)
            sptr = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_STRIDES)], source_etype=I8),
                          typ=PTR)
        for axis in range(buf.ndim):
            dims[pos, axis] = lambda dptr=dptr, axis=axis: b.load(
                b.gep(dptr, [ir.Constant(I64, axis)], source_etype=I64), typ=I64)
            st = b.load(b.gep(sptr, [ir.Constant(I64, axis)], source_etype=I64), typ=I64)
            byte_strides.append(st)
            if pos >= len(kernel.inputs) and axis == buf.ndim - 1:
                # outputs are written along their last axis with unit stride (the
                # body assumes it); another view is retried on a contiguous copy.
                # The stride does not matter when the axis has one element or the
                # array none (numpy gives empty arrays zero strides).
                unit = b.icmp_signed("==", st, ir.Constant(I64, size))
                for d in range(buf.ndim):
                    n = dims[pos, d]()
                    few = ir.Constant(I64, 1 if d == axis else 0)
                    unit = b.or_(unit, b.icmp_signed("<=", n, few))
                ok = b.and_(ok, unit)
            if size > 1:
                rem = b.srem(st, ir.Constant(I64, size))
                ok = b.and_(ok, b.icmp_signed("==", rem, ir.Constant(I64, 0)))
                st = b.sdiv(st, ir.Constant(I64, size))
            strides_args.append(st)
        spans.append(_byte_span(b, addr, [dims[pos, axis]() for axis in range(buf.ndim)],
                                byte_strides, size))
    size_args = [dims[kernel.bindings[s]]() for s in kernel.sizes]
    param_args = list(fn.args[len(arrays):])
    aligned = fn.append_basic_block("aligned")
    b.cbranch(ok, aligned, bad)
    b.position_at_end(bad)
    b.ret(ir.Constant(I32, STATUS_MISALIGNED))
    b.position_at_end(aligned)
    n_in, overlap = len(kernel.inputs), None
    for out in spans[n_in:]:
        for inp in spans[:n_in]:
            pair = _overlaps(b, out, inp)
            overlap = pair if overlap is None else b.or_(overlap, pair)
    if overlap is None:                                  # (no inputs)
        overlap = ir.Constant(I1, 0)
    good, shared = fn.append_basic_block("call"), fn.append_basic_block("overlap")
    b.cbranch(overlap, shared, good)
    b.position_at_end(shared)
    b.ret(ir.Constant(I32, STATUS_OVERLAP))
    b.position_at_end(good)
    status = b.call(body_fn, call_args + strides_args + size_args + param_args)
    b.ret(status)
    _emit_fastcall(module, name, fn, len(arrays), len(param_args))


# the CPython C API the fast entry calls (resolved in this process: fastcall.py)
PYTHON_API = {
    "PyEval_SaveThread": ir.FunctionType(PTR, []),
    "PyEval_RestoreThread": ir.FunctionType(ir.VoidType(), [PTR]),
    "PyLong_AsLongLong": ir.FunctionType(I64, [PTR]),
    "PyLong_FromLong": ir.FunctionType(PTR, [I64]),
    "PyErr_Occurred": ir.FunctionType(PTR, []),
    "PyErr_BadArgument": ir.FunctionType(I32, []),
}


def _emit_fastcall(module, name, entry, n_arrays, n_ints):
    """`@name.fast`, the same entry as a CPython METH_FASTCALL function
    (`PyObject *f(PyObject *self, PyObject *const *args, Py_ssize_t nargs)`): the arrays
    and the integers as Python objects, the GIL released around the kernel (as ctypes
    released it), the status returned as a Python int: fastcall.py makes it the builtin
    function the call paths call (why: its docstring)."""
    api = {n: module.globals.get(n) or ir.Function(module, t, name=n)
           for n, t in PYTHON_API.items()}
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), name=name + FAST_SUFFIX)
    _, args, nargs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    call, refuse = fn.append_basic_block("call"), fn.append_basic_block("refuse")
    b.cbranch(b.icmp_signed("==", nargs, ir.Constant(I64, n_arrays + n_ints)), call, refuse)
    b.position_at_end(refuse)                # (the call paths always pass them all)
    b.call(api["PyErr_BadArgument"], [])
    b.ret(ir.Constant(PTR, None))
    b.position_at_end(call)
    values = [b.load(b.gep(args, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
              for k in range(n_arrays + n_ints)]
    ints = []
    for obj in values[n_arrays:]:
        v = b.call(api["PyLong_AsLongLong"], [obj])
        ok, maybe = fn.append_basic_block("int.ok"), fn.append_basic_block("int.minus1")
        b.cbranch(b.icmp_signed("==", v, ir.Constant(I64, -1)), maybe, ok)
        b.position_at_end(maybe)             # -1, or the error's -1 (an exception set)
        error = fn.append_basic_block("int.error")
        b.cbranch(b.icmp_unsigned("!=", b.call(api["PyErr_Occurred"], []),
                                  ir.Constant(PTR, None)), error, ok)
        b.position_at_end(error)
        b.ret(ir.Constant(PTR, None))
        b.position_at_end(ok)
        ints.append(v)
    state = b.call(api["PyEval_SaveThread"], [])
    status = b.call(entry, values[:n_arrays] + ints)
    b.call(api["PyEval_RestoreThread"], [state])
    b.ret(b.call(api["PyLong_FromLong"], [b.sext(status, I64)]))


def _byte_span(b, addr, extents, byte_strides, itemsize):
    """(first byte, one past the last byte, whether any element: None for a 0-d array)
    of an array view: each axis moves the span by (n - 1) * stride, down for a negative
    stride."""
    lo, hi, nonempty = addr, b.add(addr, ir.Constant(I64, itemsize)), None
    zero = ir.Constant(I64, 0)
    for n, st in zip(extents, byte_strides):
        some = b.icmp_signed(">", n, zero)
        nonempty = some if nonempty is None else b.and_(nonempty, some)
        reach = b.mul(b.sub(n, ir.Constant(I64, 1)), st)
        down = b.icmp_signed("<", reach, zero)
        lo = b.add(lo, b.select(down, reach, zero))
        hi = b.add(hi, b.select(down, zero, reach))
    return lo, hi, nonempty


def _overlaps(b, one, other):
    """Whether two byte spans share a byte (neither empty; None: a 0-d array's one)."""
    (lo1, hi1, any1), (lo2, hi2, any2) = one, other
    meet = b.and_(b.icmp_unsigned("<", lo1, hi2), b.icmp_unsigned("<", lo2, hi1))
    for nonempty in (any1, any2):
        if nonempty is not None:
            meet = b.and_(meet, nonempty)
    return meet

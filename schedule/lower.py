"""Lowering: a Program becomes its default (unscheduled) loop nest.

Each definition becomes one Stage. An elementwise definition is a perfect nest over
its output indices with one Store. A reduction keeps a scalar accumulator:

    for i in 0..M:
      acc = identity
      for k in 0..K:
        acc = combine(acc, body)
      C[i] = acc

Every stage gets fresh loop variables (one Index per definition index) so that
stages never share a variable; `Lowered.loop_vars[definition][index]` finds them.
"""
from dataclasses import dataclass

import numpy as np
import sympy as sp

from tex.expr import Access, Const, Index, IndexValue, cast, rebuild, with_children
from tex.program import Program, as_program

from .ir import ArgTarget, Buffer, Kernel, Loop, Scope, Stage, Store, Update


def identity(combiner, dtype):
    """The value a reduction starts from: the combiner's identity element."""
    dtype = np.dtype(dtype)
    if combiner == "sum":
        return Const(0, dtype)
    if combiner == "prod":
        return Const(1, dtype)
    big = combiner in ("min", "argmin")
    if dtype.kind == "f":
        return Const(np.inf if big else -np.inf, dtype)
    if dtype.kind == "b":
        return Const(big, dtype)
    info = np.iinfo(dtype)
    return Const(info.max if big else info.min, dtype)


@dataclass(frozen=True, eq=False)
class Lowered:
    kernel: Kernel
    program: Program
    buffers: dict           # tensor -> Buffer
    loop_vars: dict         # definition -> {Index: loop variable}


def lower(outputs):
    """Program (or output definitions) -> Lowered default loop nest."""
    program = as_program(outputs)
    buffers = {}
    for pos, t in enumerate(program.inputs):
        buffers[t] = Buffer(t.name, t.shape, t.dtype, Scope.INPUT)
    for d in program.definitions:
        scope = Scope.OUTPUT if d in program.outputs else Scope.TEMP
        buffers[d] = Buffer(d.name, d.shape, d.dtype, scope)
    stages, loop_vars = [], {}
    for d in program.definitions:
        stage, loop_vars[d] = lower_definition(d, buffers)
        stages.append(stage)
    kernel = Kernel(body=tuple(stages),
                    inputs=tuple(buffers[t] for t in program.inputs),
                    outputs=tuple(buffers[d] for d in program.outputs),
                    sizes=program.sizes, params=program.params,
                    bindings=program.size_bindings())
    return Lowered(kernel, program, buffers, loop_vars)


def lower_definition(d, buffers):
    """One definition -> (Stage, {Index: loop var})."""
    fresh = {x: Index(x.name) for x in d.extents}
    subst = dict(fresh)

    def retarget(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access):
            return Access(buffers[node.tensor], [sp.sympify(ix).xreplace(subst)
                                                 for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(subst))
        return node

    out_buf = buffers[d]
    out_index = tuple(fresh[x] for x in d.indices)
    red = d.reduction
    if red is None:
        body = (Store(out_buf, out_index, rebuild(d.expr, retarget)),)
    else:
        value = rebuild(red.body, retarget)
        body = _reduction_body(d, red, value, fresh, out_buf, out_index)
    for x in reversed(d.indices):
        body = (Loop(fresh[x], d.extents[x], body),)
    return Stage(d, body), fresh


def _reduction_body(d, red, value, fresh, out_buf, out_index):
    over = [fresh[x] for x in red.over]
    acc_dtype = red.dtype if red.combiner not in ("argmax", "argmin") else value.dtype
    acc = Buffer(f"{d.name}_acc", (), acc_dtype, Scope.LOCAL)
    init = [Store(acc, (), identity(red.combiner, acc_dtype))]
    arg = None
    if red.combiner in ("argmax", "argmin"):
        pos_buf = Buffer(f"{d.name}_pos", (), np.dtype("int64"), Scope.LOCAL)
        position = sp.Integer(0)
        for x in red.over:                 # row-major position over the reduced indices
            position = position * d.extents[x] + fresh[x]
        arg = ArgTarget(pos_buf, (), IndexValue(position))
        init.append(Store(pos_buf, (), Const(0, "int64")))
        result = Access(pos_buf, ())
    else:
        if value.dtype != acc_dtype:
            value = cast(value, acc_dtype)
        result = Access(acc, ())
    inner = (Update(acc, (), red.combiner, value, red.fast_math, arg),)
    for x in reversed(red.over):
        inner = (Loop(fresh[x], d.extents[x], inner, reduction=True),)
    return tuple(init) + inner + (Store(out_buf, out_index, result),)

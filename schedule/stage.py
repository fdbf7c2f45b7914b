"""A stage's schedule as data, and its lowering to loops (Halide's approach).

A `StageState` records, for one definition, its current loops (outermost first), how
each original index is rebuilt from them (`i = io*64 + ii` after a split), and the
guards that tails need. Primitives are pure functions `StageState -> StageState`
(schedule/primitives.py); `lower_stage` turns the final state into a Stage of the
loop-nest IR. Keeping the state, not the nest, is what lets a reduction move inside
or outside output loops freely: lowering places the accumulator's initialisation and
write-back around the outermost reduction loop, and gives the accumulator one
dimension for every output loop nested inside it:

    for i in 0..M:                        order (i, k, j) of C = sum_k A[i,k] * B[k,j]
      for j in 0..N:
        C[i, j] = 0.0
      for k in 0..K:  # reduction
        for j in 0..N:
          C[i, j] += A[i, k] * B[k, j]
"""
from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from tex.expr import Access, Const, Index, IndexValue, cast, rebuild, with_children

from .ir import ArgTarget, Buffer, Guard, Loop, LoopKind, Scope, Stage, Store, Update


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
class Axis:
    """One loop of a stage: a unique variable, its extent, whether it reduces, its kind."""
    var: Index
    extent: sp.Expr
    reduction: bool
    kind: LoopKind = LoopKind.SERIAL
    tail: str = "peel"          # for a vector loop: "peel" or "mask"

    @property
    def name(self):
        return self.var.name


@dataclass(frozen=True, eq=False)
class StageState:
    definition: object
    axes: tuple                 # current loops, outermost first
    subst: dict                 # original Index -> expression in loop variables
    guards: tuple = ()          # conditions every statement of the stage needs
    fast_math: bool = True
    private: Index = None       # a reduction loop whose partial results are kept apart

    def axis(self, var):
        for a in self.axes:
            if a.var is var:
                return a
        return None

    def with_axes(self, axes, **changes):
        return replace(self, axes=tuple(axes), **changes)

    @property
    def reduction(self):
        return self.definition.reduction


def initial_state(defn, fast_math=True):
    """The default order: output indices, then reduced indices, each over its extent."""
    fresh = {x: Index(x.name) for x in defn.extents}
    red = defn.reduction
    over = red.over if red is not None else ()
    axes = [Axis(fresh[x], defn.extents[x], False) for x in defn.indices]
    axes += [Axis(fresh[x], defn.extents[x], True) for x in over]
    subst = {x: fresh[x] for x in defn.extents}
    fm = fast_math and (red.fast_math if red is not None else True)
    return StageState(defn, tuple(axes), subst, (), fm)


def _retarget(expr, buffers, subst):
    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access):
            return Access(buffers[node.tensor], [sp.sympify(ix).xreplace(subst)
                                                 for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(subst))
        return node
    return rebuild(expr, fn)


def _nest(axes, body, guards=()):
    body = tuple(body)
    if guards:
        cond = sp.And(*guards)
        if cond is not sp.true:
            body = (Guard(cond, body),)
    for a in reversed(axes):
        body = (Loop(a.var, a.extent, body, a.kind, reduction=a.reduction, tail=a.tail),)
    return body


def _guards_for(state, axes):
    """The guards that mention only the loop variables of `axes`."""
    allowed = {a.var for a in axes}
    loop_vars = set(state_vars(state))
    return [g for g in state.guards if (g.free_symbols & loop_vars) <= allowed]


def state_vars(state):
    return [a.var for a in state.axes]


def lower_stage(state, buffers):
    """StageState -> Stage (loop-nest IR)."""
    d = state.definition
    out_buf = buffers[d]
    out_index = tuple(state.subst[x] for x in d.indices)
    red = d.reduction
    if red is None:
        value = _retarget(d.expr, buffers, state.subst)
        return Stage(d, _nest(state.axes, [Store(out_buf, out_index, value)], state.guards))
    value = _retarget(red.body, buffers, state.subst)
    if state.private is None:
        return Stage(d, _reduction_nest(state, value, out_buf, out_index))
    return Stage(d, _privatized(state, value, out_buf, out_index))


def _privatized(state, value, out_buf, out_index):
    """The reduction into private partials `part[p, out...]`, then their merge:

        for p in 0..P:                     for i in 0..M:
          part[p, i] = reduce(...)    ->     acc = identity
                                             for p in 0..P: acc = combine(acc, part[p, i])
                                             C[i] = acc
    """
    d, red = state.definition, state.definition.reduction
    p_axis = state.axis(state.private)
    arg = red.combiner in ("argmax", "argmin")
    at_zero = {v: 0 for v in state_vars(state)}
    parts = sp.sympify(p_axis.extent).xreplace(at_zero)
    part_dtype = value.dtype if arg else red.dtype
    part = Buffer(f"{d.name}_part", (parts,) + out_buf.shape, part_dtype, Scope.TEMP)
    part_pos = Buffer(f"{d.name}_part_pos", part.shape, np.dtype("int64"), Scope.TEMP) \
        if arg else None
    p = state.private
    partial = _reduction_nest(state, value, part_pos if arg else part, (p,) + out_index,
                              values_to=part if arg else None)
    # the merge: one serial pass over the partials for every output element (no atomics)
    fresh = [Index(x.name) for x in d.indices]
    q = Index(p.name)
    merged_value = Access(part, (q, *fresh))
    target = None
    acc = Buffer(f"{d.name}_acc", (), part_dtype, Scope.LOCAL)
    body = [Store(acc, (), identity(red.combiner, part_dtype))]
    if arg:
        pos = Buffer(f"{d.name}_pos", (), np.dtype("int64"), Scope.LOCAL)
        target = ArgTarget(pos, (), Access(part_pos, (q, *fresh)))
        body.append(Store(pos, (), Const(0, "int64")))
    body.append(Loop(q, parts, (Update(acc, (), red.combiner, merged_value, state.fast_math,
                                       target),), reduction=True))
    body.append(Store(out_buf, tuple(fresh), Access(target.buffer if arg else acc, ())))
    extents = [d.extents[x] for x in d.indices]
    merge = tuple(body)
    for n in reversed(range(len(fresh))):
        kind = LoopKind.PARALLEL if n == 0 else LoopKind.SERIAL
        merge = (Loop(fresh[n], extents[n], merge, kind),)
    return partial + merge


def _reduction_nest(state, value, out_buf, out_index, values_to=None):
    """The loops of a reduction writing `out_buf[out_index]` (the position, for argmax;
    `values_to` then receives the best values too). The accumulator is initialised and
    written back around the outermost reduction loop, with a dimension for every output
    loop inside it -- or is the output itself when the types agree."""
    d, red = state.definition, state.definition.reduction
    private = state.private
    reducing = [a.reduction and a.var is not private for a in state.axes]
    first_red = reducing.index(True) if True in reducing else len(state.axes)
    outer, inner = state.axes[:first_red], state.axes[first_red:]
    inner_out = [a for a, r in zip(state.axes[first_red:], reducing[first_red:]) if not r]
    arg = red.combiner in ("argmax", "argmin")
    acc_dtype = value.dtype if arg else red.dtype
    if not arg and value.dtype != acc_dtype:
        value = cast(value, acc_dtype)
    if inner_out and not arg and acc_dtype == out_buf.dtype:
        acc, acc_index = out_buf, out_index          # accumulate in the output itself
    else:
        # extents that shrink in a tail (Min(T, E - o*T)) are largest at o = 0
        at_zero = {v: 0 for v in state_vars(state)}
        shape = tuple(sp.sympify(a.extent).xreplace(at_zero) for a in inner_out)
        acc = Buffer(f"{d.name}_acc", shape, acc_dtype, Scope.LOCAL)
        acc_index = tuple(a.var for a in inner_out)
    init = [Store(acc, acc_index, identity(red.combiner, acc_dtype))]
    target = None
    if arg:
        pos = Buffer(f"{d.name}_pos", acc.shape, np.dtype("int64"), Scope.LOCAL)
        position = sp.Integer(0)
        for x in red.over:
            position = position * d.extents[x] + state.subst[x]
        target = ArgTarget(pos, acc_index, IndexValue(position))
        init.append(Store(pos, acc_index, Const(0, "int64")))
    update = Update(acc, acc_index, red.combiner, value, state.fast_math, target)
    inner_axes = [Axis(a.var, a.extent, r, a.kind, a.tail)
                  for a, r in zip(inner, reducing[first_red:])]
    body = []
    out_guards = _guards_for(state, outer + tuple(inner_out))
    body += _nest(inner_out, init, out_guards)
    body += _nest(inner_axes, [update], state.guards)
    if acc is not out_buf:
        result = Access(target.buffer if arg else acc, acc_index)
        writes = [Store(out_buf, out_index, result)]
        if values_to is not None:
            writes.append(Store(values_to, out_index, Access(acc, acc_index)))
        body += _nest(inner_out, writes, out_guards)
    outer_axes = [Axis(a.var, a.extent, False, a.kind, a.tail) for a in outer]
    return _nest(outer_axes, body)

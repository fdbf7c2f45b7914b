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
import enum
from dataclasses import replace

import numpy as np
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import (Access, Const, Index, IndexValue, all_of, any_of, cast, negation, rebuild,
                      with_children)
from tex.records import record

from .epilogue import identity, statements
from .region import upper_bound
from .vector_plan import affine_coefficient
from .ir import (Allocate, ArgTarget, Buffer, Guard, Loop, LoopKind, Scope, Stage, Store,
                 Update, VectorTail, map_nest, walk)
from .writeback import (columns_outermost, first_block, fold_lanes, reduces_in_lanes, reading,
                        rows_rolled, stores_across_lanes, substituted)


# an accumulator tile this small (a few vector registers) is kept in a local array that
# LLVM promotes to registers, instead of accumulating in the output's memory
REGISTER_TILE_BYTES = 2048


class Layout(enum.Enum):
    """How `pack` lays out its copy of a tensor."""
    BOX = "box"         # the box the loops below read, in the tensor's dimension order
    LOOPS = "loops"     # one dimension per loop below, in loop order (BLIS micro-panels)


@record(eq=False)
class Axis:
    """One loop of a stage: a unique variable, its extent, whether it reduces, its kind."""
    var: Index
    extent: sym.Expr
    reduction: bool
    kind: LoopKind = LoopKind.SERIAL
    tail: VectorTail = VectorTail.PEEL     # for a vector loop

    @property
    def name(self):
        return self.var.name


@record(eq=False)
class StageState:
    definition: object
    axes: tuple                 # current loops, outermost first
    subst: dict                 # original Index -> expression in loop variables
    guards: tuple = ()          # conditions every statement of the stage needs
    fast_math: bool = True
    private: Index = None       # a reduction loop whose partial results are kept apart
    packs: tuple = ()           # (tensor, loop var): copy the tile read below the loop
    hosted: tuple = ()          # (producer definition, loop var): computed below the loop
    epilogue: object = None     # consumers run where an element is final (epilogue.py)

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
            return Access(buffers[node.tensor], [sym.sympify(ix).xreplace(subst)
                                                 for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(subst))
        return node
    return rebuild(expr, fn)


def _nest(axes, body, guards=()):
    body = tuple(body)
    if guards:
        cond = all_of(*guards)
        if cond is not sym.true:
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


def lower_stage(state, buffers, states=None):
    """StageState -> Stage (loop-nest IR). `states` holds the producers' states, for
    definitions computed inside this stage (compute_at / fuse)."""
    d = state.definition
    out_buf = buffers[d]
    out_index = tuple(state.subst[x] for x in d.indices)
    red = d.reduction
    value = _retarget(d.element, buffers, state.subst)
    value, inserts, padded = _local_tiles(state, value, buffers, states or {})
    if red is None:
        body = _nest(state.axes, _finish(state, out_buf, out_index, value), state.guards)
    elif state.private is None:
        body = _reduction_nest(state, value, out_buf, out_index, padded=padded)
    else:
        body = _privatized(state, value, out_buf, out_index, padded)
    for at, local, stmts in inserts:
        body = tuple(map_nest(s, _insert_at(at, local, stmts)) for s in body)
    return Stage(d, body)


def _local_tiles(state, value, buffers, states):
    """Packed copies and producers computed in place: (rewritten value, inserts, padded),
    each insert (loop var, local buffer, statements to run at the top of that loop);
    `padded` holds the copies that any iteration of the loops may read (zero-padded)."""
    from .region import read_box, rewrite_reads
    inserts, padded = [], set()
    loop_vars = state_vars(state)
    extents = {a.var: a.extent for a in state.axes}
    for tensor, at, kind in [(t, v, layout) for t, v, layout in state.packs] + \
                            [(t, v, "local") for t, v in state.hosted]:
        position = loop_vars.index(at)
        inner = set(loop_vars[position + 1:])
        buf = buffers[tensor]
        if kind is Layout.LOOPS:
            local, stmts, value = _panel_copy(state, value, buf, state.axes[position + 1:])
            inserts.append((at, local, stmts))
            padded.add(local)
            continue
        prim = "pack" if kind is Layout.BOX else "compute_at"
        box = read_box(prim, state.definition.name, value, buf, inner, extents, loop_vars)
        local = Buffer(f"{tensor.name}_{'pack' if kind is Layout.BOX else kind}", box.size,
                       buf.dtype, _local_scope(box.size, buf.dtype))
        if kind is Layout.BOX:
            fresh = [Index(f"{tensor.name}_p{n}") for n in range(buf.ndim)]
            src = Access(buf, [st + e for st, e in zip(box.start, fresh)])
            stmts = _nest([Axis(e, x, False) for e, x in zip(fresh, box.extent)],
                          [Store(local, tuple(fresh), src)])
        else:
            stmts = _producer_over_box(states[tensor], box, local, buffers)
        value = rewrite_reads(value, buf, local, box)
        inserts.append((at, local, stmts))
    return value, inserts, padded


def _local_scope(shape, dtype):
    """A copy of constant size up to 64 KiB lives on the stack, a larger one on the heap."""
    small = all(sym.sympify(z).is_Integer for z in shape) and \
        int(np.prod([int(z) for z in shape])) * np.dtype(dtype).itemsize <= 64 * 1024
    return Scope.LOCAL if small else Scope.TEMP


def _never_negative(ix):
    """An index that is a sum of loop variables with non-negative constant coefficients
    and a non-negative constant."""
    terms = sym.Add.make_args(sym.expand(ix))
    for t in terms:
        coeff, rest = t.as_coeff_Mul()
        if coeff < 0 or not (rest == 1 or isinstance(rest, Index) or
                             (rest.is_Symbol and rest.is_nonnegative)):
            return False
    return True


def _panel_copy(state, value, buf, inner_axes):
    """pack(layout="loops"): (local buffer, copy statements, value reading the copy).
    The copy has a dimension for each loop of `inner_axes` that the read of `buf` uses,
    in loop order, as long as the loop's largest extent; it is filled over the loops'
    extents, with zeros where the read falls outside `buf` (a guarded tail), so every
    iteration of the loops -- guarded or not -- reads initialised memory."""
    from tex.expr import walk as walk_expr
    name = state.definition.name
    reads = []
    for node in walk_expr(value):
        if isinstance(node, Access) and node.tensor is buf and not any(
                all(sym.expand(a - b) == 0 for a, b in zip(node.index, r.index)) for r in reads):
            reads.append(node)
    if len(reads) != 1:
        raise ScheduleError(f"pack: in stage {name}, {buf.name} is read at {len(reads)} "
                            "different indices below the loop; layout='loops' copies one read")
    read = reads[0]
    used = set().union(*(sym.sympify(ix).free_symbols for ix in read.index))
    dims = [a for a in inner_axes if a.var in used]
    others = {a.var for a in inner_axes} - {a.var for a in dims}
    for a in dims:
        if sym.sympify(a.extent).free_symbols & others:
            raise ScheduleError(f"pack: in stage {name}, loop {a.name} (read by {buf.name}) "
                                "has an extent that depends on a loop the read does not use")
    loop_vars = state_vars(state)
    shape = tuple(upper_bound(a.extent, loop_vars) for a in dims)
    local = Buffer(f"{buf.name}_pack", shape, buf.dtype, _local_scope(shape, buf.dtype))
    where = tuple(a.var for a in dims)
    fresh = {v: Index(v.name) for v in where}      # the copy's own loop variables
    src = Access(buf, [sym.sympify(ix).xreplace(fresh) for ix in read.index])
    # Only a dimension whose index moves with a guarded loop (a guard-tailed split runs
    # past the tensor) can leave it: every other iteration is one of the definition's
    # own, which stay inside. Built unevaluated: sympy's assumption queries on every
    # relation cost more than the rest of the schedule.
    guarded = set().union(*(g.free_symbols for g in state.guards)) & set(state_vars(state))
    bounds = []
    for ix, sx, n in zip(src.index, read.index, buf.shape):
        if not sym.sympify(sx).free_symbols & guarded:
            continue
        if not _never_negative(ix):
            bounds.append(sym.GreaterThan(ix, 0, evaluate=False))
        bounds.append(sym.StrictLessThan(ix, n, evaluate=False))
    inside = all_of(*bounds)
    dst = tuple(fresh[v] for v in where)
    stores = [Guard(inside, (Store(local, dst, src),))] if bounds else [Store(local, dst, src)]
    if bounds:
        outside = any_of(*[negation(c) for c in bounds])
        stores.append(Guard(outside, (Store(local, dst, Const(0, buf.dtype)),)))
    dims = _streaming_order(dims, read.index, buf)
    # the innermost copy loop is a vector loop when the stage's own loop is the
    # innermost one and a vector (B's panel rows); straight-line unrolled loops stay so
    kinds = [a.kind if a.kind is LoopKind.UNROLLED else LoopKind.SERIAL for a in dims]
    if dims and dims[-1] is inner_axes[-1] and dims[-1].kind is LoopKind.VECTOR:
        kinds[-1] = LoopKind.VECTOR
    # where the loops the copy serves run on threads (B's panel, copied before the
    # parallel loop over A's blocks), the threads copy it too: a serial copy of a 4 MiB
    # panel held 1024^3 on two threads to 0.68x numpy
    if kinds and kinds[0] is LoopKind.SERIAL and \
            any(a.kind is LoopKind.PARALLEL for a in inner_axes):
        kinds[0] = LoopKind.PARALLEL
    copy_axes = [Axis(fresh[a.var], sym.sympify(a.extent).xreplace(fresh), False, k, VectorTail.MASK)
                 for a, k in zip(dims, kinds)]
    stmts = _nest(copy_axes, stores)

    def reread(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor is buf:
            return Access(local, where)
        return node
    return local, stmts, rebuild(value, reread)


def _streaming_order(dims, index, buf):
    """The panel copy's loops (`dims`, in the panel's order), with the loop that steps
    over the source's rows moved outermost when the innermost loop reads less than a
    cache line of each row: A's panel of a `ki,kj` product (A_pack[ir, k, ii] =
    A[k, ir*MR + ii]) then reads each row of A once, MR x ir_count contiguous elements,
    instead of MR elements of every row in turn for each ir, a TLB miss per element run
    at long K (4096 x 2048 A @ x 64, 1 thread: 28.8 -> 24.7 ms in-process; the `ik,kj`
    product takes 7 ms)."""
    if len(dims) < 3 or not sym.sympify(dims[-1].extent).is_Integer:
        return dims
    row_strides = [sym.Mul(*buf.shape[d + 1:]) for d in range(len(buf.shape))]

    def stride(axis):
        terms = [affine_coefficient(ix, axis.var) for ix in index]
        if any(c is None for c in terms):
            return None
        return sym.expand(sum(c * r for c, r in zip(terms, row_strides)))
    inner = stride(dims[-1])
    if inner != 1 or int(dims[-1].extent) * np.dtype(buf.dtype).itemsize >= 64:
        return dims
    across = [a for a in dims[1:-1] if (st := stride(a)) is not None and
              not st.is_Number and not st.free_symbols & {d.var for d in dims}]
    if len(across) != 1:
        return dims
    row = across[0]
    others = {a.var for a in dims if a is not row}
    if sym.sympify(row.extent).free_symbols & others or any(
            row.var in sym.sympify(a.extent).free_symbols for a in dims):
        return dims
    return [row] + [a for a in dims if a is not row]


def _producer_over_box(pstate, box, local, buffers):
    """A producer's loop nest restricted to a box of its output, writing `local`."""
    d = pstate.definition
    fresh = {x: Index(x.name) for x in d.extents}
    e_vars = [fresh[x] for x in d.indices]
    subst = {x: st + fresh[x] for x, st in zip(d.indices, box.start)}
    subst.update({x: fresh[x] for x in d.extents if x not in d.indices})
    axes = [Axis(fresh[x], ext, False) for x, ext in zip(d.indices, box.extent)]
    red = d.reduction
    if red is not None:
        axes += [Axis(fresh[x], d.extents[x], True) for x in red.over]
    state = StageState(d, tuple(axes), subst, (), pstate.fast_math)
    if red is not None and d.indices:
        from .order import prefers_reduction_outside
        if prefers_reduction_outside(d):
            last = state.axes[len(d.indices) - 1]
            state = state.with_axes([a for a in state.axes if a is not last] + [last])
    value = _retarget(d.element, buffers, subst)
    if red is None:
        return _nest(state.axes, [Store(local, tuple(e_vars), value)])
    return _reduction_nest(state, value, local, tuple(e_vars))


def _insert_at(at, local, stmts):
    def fn(node):
        if isinstance(node, Loop) and node.var is at and _reads(node, local):
            return node.replace(body=(Allocate(local, tuple(stmts) + tuple(node.body)),))
        return node
    return fn


def _reads(node, buf):
    from tex.expr import walk as walk_expr
    for n in walk(node):
        values = [n.value] if isinstance(n, (Store, Update)) else []
        if isinstance(n, Update) and n.arg is not None:
            values.append(n.arg.position)
        for v in values:
            if any(isinstance(a, Access) and a.tensor is buf for a in walk_expr(v)):
                return True
    return False


def _privatized(state, value, out_buf, out_index, padded=frozenset()):
    """The reduction into private partials, then their merge. When every output loop is
    outside the reduction loops, the partials are a small local array per output
    element, merged right after the reduction loops (with the private loop vectorized,
    this is the vector-accumulator strategy):

        for i in 0..M:
          part[0..W] = identity
          for jo: for ji: part[ji] = combine(part[ji], X[i, jo*W + ji])
          acc = identity; for q in 0..W: acc = combine(acc, part[q]); S[i] = acc

    Otherwise (split-K) the partials are a buffer `part[p, out...]` and the merge is a
    nest of its own after the stage:

        for p in 0..P:                     for i in 0..M:
          part[p, i] = reduce(...)    ->     acc = identity
                                             for p in 0..P: acc = combine(acc, part[p, i])
                                             C[i] = acc
    The merge is one serial pass for every output element: deterministic, no atomics.
    """
    d, red = state.definition, state.definition.reduction
    p = state.private
    arg = COMBINERS[red.combiner].positional
    parts = upper_bound(state.axis(p).extent, state_vars(state))
    part_dtype = value.dtype if arg else red.dtype
    first_red = next((n for n, a in enumerate(state.axes) if a.reduction and a.var is not p),
                     len(state.axes))
    p_pos = state_vars(state).index(p)
    start = min(first_red, p_pos)
    local = all(a.reduction for a in state.axes[start:])   # no output loop inside them
    shape = (parts,) if local else (parts,) + out_buf.shape
    scope = Scope.LOCAL if local else Scope.TEMP
    # with one part (a call-time part count of 1), the partial is the output itself
    alias = out_buf if not local and not arg and part_dtype == out_buf.dtype and \
        state.epilogue is None else None
    part = Buffer(f"{d.name}_part", shape, part_dtype, scope, alias)
    part_pos = Buffer(f"{d.name}_part_pos", shape, np.dtype("int64"), scope) if arg else None
    part_index = (p,) if local else (p,) + out_index
    q = Index(p.name)
    merge_index = out_index if local else tuple(Index(x.name) for x in d.indices)
    merge = _merge(state, part, part_pos, (q,) if local else (q, *merge_index), q, parts,
                   out_buf, merge_index)
    if local:
        guards = _guards_for(state, state.axes[:start])
        if guards:
            merge = (Guard(all_of(*guards), merge),)
        return _reduction_nest(state, value, part_pos if arg else part, part_index,
                               values_to=part if arg else None, after=merge, split_at=start,
                               final=False)
    partial = _reduction_nest(state, value, part_pos if arg else part, part_index,
                              values_to=part if arg else None, padded=padded, final=False)
    extents = [d.extents[x] for x in d.indices]
    for n in reversed(range(len(merge_index))):
        kind = LoopKind.PARALLEL if n == 0 else LoopKind.SERIAL
        merge = (Loop(merge_index[n], extents[n], merge, kind),)
    if alias is not None:            # one part is the output; none still writes it
        not_one = sym.Ne(parts, 1)
        merge = () if not_one is sym.false else \
            merge if not_one is sym.true else (Guard(not_one, merge),)
    return partial + merge


def _finish(state, out_buf, out_index, result, at=None, lanes=None):
    """The statements that write a final element of the stage's definition: its store,
    or its fused consumers' epilogue (`at`: the definition's indices there, default the
    stage's loops; `lanes`: the vector loop around them, (var, width), if any)."""
    epi = state.epilogue
    if epi is None:
        return [Store(out_buf, tuple(out_index), result)]
    d = state.definition
    at = at if at is not None else {x: state.subst[x] for x in d.indices}
    stores = [Store(out_buf, tuple(out_index), result)] if epi.store_root else []
    return stores + statements(epi, at, result, state.fast_math, lanes)


def _accumulates_in_memory(state, why):
    """Refuse an epilogue on a nest where no point sees a final element."""
    if state.epilogue is not None:
        d = state.definition
        over = ", ".join(x.name for x in d.reduction.over)
        names = ", ".join(f.definition.name for f in state.epilogue.members)
        raise ScheduleError(
            f"fuse: {d.name} accumulates its {d.reduction.combiner} over {over} in memory "
            f"({why}), so no point of its nest sees a finished element for {names} to "
            f"read: a fused consumer never sees a partial result. Keep {d.name}'s reduction "
            f"loops inside its output loops' tile (do not split {over} into blocks outside "
            f"it), or unfuse {names}")


def _merge(state, part, part_pos, part_index, q, parts, out_buf, out_index):
    """acc = identity; for q in 0..parts: acc = combine(acc, part[..q..]); out = acc"""
    d, red = state.definition, state.definition.reduction
    acc = Buffer(f"{d.name}_acc", (), part.dtype, Scope.LOCAL)
    body = [Store(acc, (), identity(red.combiner, part.dtype))]
    target = None
    if part_pos is not None:
        pos = Buffer(f"{d.name}_pos", (), np.dtype("int64"), Scope.LOCAL)
        target = ArgTarget(pos, (), Access(part_pos, part_index))
        body.append(Store(pos, (), Const(0, "int64")))
    kind = LoopKind.SERIAL
    if part.scope is Scope.LOCAL and target is None and len(part_index) == 1 and \
            parts.is_Integer and int(parts) >= 2 and not int(parts) & (int(parts) - 1):
        kind = LoopKind.VECTOR
    body.append(Loop(q, parts, (Update(acc, (), red.combiner, Access(part, part_index),
                                       state.fast_math, target),), kind, reduction=True))
    at = dict(zip(d.indices, out_index))
    body += _finish(state, out_buf, out_index, Access(target.buffer if target else acc, ()), at)
    return tuple(body)


def _reduction_nest(state, value, out_buf, out_index, values_to=None, after=(),
                    split_at=None, padded=frozenset(), final=True):
    """The loops of a reduction writing `out_buf[out_index]` (the position, for argmax;
    `values_to` then receives the best values too). The accumulator is initialised and
    written back around the outermost reduction loop, with a dimension for every output
    loop inside it -- or is the output itself when the types agree. When that tile is
    too big for registers but a reduction loop further in has a register-sized tile of
    output loops inside it, that loop gets a local accumulator of its own, combined into
    the output after it (`_register_tile`: the micro-kernel of a blocked matmul).
    `final`: out_buf receives the definition's elements (not partial results), so the
    write-back runs the epilogue."""
    d, red = state.definition, state.definition.reduction
    private = state.private
    reducing = [a.reduction and a.var is not private for a in state.axes]
    first_red = reducing.index(True) if True in reducing else len(state.axes)
    if split_at is not None:            # local partials: the private loop starts the inside
        first_red = split_at
    outer, inner = state.axes[:first_red], state.axes[first_red:]
    inner_out = [a for a, r in zip(state.axes[first_red:], reducing[first_red:]) if not r]
    arg = COMBINERS[red.combiner].positional
    acc_dtype = value.dtype if arg else red.dtype
    if not arg and value.dtype != acc_dtype:
        value = cast(value, acc_dtype)
    loop_vars = state_vars(state)
    register_tile = _fits_registers(state, inner_out, acc_dtype)
    if inner_out and not arg and acc_dtype == out_buf.dtype and not register_tile:
        acc, acc_index = out_buf, out_index          # accumulate in the output itself
        if final:
            names = ", ".join(a.var.name for a in inner_out)
            _accumulates_in_memory(state, f"its reduction loop {inner[0].var.name} runs "
                                          f"outside its loops {names}, a tile too large "
                                          "for registers")
    else:
        # extents that shrink in a tail (Min(T, E - o*T)) are largest at o = 0
        shape = tuple(upper_bound(a.extent, loop_vars) for a in inner_out)
        acc = Buffer(f"{d.name}_acc", shape, acc_dtype, Scope.LOCAL)
        acc_index = tuple(a.var for a in inner_out)
    init = [Store(acc, acc_index, identity(red.combiner, acc_dtype))]
    target = None
    if arg:
        pos = Buffer(f"{d.name}_pos", acc.shape, np.dtype("int64"), Scope.LOCAL)
        position = sym.Integer(0)
        for x in red.over:
            position = position * d.extents[x] + state.subst[x]
        target = ArgTarget(pos, acc_index, IndexValue(position))
        init.append(Store(pos, acc_index, Const(0, "int64")))
    update = Update(acc, acc_index, red.combiner, value, state.fast_math, target)
    inner_axes = [Axis(a.var, a.extent, r, a.kind, a.tail)
                  for a, r in zip(inner, reducing[first_red:])]
    body = []
    out_guards = _guards_for(state, outer + tuple(inner_out))
    # an extent that depends on a reduction loop (the private part of a split reduction)
    # is unknown outside it: initialise and write back over its upper bound instead
    bound = {a.var for a in outer} | {a.var for a in inner_out}
    inner_out = [replace(a, reduction=False) if sym.sympify(a.extent).free_symbols
                 & set(loop_vars) <= bound else
                 replace(a, reduction=False, extent=upper_bound(a.extent, loop_vars))
                 for a in inner_out]
    # a local accumulator tile is initialised whole: its guards only say which elements
    # reach the output (the write-back checks them), and an unguarded tile stays in
    # vector registers (masked stores to it would keep it in memory)
    init_guards = () if register_tile and acc is not out_buf else out_guards
    level = None if acc is not out_buf or arg else _register_level(state, reducing, first_red,
                                                                    acc_dtype)
    first = first_block(state, outer, level, first_red)
    if first is None:
        body += _nest(inner_out, init, init_guards)
    elif first[1] is not sym.false:
        # the first block's tiles store: the output is initialised only if none runs
        body.append(Guard(first[1], _nest(inner_out, init, init_guards)))
    if level is not None:
        body += _nest(state.axes[first_red:level],
                      _register_tile(state, value, out_buf, out_index, level, padded,
                                     first and first[0]),
                      _guards_for(state, state.axes[:level]))
    else:
        guards = state.guards
        if register_tile and not arg:
            guards = _update_guards(state, value, outer + tuple(inner_out), padded)
        body += _nest(inner_axes, [update], guards)
    if acc is not out_buf:
        result = Access(target.buffer if arg else acc, acc_index)
        at, back = None, inner_out               # the write-back's point and loops
        slices = state.epilogue.slices if final and state.epilogue is not None else None
        if slices is not None:
            result, at, back = _slice_values(state, slices, acc, acc_index, inner_out)
        last = back[-1] if back else None
        lanes = None
        if last is not None and last.kind is LoopKind.VECTOR and \
                sym.sympify(last.extent).is_Integer:
            order = tuple((a.var, upper_bound(a.extent, loop_vars)) for a in state.axes)
            lanes = (last.var, int(last.extent), order)
            if final and stores_across_lanes(state, last.var):
                back = columns_outermost(back, last)
                lanes = None
            elif final and reduces_in_lanes(state):
                folded = fold_lanes(state, acc_dtype, last, order)
                if folded is not None:
                    sub, back_tail, lanes = folded
                    back = list(back[:-1]) + back_tail
                    result = substituted(result, sub)
                    at = {x: sym.sympify(state.subst[x]).xreplace(sub) for x in d.indices} \
                        if at is None else {x: sym.sympify(v).xreplace(sub) for x, v in at.items()}
                    out_index = tuple(sym.sympify(ix).xreplace(sub) for ix in out_index)
                    out_guards = [g.xreplace(sub) for g in out_guards]
        rolled = rows_rolled(state, back, last) if final and register_tile else None
        if rolled is not None:
            tile = Buffer(f"{d.name}_tile", acc.shape, acc.dtype, Scope.LOCAL)
            body += _nest(inner_out, [Store(tile, acc_index, Access(acc, acc_index))], ())
            back, result = rolled, reading(result, acc, tile)
        writes = _finish(state, out_buf, out_index, result, at, lanes) if final else \
            [Store(out_buf, out_index, result)]
        if values_to is not None:
            writes.append(Store(values_to, out_index, Access(acc, acc_index)))
        body += _nest(back, writes, out_guards)
    outer_axes = [Axis(a.var, a.extent, False, a.kind, a.tail) for a in outer]
    return _nest(outer_axes, body + list(after))


def _slice_values(state, slices, acc, acc_index, inner_out):
    """A sliced root's write-back: ({slice: its value in the tile}, the point, the tile's
    loops without the slice loop), the consumer reading every slice of an element."""
    var = state.subst[slices.var]
    if var not in [a.var for a in inner_out]:
        raise ScheduleError(
            f"fuse: {state.definition.name} is computed as {slices.count} slices for its "
            f"consumer, which reads them together; its slice loop {var.name} must run "
            "inside its reduction loops, in the register tile")
    values = {n: Access(acc, [sym.sympify(ix).xreplace({var: n}) for ix in acc_index])
              for n in range(slices.count)}
    at = {x: state.subst[x] for x in state.definition.indices if x is not slices.var}
    return values, at, [a for a in inner_out if a.var is not var]


def _fits_registers(state, axes, dtype):
    """Do output loops `axes` span a constant tile of at most REGISTER_TILE_BYTES?"""
    tile = [upper_bound(a.extent, state_vars(state)) for a in axes]
    return bool(axes) and all(t.is_Integer for t in tile) and \
        int(np.prod([int(t) for t in tile])) * np.dtype(dtype).itemsize <= REGISTER_TILE_BYTES


def _register_level(state, reducing, first_red, dtype):
    """The outermost reduction loop inside the first one whose inner output loops form
    a register tile (None if there is none): with the loops jc, kc, ic, jr, ir, k, i, j
    of a blocked matmul, the loop k, whose tile i x j stays in vector registers."""
    for pos in range(first_red + 1, len(state.axes)):
        if not reducing[pos]:
            continue
        tile = [a for a, r in zip(state.axes[pos:], reducing[pos:]) if not r]
        if _fits_registers(state, tile, dtype):
            return pos
    return None


def _register_tile(state, value, out_buf, out_index, level, padded, first=None):
    """The loops from reduction loop `level` inward, accumulating in a local tile that
    is combined into the output after them:

        acc[i, j] = identity                      (every i, j of the tile, unguarded)
        for k: for i: for j: acc[i, j] += value    (guards on i, j dropped: see below)
        for i: for j: if guards: C[..] = combine(C[..], acc[i, j])

    With `first` (writeback.first_block's condition), where it holds the write-back stores
    (C[..] = acc[i, j]) instead of combining."""
    d, red = state.definition, state.definition.reduction
    loop_vars = state_vars(state)
    axes = state.axes[level:]
    # the private loop indexes the partials as an output loop does (_register_level)
    tiled = [a for a in axes if not a.reduction or a.var is state.private]
    outside = state.axes[:level] + tuple(tiled)
    known = {a.var for a in outside}
    # a tile loop's extent may shrink in a tail (Min(T, E - o*T)); one that depends on
    # the reduction loops inside the level is taken at its bound
    tile = [replace(a, reduction=False) if sym.sympify(a.extent).free_symbols & set(loop_vars)
            <= known else replace(a, reduction=False, extent=upper_bound(a.extent, loop_vars))
            for a in tiled]
    shape = tuple(upper_bound(a.extent, loop_vars) for a in tile)
    acc = Buffer(f"{d.name}_acc", shape, red.dtype, Scope.LOCAL)
    index = tuple(a.var for a in tile)
    update = Update(acc, index, red.combiner, value, state.fast_math)
    write = Update(out_buf, out_index, red.combiner, Access(acc, index), state.fast_math)
    back = _nest(tile, [write], _guards_for(state, outside))
    if first is not None and first is not sym.false:
        store = _nest(tile, [Store(out_buf, out_index, Access(acc, index))],
                      _guards_for(state, outside))
        back = store if first is sym.true else (Guard(first, store),
                                               Guard(negation(first), back))
    return (_nest(tile, [Store(acc, index, identity(red.combiner, red.dtype))]) +
            _nest(axes, [update], _update_guards(state, value, outside, padded)) + back)


def _update_guards(state, value, outside, padded):
    """The guards an update into a local accumulator tile still needs. A guard on the
    loops of `outside` (the tile's own loops and those around it) only says which tile
    elements exist; the write-back checks it. The update may run unguarded (computing
    elements nobody reads) when every read that moves with the guard's loops comes
    from a zero-padded packed copy (`padded`), which those loops never leave; a guard
    that protects any other read stays."""
    from tex.expr import walk as walk_expr
    allowed = {a.var for a in outside}
    loop_vars = set(state_vars(state))
    reads = [a for a in walk_expr(value) if isinstance(a, Access)]
    kept = []
    for g in state.guards:
        mentions = g.free_symbols & loop_vars
        safe = mentions <= allowed and all(
            a.tensor in padded for a in reads
            if set().union(*(sym.sympify(ix).free_symbols for ix in a.index)) & mentions)
        if not safe:
            kept.append(g)
    return tuple(kept)

"""Consumers computed in their producer's epilogue: where a stage's nest has the final
value of an element of its definition (a reduction's accumulator after its last
reduction loop, an elementwise value at its store), the fused consumers' code runs on
that value, in registers, and stores only their own results.

    for jc: for ic (parallel): for jr: for ir:          C = A @ B, R = max_j C[i, j]
      C_acc[0..6, 0..16] = 0
      for k: for ii: for jj: C_acc[ii, jj] += A[i, k] * B_pack[jr, k, jj]
      for ii: for jj:
        if inside: R[i] = max(R[i], C_acc[ii, jj])      the epilogue; C is never stored

A consumer's indices map onto the producer's (fusion.py finds the map): an elementwise
consumer covers the producer's elements once each, in any order of its own indices
(`T[j, i] = C[i, j] + bias[j]`); a reduction consumer reduces over some of them, and its
updates run as the producer's tiles complete (the reduction's initialisation goes
before the nest). Elementwise consumers may feed later consumers of the same epilogue:
their values are substituted, not stored, unless something outside reads them.
"""
from dataclasses import replace

import numpy as np
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import Access, Const, Index, IndexValue, cast, rebuild, with_children
from tex.records import record

from .ir import Allocate, ArgTarget, Buffer, Loop, LoopKind, Scope, Store, Update


@record
class Fused:
    """A consumer computed in the epilogue of `into` (the group's root producer)."""
    definition: object
    into: object
    to_root: dict            # the consumer's Index -> the root's Index it runs over
    store: bool              # its result is written (an output, or read outside the group)


@record
class Epilogue:
    """What a root producer's nest runs where an element of it is final."""
    root: object
    members: tuple           # Fused, in program order
    store_root: bool         # the root's own element is written too
    buffers: dict            # definition -> Buffer
    values: dict             # reduction member with a position result -> its values buffer
    lanes: dict              # reduction member -> Lanes, filled as nests use them
    slices: object = None    # fusion.Slicing when the root is computed as slices


def identity(combiner, dtype):
    """The value a reduction starts from: the combiner's identity element, a Const."""
    return Const(COMBINERS[combiner].identity(dtype), np.dtype(dtype))


def make_epilogue(root, members, store_root, buffers, slices=None):
    values = {}
    for f in members:
        red = f.definition.reduction
        if red is not None and COMBINERS[red.combiner].positional:
            dt = red.body.dtype
            values[f.definition] = Buffer(f"{f.definition.name}_val", f.definition.shape, dt,
                                          _scope(f.definition.shape, dt))
    return Epilogue(root, tuple(members), store_root, buffers, values, {}, slices)


@record
class Lanes:
    """Per-lane partial results of a reduction member whose reduced index runs along the
    root's vector loop: the epilogue combines each tile's vector into them lane by lane
    (no horizontal step per tile: an argmax's shuffle tree per row of every 6 x 16 tile
    cost 12% of a 4096 x 1000 x 512 matmul), and one merge after the nest combines the
    lanes of each element (argmax: equal values keep the smaller position, so the
    lanes' order does not matter)."""
    width: int
    values: Buffer
    positions: Buffer        # argmax/argmin, else None
    parts: object = None     # the count of parts kept apart (privatize_parts), else None


def _scope(shape, dtype):
    small = all(sym.sympify(z).is_Integer for z in shape) and \
        int(np.prod([int(z) for z in shape])) * np.dtype(dtype).itemsize <= 64 * 1024
    return Scope.LOCAL if small else Scope.TEMP


def statements(epi, at, result, fast_math, lanes=None):
    """The epilogue at one element of the root: `at` maps each root index to its loop
    expression there, `result` is the element's value (an expression; for a sliced root,
    {slice: its value}); `lanes` the vector loop around this point, if any: (var,
    width, the nest's loops outermost first as (var, largest extent))."""
    values = {epi.root: result}
    out = []
    for f in epi.members:
        d = f.definition
        at_f = {x: at[r] for x, r in f.to_root.items()}
        red = d.reduction
        value = _rebuilt(d.element, at_f, values, epi.buffers, epi.slices)
        index = tuple(at_f[x] for x in d.indices)
        if red is None:
            values[d] = value
            if f.store:
                out.append(Store(epi.buffers[d], index, value))
            continue
        fm = fast_math and red.fast_math
        lane = _lanes(epi, f, at_f, lanes, fm)
        if lane is not None:
            index = index + (lanes[0],)
            if lane.positions is not None:
                position = _position(d, at_f)
                target = ArgTarget(lane.positions, index, IndexValue(position),
                                   _increasing(position, lanes[2]))
                out.append(Update(lane.values, index, red.combiner, value, fm, target))
            else:
                out.append(Update(lane.values, index, red.combiner,
                                  value if value.dtype == red.dtype else cast(value, red.dtype),
                                  fm))
            continue
        if COMBINERS[red.combiner].positional:
            target = ArgTarget(epi.buffers[d], index, IndexValue(_position(d, at_f)))
            out.append(Update(epi.values[d], index, red.combiner, value, fm, target))
        else:
            if value.dtype != red.dtype:
                value = cast(value, red.dtype)
            out.append(Update(epi.buffers[d], index, red.combiner, value, fm))
    return out


def _position(d, at_f):
    """The flat position (row-major over the reduced indices) argmax/argmin report."""
    position = sym.Integer(0)
    for x in d.reduction.over:
        position = position * d.extents[x] + at_f[x]
    return position


def _lanes(epi, f, at_f, lanes, fast_math):
    """The Lanes of reduction member f at this point, or None: when the vector loop
    moves along one of f's reduced indices but not its own, and f's combiner may be
    regrouped."""
    d = f.definition
    red = d.reduction
    if lanes is None:
        return None
    var, width = lanes[:2]
    moves = [x for x in red.over if var in sym.sympify(at_f[x]).free_symbols]
    still = all(var not in sym.sympify(at_f[x]).free_symbols for x in d.indices)
    acc = red.body.dtype if COMBINERS[red.combiner].positional else red.dtype
    if not moves or not still or not COMBINERS[red.combiner].may_reassociate(acc, fast_math):
        return None
    if d not in epi.lanes:
        shape = tuple(d.shape) + (width,)
        positions = Buffer(f"{d.name}_lane_pos", shape, np.dtype("int64"),
                           _scope(shape, "int64")) if d in epi.values else None
        epi.lanes[d] = Lanes(width, Buffer(f"{d.name}_lanes", shape, acc, _scope(shape, acc)),
                             positions)
    lane = epi.lanes[d]
    return lane if lane.width == width else None


def _increasing(position, order):
    """Does `position` (an expression in loop variables) grow along the nest, each loop
    (outermost first) stepping it by more than all the loops inside it span? Then every
    target element sees its positions in increasing order. `order`: the nest's loops,
    outermost first, as (var, largest extent)."""
    expr = sym.expand(sym.sympify(position))
    terms = [(var, bound, expr.coeff(var)) for var, bound in order
             if var in expr.free_symbols]
    rest = expr - sum(c * var for var, _, c in terms)
    if any(isinstance(x, Index) for x in rest.free_symbols) or \
            not all(c.is_Integer and c > 0 for _, _, c in terms):
        return False
    span = 0                      # how far the loops inside step the position
    for n, (var, bound, c) in enumerate(reversed(terms)):
        if c <= span:
            return False
        if n == len(terms) - 1:
            break                 # the outermost: its own extent does not matter
        bound = sym.sympify(bound)
        if not bound.is_Integer:
            return False
        span += c * (int(bound) - 1)
    return True


def _rebuilt(expr, at, values, buffers, slices=None):
    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access):
            if node.tensor in values:
                value = values[node.tensor]     # the root's value, or an earlier member's
                return value[slices.number(node.index)] if isinstance(value, dict) else value
            return Access(buffers[node.tensor],
                          [sym.sympify(ix).xreplace(at) for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(at))
        return node
    return rebuild(expr, fn)


def privatize_parts(epi, body):
    """Lanes kept apart per chunk of a parallel loop that runs over a reduced index
    (a matmul's column blocks dealt to the threads in parts, split_parts, for a consumer
    that reduces over the columns): where a lane update sits in a parallel loop that
    its index does not move with, two threads would combine into one element; the lanes
    get that loop's variable as a first index instead, `R_lanes[p, i, lane]`, and the
    merge after the nest runs over the parts too. Nests without such a loop (another
    specialization) use part 0. Returns (body, {member: its Lanes with parts}). Updates
    in two such parallel loops at once, or in one whose extent depends on a loop around
    it (no bound to size the lanes by), are left as they are, for check_races to
    refuse."""
    from .region import upper_bound
    owner = _lane_owners(epi)
    part_loops, extents = set(), {}

    def find(node, parallel, outer):
        if isinstance(node, Loop):
            if node.kind is LoopKind.PARALLEL:
                parallel = parallel + ((node, upper_bound(node.extent, outer)),)
            outer = outer + (node.var,)
        if isinstance(node, Update) and id(node.buffer) in owner:
            moves = set().union(*(sym.sympify(ix).free_symbols for ix in node.index))
            shared = [(loop, bound) for loop, bound in parallel if loop.var not in moves]
            if len(shared) == 1 and not set(outer) & sym.sympify(shared[0][1]).free_symbols:
                part_loops.add(id(shared[0][0]))
                extents.setdefault(owner[id(node.buffer)], []).append(shared[0][1])
        for child in getattr(node, "body", ()):
            find(child, parallel, outer)
    for node in body:
        find(node, (), ())
    if not extents:
        return tuple(body), {}
    parted = {}
    for d, exts in extents.items():
        lane = epi.lanes[d]
        parts = sym.Max(1, *exts)

        def with_parts(buf):
            if buf is None:
                return None
            shape = (parts,) + tuple(buf.shape)
            return Buffer(buf.name, shape, buf.dtype, _scope(shape, buf.dtype))
        parted[d] = Lanes(lane.width, with_parts(lane.values), with_parts(lane.positions),
                          parts)
    new_buf = {}
    for d, lane in parted.items():
        new_buf[id(epi.lanes[d].values)] = lane.values
        if lane.positions is not None:
            new_buf[id(epi.lanes[d].positions)] = lane.positions

    def rewrite(node, part, loops):
        if isinstance(node, Loop):
            if id(node) in part_loops:
                part = node.var
            else:
                loops = loops + ((node.var, node.extent),)
        if isinstance(node, Update) and id(node.buffer) in new_buf:
            arg = node.arg
            if arg is not None and id(arg.buffer) in new_buf:
                arg = replace(arg, buffer=new_buf[id(arg.buffer)], index=(part,) + arg.index,
                              ordered=arg.ordered or _ordered_in_part(arg, part, loops))
            return node.replace(buffer=new_buf[id(node.buffer)], index=(part,) + node.index,
                                arg=arg)
        kids = getattr(node, "body", None)
        if not kids:
            return node
        new = tuple(rewrite(k, part, loops) for k in kids)
        return node if all(a is b for a, b in zip(new, kids)) else node.replace(body=new)
    return tuple(rewrite(node, sym.Integer(0), ()) for node in body), parted


def _ordered_in_part(arg, part, loops):
    """Does each lane of one part see its positions in increasing order? The part's
    own term of the position is constant there (its symbolic stride hid the order from
    _increasing over the whole nest)."""
    if not isinstance(arg.position, IndexValue) or not isinstance(part, sym.Symbol):
        return False
    from .region import upper_bound
    inner = [v for v, _ in loops]
    order = [(v, upper_bound(e, inner)) for v, e in loops]
    return _increasing(arg.position.expr.xreplace({part: 0}), order)


def around(epi, body, parted=None):
    """The root's stage body with the reduction members' initialisation before it, the
    merge of their lanes after it, and their buffers (argmax values, lanes) allocated
    around it. `parted`: the lanes privatize_parts gave parts."""
    parted = parted or {}
    lanes = {d: parted.get(d, lane) for d, lane in epi.lanes.items()}
    inits, merges = [], []
    for f in epi.members:
        d = f.definition
        red = d.reduction
        if red is None:
            continue
        idx = tuple(Index(x.name) for x in d.indices)
        target = epi.values.get(d, epi.buffers[d])
        stores = [Store(target, idx, identity(red.combiner, target.dtype))]
        if d in epi.values:
            stores.append(Store(epi.buffers[d], idx, Const(0, "int64")))
        lane = lanes.get(d)
        if lane is not None:
            q = Index("lane")
            p = Index("part")
            lidx = ((p,) if lane.parts is not None else ()) + idx + (q,)
            fill = [Store(lane.values, lidx, identity(red.combiner, lane.values.dtype))]
            arg = None
            if lane.positions is not None:     # a position no real one ties with
                fill.append(Store(lane.positions, lidx, Const(2**63 - 1, "int64")))
                arg = ArgTarget(epi.buffers[d], idx, Access(lane.positions, lidx))
            fill = (Loop(q, lane.width, tuple(fill)),)
            merge = Update(target, idx, red.combiner, Access(lane.values, lidx),
                           red.fast_math, arg)
            merge = (Loop(q, lane.width, (merge,), reduction=True),)
            if lane.parts is not None:
                fill = (Loop(p, lane.parts, fill),)
                merge = (Loop(p, lane.parts, merge, reduction=True),)
            stores.extend(fill)
            merges.extend(_over(d, idx, merge, LoopKind.PARALLEL))
        inits.extend(_over(d, idx, tuple(stores)))
    body = tuple(inits) + tuple(body) + tuple(merges)
    buffers = list(epi.values.values()) + [b for lane in lanes.values()
                                           for b in (lane.values, lane.positions) if b]
    for buf in buffers:
        body = (Allocate(buf, body),)
    return body


def _over(d, idx, body, kind=LoopKind.SERIAL):
    """`body` in loops over d's elements (idx: fresh variables for d's indices)."""
    for n, (x, ix) in reversed(list(enumerate(zip(d.indices, idx)))):
        body = (Loop(ix, d.extents[x], body, kind if n == 0 else LoopKind.SERIAL),)
    return body


def _lane_owners(epi, parted=None):
    """{id of a lanes buffer (values or positions): its member's definition}, those of
    `parted` (privatize_parts' lanes) included."""
    owner = {}
    for lanes in (epi.lanes, parted or {}):
        for d, lane in lanes.items():
            for buf in (lane.values, lane.positions):
                if buf is not None:
                    owner[id(buf)] = d
    return owner


def check_races(epi, stage_body, root_name, parted=None):
    """Refuse an epilogue whose reduction updates threads would share: an update inside
    a parallel loop whose target -- a member's result, its argmax values, or its lanes
    (`parted`: those privatize_parts gave parts) -- does not move with that loop (two
    threads combining into one element)."""
    targets = {id(epi.buffers[f.definition]): f.definition for f in epi.members
               if f.definition.reduction is not None}
    targets.update({id(b): d for d, b in epi.values.items()})
    targets.update(_lane_owners(epi, parted))

    def visit(node, parallel):
        if isinstance(node, Loop) and node.kind is LoopKind.PARALLEL:
            parallel = parallel + (node,)
        if isinstance(node, Update) and id(node.buffer) in targets:
            moves = set().union(*(sym.sympify(ix).free_symbols for ix in node.index)) \
                if node.index else set()
            for loop in parallel:
                if loop.var not in moves:
                    d = targets[id(node.buffer)]
                    over = ", ".join(x.name for x in d.reduction.over)
                    raise ScheduleError(
                        f"fuse: {d.name} reduces over {over} in {root_name}'s epilogue, but "
                        f"{root_name}'s loop {loop.var.name} runs in parallel over it: two "
                        f"threads would combine into one element of {d.name}; make that "
                        f"loop serial or unfuse {d.name}")
        for child in getattr(node, "body", ()):
            visit(child, parallel)
    for node in stage_body:
        visit(node, ())


def describe(epi):
    """`R (max over j) in its epilogue; C not stored`: the kernel's contents in a few
    words, for the printed nest."""
    parts = []
    for f in epi.members:
        d = f.definition
        red = d.reduction
        if red is not None:
            what = f"{red.combiner} over {', '.join(x.name for x in red.over)}"
        else:
            what = "stored" if f.store else "in registers"
        parts.append(f"{d.name} ({what})")
    root = epi.root.name
    sliced = f"; {root} as {epi.slices.count} slices" if epi.slices is not None else ""
    stored = "" if epi.store_root else f"; {root} not stored"
    return f"{', '.join(parts)} in its epilogue{sliced}{stored}"

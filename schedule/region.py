"""The box of a tensor that some loops read: what `pack` copies and `compute_at` computes.

For the accesses of one tensor inside a loop `at`, split every index expression into an
outer part (sizes and the loops at or outside `at`) and an inner part (the loops below
`at`, with non-negative coefficients). The box along each dimension starts at the outer
part and is as long as the inner part's largest value plus one; every read below `at`
lands inside it. Reads are rewritten to `local[index - start]`.
"""

import tex.symbolic as sym

from tex.errors import ScheduleError
from tex.expr import Access, CeilDiv, Min, rebuild, with_children
from tex.records import record


def upper_bound(extent, loop_vars):
    """An extent free of loop variables that is >= the extent everywhere. Tails have the
    form Min(T, E - o*T): the constant T bounds them, also inside the ceiling of a
    split of a split (ceiling(Min(192, M - 192*io)/6) <= 32); otherwise take the loops
    at 0 (extents shrink as outer loops advance)."""
    extent = sym.sympify(extent)
    if isinstance(extent, sym.Min):
        consts = [a for a in extent.args if a.is_Integer]
        if consts:
            return sym.Integer(min(int(c) for c in consts))
    if isinstance(extent, CeilDiv) and extent.args[1].is_Integer and extent.args[1] > 0:
        bound = upper_bound(extent.args[0], loop_vars)
        if bound.is_Integer:
            return CeilDiv(bound, extent.args[1])
    return extent.xreplace({v: 0 for v in loop_vars})


@record(eq=False)
class Box:
    start: tuple        # per dimension, an expression in sizes and outer loop variables
    size: tuple         # per dimension, free of loop variables (a buffer shape)
    extent: tuple       # per dimension, the part that exists: Min(size, dim - start)


def read_box(prim, stage_name, value, buf, inner, extents, loop_vars):
    """The box of `buf` that the reads of `buf` in `value` cover when the loops in
    `inner` (a set of variables, with `extents[var]`) run."""
    starts = None
    reaches = None
    for node in _accesses(value, buf):
        s, r = [], []
        for axis, ix in enumerate(node.index):
            outer_part, reach = sym.expand(ix), sym.Integer(0)
            for var in sorted(inner & outer_part.free_symbols, key=lambda v: v.name):
                c = outer_part.coeff(var)
                if c.free_symbols & inner or not c.is_nonnegative:
                    raise ScheduleError(f"{prim}: in stage {stage_name}, the index {ix} of "
                                        f"{buf.name} does not grow with loop {var.name}")
                reach += c * (upper_bound(extents[var], loop_vars) - 1)
                outer_part = sym.expand(outer_part - c * var)
            s.append(outer_part)
            r.append(reach)
        if starts is None:
            starts, reaches = s, r
        elif any(sym.expand(a - b) != 0 for a, b in zip(s, starts)):
            raise ScheduleError(f"{prim}: in stage {stage_name}, {buf.name} is read at two "
                                "different offsets below the loop; no single box covers both")
        else:
            reaches = [sym.Max(a, b) for a, b in zip(reaches, r)]
    if starts is None:
        raise ScheduleError(f"{prim}: stage {stage_name} does not read {buf.name} below the loop")
    size = tuple(r + 1 for r in reaches)
    extent = tuple(Min(z, d - s0) for z, d, s0 in zip(size, buf.shape, starts))
    return Box(tuple(starts), size, extent)


def _accesses(value, buf):
    from tex.expr import walk
    return [n for n in walk(value) if isinstance(n, Access) and n.tensor is buf]


def rewrite_reads(value, buf, local, box):
    """`buf[index]` -> `local[index - start]` everywhere in `value`."""
    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor is buf:
            return Access(local, [sym.expand(ix - s) for ix, s in zip(node.index, box.start)])
        return node
    return rebuild(value, fn)

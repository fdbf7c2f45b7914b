"""Kernel formation: which consumers run in a producer's epilogue (epilogue.py), and why
the others do not.

A group is a root definition and the consumers fused into it. A consumer joins a group
when every read it makes of the group's members is at plain indices that map its own
indices one to one onto the root's output indices (`T[j, i] = C[i, j] + bias[j]`: j -> j,
i -> i; `R[i] = max(C[i, j], over=j)`: i -> i, j -> j), over the same extents: then each
element of the root is final at one point of the root's nest, and the consumer's code
for that element runs there. Reads at an offset (`C[i, j + 1]`), broadcasts (an index
of the consumer the root does not have: the root would be recomputed) and reads of a
reduction member (complete only after the whole nest) do not fuse. A group is one
kernel of the program's DAG: fusing must keep the DAG of groups acyclic.

Whether the root's schedule allows the epilogue (a point where an element is final,
no two threads combining into one element of a reduction consumer) is decided when
the nest is lowered (stage.py, epilogue.py).
"""

import tex.symbolic as sym

from tex.dag import DiGraph, is_acyclic, topological_order
from tex.expr import Access, Index, walk as walk_expr
from tex.indices import format_size
from tex.tensor import Definition
from tex.records import record


def consumer_map(consumer, root, members):
    """The map of `consumer`'s indices onto `root`'s, or a string saying why it does not
    fuse. `members`: {member definition: {its index: root index}} (the root maps to
    itself); reduction members other than the root cannot be read."""
    red = consumer.reduction
    own = list(consumer.indices) + list(red.over if red is not None else ())
    mapping = {}
    reads = [a for a in walk_expr(consumer.expr) if isinstance(a, Access) and a.tensor in members]
    if not reads:
        return f"{consumer.name} reads no member of the kernel"
    for a in reads:
        m = a.tensor
        if m is not root and m.reduction is not None:
            return (f"{consumer.name} reads {m.name}, a reduction that is complete only "
                    "after the whole nest")
        for axis, (ix, own_index) in enumerate(zip(a.index, m.indices)):
            ix = sym.sympify(ix)
            if not isinstance(ix, Index) or ix not in own:
                return (f"{consumer.name} reads {m.name}[{', '.join(map(format_size, a.index))}]: "
                        f"dimension {axis} is not a plain index of {consumer.name} (an "
                        "offset or expression reads elements other tiles compute)")
            target = members[m][own_index]
            if mapping.setdefault(ix, target) is not target:
                return (f"{consumer.name} reads {m.name} with index {ix} at two different "
                        "positions")
    missing = [x for x in own if x not in mapping]
    if missing:
        return (f"index {missing[0].name} of {consumer.name} is not an index of "
                f"{root.name}: fused, {root.name} would be recomputed for each "
                f"{missing[0].name}")
    if set(mapping.values()) != set(root.indices) or len(mapping) != len(root.indices):
        return (f"{consumer.name} does not cover each element of {root.name} exactly once "
                "(its indices map onto only some of the root's)")
    for x, r in mapping.items():
        if sym.simplify(consumer.extents[x] - root.extents[r]) != 0:
            return (f"{consumer.name}'s index {x.name} runs over {consumer.extents[x]} but "
                    f"{root.name}'s {r.name} over {root.extents[r]}")
    return mapping


def _contracted(program, root_of):
    """The DAG of definitions with each group (`root_of`: member -> root) one node."""
    g = DiGraph()
    for d in program.definitions:
        g.add_node(root_of.get(d, d))
        for t in d.reads():
            if isinstance(t, Definition):
                a, b = root_of.get(t, t), root_of.get(d, d)
                if a is not b:
                    g.add_edge(a, b)
    return g


def groups_acyclic(program, root_of):
    return is_acyclic(_contracted(program, root_of))


def stage_order(program, root_of):
    """The roots and unfused definitions in an order that respects the contracted DAG
    (ties by program order)."""
    rank = {d: n for n, d in enumerate(program.definitions)}
    return topological_order(_contracted(program, root_of), key=lambda d: rank[d])


def members_of(fused, root):
    """{member: its map to the root} for the root and the consumers fused into it."""
    out = {root: {x: x for x in root.indices}}
    for d, f in fused.items():
        if f.into is root:
            out[d] = f.to_root
    return out


def fusion_candidates(program, fused, consumer):
    """The roots `consumer` could join: those of the definitions it reads, reductions
    (the expensive producers) first."""
    roots = []
    for t in consumer.reads():
        if isinstance(t, Definition):
            r = fused[t].into if t in fused else t
            if r not in roots:
                roots.append(r)
    return sorted(roots, key=lambda r: r.reduction is None)


def try_join(program, fused, consumer, root):
    """(map, None) when `consumer` may join `root`'s group, else (None, why)."""
    mapping = consumer_map(consumer, root, members_of(fused, root))
    if isinstance(mapping, str):
        return None, mapping
    root_of = {d: f.into for d, f in fused.items()}
    root_of[consumer] = root
    if not groups_acyclic(program, root_of):
        return None, (f"{consumer.name} reads a definition that itself reads {root.name}'s "
                      "kernel: fused, the kernels would depend on each other")
    return mapping, None


def outside_readers(program, fused, d):
    """Definitions outside d's group that read d (so d must be stored)."""
    root = fused[d].into if d in fused else d
    out = []
    for r in program.graph.successors(d):
        group = fused[r].into if r in fused else r
        if group is not root:
            out.append(r)
    return out


# ---------------------------------------------------------------- horizontal fusion

@record
class Slicing:
    """A consumer reads the root at several offsets along one output axis (GEGLU's
    `C[i, j]` and `C[i, j + H]`): the root is computed as its slices, `definition`
    `Cs[s, ...] = C[..., x + base + s*step, ...]` for s in 0..count, over the consumer's
    range of x. Computed in one nest, the slices of a contraction share the reads of the
    other operand (each A element loaded once per k step for both halves of B), and the
    consumer's epilogue reads every slice of an element at once."""
    axis: int
    base: object
    step: object
    count: int
    var: Index              # the slice index of `definition`
    definition: Definition

    def number(self, index):
        """Which slice a read of the root at `index` (the consumer's indices) is."""
        ix = sym.expand(sym.sympify(index[self.axis]))
        plain = next(x for x in ix.free_symbols if isinstance(x, Index))
        return int(sym.simplify((ix - plain - self.base) / self.step))


def _plain_plus_offset(ix):
    """(index, offset) for `x + offset` (offset free of indices), else None."""
    ix = sym.expand(sym.sympify(ix))
    xs = [x for x in ix.free_symbols if isinstance(x, Index)]
    if len(xs) != 1 or ix.coeff(xs[0]) != 1:
        return None
    offset = ix - xs[0]
    if any(isinstance(x, Index) for x in offset.free_symbols):
        return None
    return xs[0], offset


# offsets a constant less than this apart are a stencil's neighbours (C[i, j + 1] -
# C[i, j]), not slices: their ranges overlap almost whole, and slicing would compute C
# twice over. (Whether two symbolic slices overlap depends on the call's sizes: GEGLU's
# C[i, j] and C[i, j + H] over j < N - H do not when N <= 2H, and are taken as slices.)
STENCIL_STEP = 16


def slice_plan(consumer, root):
    """The Slicing that lets `consumer` (reading `root` at offsets along one axis) fuse,
    or a string saying why there is none."""
    red = root.reduction
    if red is None:
        return f"{root.name} is not a reduction (only a reduction's slices share work)"
    reads = [a for a in walk_expr(consumer.expr) if isinstance(a, Access) and a.tensor is root]
    plain, offsets = None, set()
    for a in reads:
        parts = [_plain_plus_offset(ix) for ix in a.index]
        if any(p is None for p in parts):
            return f"{consumer.name} reads {root.name} at an index that is not index + offset"
        xs = [p[0] for p in parts]
        if plain is None:
            plain = xs
        elif xs != plain:
            return f"{consumer.name} reads {root.name} with different indices"
        offsets.add(tuple(sym.sympify(p[1]) for p in parts))
    varying = [ax for ax in range(root.ndim) if len({o[ax] for o in offsets}) > 1]
    if len(varying) != 1 or any(o[b] != 0 for o in offsets for b in range(root.ndim)
                                if b != varying[0]):
        return f"{consumer.name} reads {root.name} at offsets along more than one axis"
    ax = varying[0]
    values = list({o[ax] for o in offsets})
    try:
        values = sorted(values, key=lambda v: sum(bool((v - w).is_positive) for w in values))
        base, step = values[0], sym.simplify(values[1] - values[0])
        if not step.is_positive or any(sym.simplify(v - base - n * step) != 0
                                       for n, v in enumerate(values)):
            raise ValueError
    except (ValueError, TypeError):
        return (f"{consumer.name}'s offsets into {root.name} ({', '.join(map(format_size, values))}) "
                "are not evenly spaced and ordered")
    x = plain[ax]
    extent = consumer.extents[x]
    if step.is_Integer and step < STENCIL_STEP or (extent - step).is_positive:
        return (f"{consumer.name} reads {root.name} at neighbouring offsets "
                f"({', '.join(map(str, values))}) along {x.name}: its slices overlap, and "
                "fused, each tile would need elements other tiles compute")
    return _sliced(root, ax, base, step, len(values), extent)


def _sliced(root, axis, base, step, count, extent):
    from tex.expr import Reduce, substitute_indices
    red = root.reduction
    x = root.indices[axis]
    s = Index("s")
    body = substitute_indices(red.body, {x: x + base + s * step})
    expr = Reduce(red.combiner, body, red.over, red.dtype, red.fast_math, red.strict)
    extents = dict(root.extents)
    extents[x] = extent
    extents[s] = sym.Integer(count)
    sliced = Definition(root.name, (s,) + tuple(root.indices), expr, extents)
    return Slicing(axis, base, step, count, s, sliced)


def sliced_map(consumer, root, slicing):
    """The consumer's index map onto the sliced root (its s index excluded), or why not."""
    red = consumer.reduction
    own = list(consumer.indices) + list(red.over if red is not None else ())
    read = next(a for a in walk_expr(consumer.expr) if isinstance(a, Access) and a.tensor is root)
    mapping = {_plain_plus_offset(ix)[0]: r for ix, r in zip(read.index, root.indices)}
    if set(mapping) != set(own):
        return (f"{consumer.name}'s indices do not map one to one onto {root.name}'s")
    for x, r in mapping.items():
        if sym.simplify(consumer.extents[x] - slicing.definition.extents[r]) != 0:
            return (f"{consumer.name}'s index {x.name} runs over {consumer.extents[x]} but "
                    f"{root.name}'s {r.name} over {root.extents[r]}")
    return mapping

"""The write-back of a stage's accumulator tile into its output: how a register tile's
sums leave the registers (schedule/stage.py builds the nest; these decide its shape).

- first_block: the first kc block of a blocked contraction stores, later blocks add
  (the output is not zeroed and re-read).
- fold_lanes: a fused reduction keeps one vector of per-lane partials per element.
- columns_outermost: a consumer stored transposed is written one output row at a time.
"""
from dataclasses import replace

import tex.symbolic as sym

from tex.expr import Access, Index, IndexValue, Op, all_of, any_of, less, rebuild, with_children
from tex.expr import walk as walk_expr

from .ir import LoopKind, unique_name
from .target import target


def first_block(state, outer, level, first_red):
    """For an output accumulated in memory around a register tile (the kc blocks of a
    blocked matmul): (the condition "this is the first block of every reduction loop
    around the tile", the condition "one of them runs no block"), or None. The first
    block's tiles store their sums instead of adding them to the output, so the output
    is neither zeroed beforehand nor read back by the first block (BLAS's beta = 0 on
    the first kc block: 1024^3 float32 wrote and re-read its 4 MB output once more).
    Only when those loops' extents are known where the output would be initialised.
    The private loop of a split reduction is not one of them: it picks the partial sum
    each block adds to, so every part's first block stores (with it counted, only part
    0 stored and the others added to memory never written)."""
    if level is None or not _every_part_runs(state):
        return None
    blocks = [a for a in state.axes[first_red:level] if a.reduction and a.var is not state.private]
    known = {a.var for a in outer}
    loop_vars = {a.var for a in state.axes}
    if not blocks or any(sym.sympify(a.extent).free_symbols & loop_vars - known
                         for a in blocks):
        return None
    first = all_of(*(less(a.var, 0, strict=False) for a in blocks))
    empty = any_of(*(less(a.extent, 0, strict=False) for a in blocks))
    return first, empty




def _every_part_runs(state):
    """Does the private loop of a split reduction run over all its parts (an extent free
    of other loops' variables: the part count)? One that is a split's tail
    (`min(32, ceil(K/2) - 32*koo)`) runs fewer in some blocks, and the parts no first
    block reaches were never stored: the merge read memory never written."""
    if state.private is None:
        return True
    loop_vars = {a.var for a in state.axes}
    return not any(sym.sympify(a.extent).free_symbols & loop_vars
                   for a in state.axes if a.var is state.private)


def reduces_in_lanes(state):
    """Does the stage's epilogue hold a reduction member (its per-lane partials follow
    the write-back's vector loop)?"""
    epi = state.epilogue
    return epi is not None and any(f.definition.reduction is not None for f in epi.members)




def stores_across_lanes(state, var):
    """Does an elementwise-only epilogue store a member whose last (contiguous) index
    does not move with the write-back's vector loop `var` while another index does (a
    consumer writing T[j, i] from a tile with j on the vector lanes)?"""
    epi = state.epilogue
    if epi is None or any(f.definition.reduction is not None for f in epi.members):
        return False
    for f in epi.members:
        if not f.store:
            continue
        index = [sym.sympify(state.subst[f.to_root[x]]) if f.to_root[x] in state.subst
                 else sym.Integer(0) for x in f.definition.indices]
        moves = [var in ix.free_symbols for ix in index]
        if moves and not moves[-1] and any(moves):
            return True
    return False




# elementwise operations that cost a polynomial kernel each (backends/llvm/vmath.py)
TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "erf", "expm1", "log1p"})


def rows_rolled(state, back, last):
    """The write-back loops with its unrolled loops (the tile's rows) rolled, when the
    epilogue evaluates a polynomial kernel (tanh, exp, ...) on the tile, or None.
    Unrolled, the kernels of all the tile's vectors were interleaved, their constants,
    hoisted out of the nest, held registers through the micro-kernel, and its
    accumulators spilled (1024^3 with gelu_tanh: 12.3 ms on 1 thread, the matmul alone
    8.5). Rolled, the epilogue runs one row of vectors at a time on a copy of the tile
    in memory (stage.py copies it after the reduction: reading the accumulators at a
    rolled loop's index would keep them in memory through the micro-kernel too)."""
    epi = state.epilogue
    if epi is None or not any(isinstance(n, Op) and n.name in TRANSCENDENTAL
                              for f in epi.members
                              for n in walk_expr(f.definition.element)):
        return None
    if not any(a.kind is LoopKind.UNROLLED and a is not last for a in back):
        return None
    return [replace(a, kind=LoopKind.SERIAL) if a.kind is LoopKind.UNROLLED and a is not last
            else a for a in back]


def columns_outermost(back, last):
    """The write-back loops with the vector loop `last` moved outermost, every loop
    unrolled: each column of the tile is then written as its rows' consecutive
    elements of the transposed output, one cache line at a time. Lane by lane, row
    after row, a tile wrote W output rows a row's stride apart W times over: with a
    power-of-two stride they share an L1 set, and the 1024^3 matmul + bias stored
    transposed ran 3 ms (15%) slower than stored in place (1040 rows: 0.5 ms)."""
    rest = [replace(a, kind=LoopKind.UNROLLED) for a in back if a is not last]
    return [replace(last, kind=LoopKind.UNROLLED)] + rest




def fold_lanes(state, dtype, last, order):
    """The write-back's vector loop `last` (a register tile's row, several vectors wide)
    as an unrolled loop over its vectors around a loop of one vector: (substitution of
    last's variable, the two loops, the epilogue's lanes). A fused reduction then keeps
    one vector of partial results per element, not one per column of the tile: each
    tile's vectors are combined in registers before they meet the partials in memory
    (a 4096 x 1000 argmax over a 64-column AVX-512 tile kept 64 values and 64 positions
    per row, re-read and re-written by every column block of the matmul). None when the
    loop is one vector wide already."""
    width, w = int(last.extent), target().lanes(dtype)
    if width <= w or width % w:
        return None
    vec = Index(unique_name(last.var.name + "v", {a.name for a in state.axes}))
    lane = Index(unique_name(last.var.name + "l", {a.name for a in state.axes}))
    sub = {last.var: w * vec + lane}
    loops = [replace(last, var=vec, extent=sym.Integer(width // w), reduction=False,
                     kind=LoopKind.UNROLLED),
             replace(last, var=lane, extent=sym.Integer(w), reduction=False)]
    at_last = [n for n, (v, _) in enumerate(order) if v is last.var]
    if at_last:
        n = at_last[0]
        order = order[:n] + ((vec, sym.Integer(width // w)), (lane, sym.Integer(w))) + order[n + 1:]
    return sub, loops, (lane, w, order)




def reading(expr, old, new):
    """expr (or a dict of them) with its reads of buffer `old` reading `new` instead."""
    if isinstance(expr, dict):
        return {k: reading(v, old, new) for k, v in expr.items()}

    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor is old:
            return Access(new, node.index)
        return node
    return rebuild(expr, fn)


def substituted(expr, sub):
    """expr with the loop variables of `sub` replaced in its accesses' indices (a
    sliced root's {slice: value} too)."""
    if isinstance(expr, dict):
        return {k: substituted(v, sub) for k, v in expr.items()}

    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access):
            return Access(node.tensor, [sym.sympify(ix).xreplace(sub) for ix in node.index])
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(sub))
        return node
    return rebuild(expr, fn)

"""Long floating-point totals in blocks, each from zero: close to the accuracy of numpy's
pairwise sum, at the speed of one pass.

A scalar loop `for k in 0..E: acc += f(k)` over floats, reassociated (fast math), is
vectorized by LLVM into a few vector accumulators that each add E/64 terms one after
another, the first of them starting from `acc`'s running total: float32 over a million
copies of 0.1 was 1.5e-4 off (numpy, pairwise: 6e-8). Cut into superblocks of FAN blocks
of BLOCK terms,

    for kbb in 0..ceil(E / (FAN*BLOCK)):
      sup = 0
      for kb in 0..min(FAN, blocks left):
        blk = 0
        for k in the block's BLOCK terms: blk += f(k)
        sup += blk
      acc += sup

each block's lanes add BLOCK/64 terms from zero, a superblock FAN block sums, and the
running total one superblock sum per FAN*BLOCK terms (float32, 1e6 copies of 0.1:
2.3e-6 off with blocks alone, 8.7e-7 now, numpy.einsum 5.1e-6; 1e7 uniform values:
4.1e-7 -> 1.1e-7, numpy.einsum 1.1e-6).

A total over several indices (`ij->`) is a nest of such loops. Every row (an iteration
of a level with levels inside it) sums from zero and adds its sum to the level around
it once; rows that may be long (a size the kernel learns at its call) are cut into
blocks when they are, in a version of the nest of their own (`if n_j > 4096:  # long
rows`); the outer level takes rows ROWS at a time into blocks, FAN blocks into
superblocks. Float32 `ij->` of 100000 x 30 uniform values: 2.1e-5 -> 9.4e-8 off
(numpy.einsum 1.6e-7), and 840 -> 254 us: the running
total no longer rides through every row's vector accumulators. Only a nest of serial
reduction loops that the schedule left plain, each holding only the next, around one
sum into an element that none of them moves, changes; printed nests show the blocks.
The price is compile time: LLVM takes 63 ms on a two-index total's two versions of the
nest where it took 18 on the plain one (a first `ij->` call 23 -> 74 ms; three indices
23 -> 86 ms).
"""
import numpy as np
import tex.symbolic as sym

from tex.expr import Access, AutoParts, CeilDiv, Const, Index, Min
from tex.indices import greater, negation

from .ir import Buffer, Guard, Loop, LoopKind, Scope, Store, Update, children, \
    symbols_of, unique_name, walk

BLOCK = 4096        # terms a block adds from zero
FAN = 64            # blocks a superblock adds from zero
ROWS = 64           # terms a block adds when each is a sum itself (a row of `ij->`)
MAX_PARTS = 4 * 256     # AutoParts at most: four a thread (runtime.PART_RULES), 256 threads


def blocked_sums(kernel):
    """The kernel with its long float totals in blocks (module docstring): the sums that
    no other loop encloses (a total, a dot product). A row sum inside its row loop
    keeps its plain loop: blocks cost each row 2-4 ns (float32 384 x 512 row sums,
    7.0 -> 8.0 us), and a row rarely has the millions of terms where they matter."""
    used = {n.var.name for n in walk(kernel) if isinstance(n, Loop)}
    (out,) = _outermost(kernel, used)
    return out


def _outermost(node, used, parts=None):
    """`node` with its totals blocked, as a tuple of statements. Within the parallel
    loop over a split total's parts (`parts`: its variable) each part's sum is a total
    too (a dot product of a million terms in eight parts: 125,000 terms a part)."""
    if isinstance(node, Loop):
        nest = _sum_nest(node)
        if nest is not None and parts is not None and not _a_part(nest[1], parts):
            nest = None
        if nest is None and parts is None and node.kind is LoopKind.PARALLEL:
            body = tuple(n for c in node.body for n in _outermost(c, used, node.var))
            same = len(body) == len(node.body) and all(a is b for a, b in zip(body, node.body))
            return (node if same else node.replace(body=body),)
        if nest is None or not _many_terms(nest[0]):
            return (node,)
        loops, update = nest
        row = loops[-1]
        long_rows = greater(row.extent, BLOCK) if len(loops) > 1 and _long(row, BLOCK) \
            else sym.false
        if long_rows in (sym.true, sym.false) or \
                any(loop.var in symbols_of(row.extent) for loop in loops):
            return _level(loops, update, update.buffer, update.index, used, True)
        # rows that may be long: a version of the nest with them in blocks and one
        # without, chosen once (a test in the innermost loop, which LLVM's O3 unswitches
        # through every loop around it, took 0.33 s of LLVM for a six-index total)
        return (Guard(long_rows, _level(loops, update, update.buffer, update.index, used,
                                        True, long_rows=True), note="long rows"),
                Guard(negation(long_rows), _level(loops, update, update.buffer,
                                                  update.index, used, True,
                                                  long_rows=False), note="short rows"))
    body = children(node)
    if not body:
        return (node,)
    new = tuple(n for c in body for n in _outermost(c, used, parts))
    if len(new) == len(body) and all(a is b for a, b in zip(new, body)):
        return (node,)
    return (node.replace(body=new),)


def _a_part(update, var):
    """Whether `update` sums into the part `var` of a split total's partials."""
    return update.buffer.scope is not Scope.OUTPUT and update.index[:1] == (var,)


def _sum_nest(loop):
    """([the nest's loops, outermost first], the sum at its heart), or None when `loop`
    is not such a nest (module docstring)."""
    loops, node = [], loop
    while isinstance(node, Loop):
        if not (node.kind is LoopKind.SERIAL and node.reduction and node.plan is None
                and len(node.body) == 1):
            return None
        loops.append(node)
        node = node.body[0]
    u = node
    if not (isinstance(u, Update) and u.combiner == "sum" and u.arg is None and u.fast_math
            and np.dtype(u.buffer.dtype).kind == "f"):
        return None
    moved = {x for ix in u.index for x in symbols_of(ix)}
    if any(loop.var in moved for loop in loops):
        return None
    return loops, u


def _many_terms(loops):
    """Whether the nest may add more than BLOCK terms. A call-time part count (the merge
    of a split's parts) is at most MAX_PARTS."""
    extents = [sym.Integer(MAX_PARTS) if isinstance(loop.extent, AutoParts)
               else sym.sympify(loop.extent) for loop in loops]
    return not (all(e.is_Integer for e in extents) and
                int(np.prod([int(e) for e in extents])) <= BLOCK)


def _long(loop, size):
    """Whether the loop may run more than `size` times (an extent that is a constant,
    or a Min with one, of at most `size` cannot: a split's tail loop)."""
    extent = sym.sympify(loop.extent)
    bounds = extent.args if isinstance(extent, sym.Min) else (extent,)
    return not any(b.is_Integer and int(b) <= size for b in bounds)


def _level(loops, update, target, index, used, outermost=False, long_rows=None):
    """The statements of `loops[0]`'s level, adding its terms into target[index];
    `long_rows`: whether the innermost rows are longer than BLOCK (None: a test)."""
    loop, inner = loops[0], loops[1:]
    dtype = update.buffer.dtype
    extent = sym.sympify(loop.extent)
    size = ROWS if inner else BLOCK     # each of a nest's outer terms is a row's sum

    def into(acc, acc_index):           # the level's body, adding into acc[acc_index]
        if inner:
            return _level(inner, update, acc, acc_index, used, long_rows=long_rows)
        return (Update(acc, acc_index, "sum", update.value, update.fast_math),)

    def local(what):
        return Buffer(f"{update.buffer.name}_{loop.var.name}{what}", (), dtype, Scope.LOCAL)

    def from_zero(acc, statements, total, total_index):   # acc's terms, then one add
        return (Store(acc, (), Const(0, dtype)), *statements,
                Update(total, total_index, "sum", Access(acc, ()), update.fast_math))

    def elements(first, acc):           # the level's terms from `first` on, at most `size`
        return loop.replace(start=loop.start + first, extent=Min(size, extent - first),
                            body=into(acc, ()))

    def blocks(total, total_index):     # blocks of `size`, or superblocks of FAN blocks
        block, blk = Index(_fresh_name(loop.var.name + "b", used)), local("_blk")
        if extent.is_Integer and int(extent) <= FAN * size:
            return (Loop(block, CeilDiv(extent, size),
                         from_zero(blk, (elements(block * size, blk),), total, total_index),
                         reduction=True),)
        superblock, sup = Index(_fresh_name(loop.var.name + "bb", used)), local("_sup")
        in_blocks = Loop(block, Min(FAN, CeilDiv(extent - superblock * (FAN * size), size)),
                         from_zero(blk, (elements((superblock * FAN + block) * size, blk),),
                                   sup, ()), reduction=True)
        return (Loop(superblock, CeilDiv(extent, FAN * size),
                     from_zero(sup, (in_blocks,), total, total_index), reduction=True),)

    if not _long(loop, size) or (inner and not outermost):
        if outermost:
            return (loop.replace(body=into(target, index)),)
        # a row of a nest: its own sum; only the innermost rows get blocks when long
        # (versions at every level would double the code a level: 7 levels, 64 copies)
        part = local("_part")
        return from_zero(part, (loop.replace(body=into(part, ())),), target, index)
    if outermost:
        return blocks(target, index)
    part = local("_part")                     # a row that may be long: blocks if it is
    long_row = greater(extent, size) if long_rows is None else sym.true if long_rows \
        else sym.false
    row = from_zero(part, (loop.replace(body=into(part, ())),), target, index)
    if long_row is sym.false:
        return row
    in_blocks = from_zero(part, blocks(part, ()), target, index)
    if long_row is sym.true:
        return in_blocks
    return (Guard(long_row, in_blocks, note="long row"),
            Guard(negation(long_row), row, note="short row"))


def _fresh_name(base, used):
    name = unique_name(base, used)
    used.add(name)
    return name

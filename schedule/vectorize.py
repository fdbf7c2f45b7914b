"""The vector plan of a scheduled loop nest, as a pass `Kernel -> Kernel` (Halide's
VectorizeLoops): every decision about vector code is made here, recorded on the loops
(`Loop.plan`), printed by `print(s)` and read by the LLVM emitter, which decides
nothing of its own.

    for each VECTOR loop:     its VectorPlan (vector_plan.py: width, unroll, the
                              accesses that move with it, reductions and their vector
                              accumulators, VNNI dots, whole local buffers), or, when its
                              body cannot run on vectors, a SERIAL loop with the reason
                              (`Scalar`); `s[C].vectorize(j)` refuses such a loop at
                              once with that reason
    full tiles:               a SERIAL loop `jo` around vector loops of extent
                              Min(c, A - c*jo) (the last tile of a split is shorter)
                              becomes two loops: jo < floor(A/c), where every tile is
                              whole and its vector loops have the constant extent c (one
                              vector, no tail test), then the rest (`Peeled`)
    transposed rows:          a SERIAL loop `for j` whose body is one vector loop reading
                              rows across its lanes (the inner-parallel reduction
                              `for j: for ii (vector): acc[ii] += X[ii, j]`) loads blocks
                              of K columns of the W rows and transposes them in registers
                              (`Transposed`)

A plan describes the loop it was made for: `Loop.replace` drops it, and the pass plans
again whatever lacks one (it is idempotent on a planned nest).
"""
import functools
import weakref

import tex.symbolic as sym

from tex.expr import Access, Min, all_of, at_least, negation, walk as walk_expr
from tex.records import record

from .edge_tiles import partial_tile_versions
from .ir import Guard, Loop, LoopKind, Store, Update, map_nest, walk
from .target import target
from .vector_plan import affine_coefficient, itemsize, plan_vector_loop, sum_partials

USE_VNNI = True          # int8 sums by vpdpbusd where the target has it (tests turn it off)


@record
class Scalar:
    """A loop scheduled VECTOR that runs on scalars, and why."""
    reason: str

    def describe(self):
        return f"scalar: {self.reason}"


@record
class Peeled:
    """One of the two loops a full-tile peel makes: "full" (its vector loops have a
    constant extent) or "rest"."""
    part: str

    def describe(self):
        return "whole tiles" if self.part == "full" else "the last tile"


@record(eq=False)
class Transposed:
    """The serial loop around one vector loop whose `rows` (reads that move with the
    lanes and with this loop) load as transposed blocks of `block` columns."""
    rows: tuple
    block: int

    def describe(self):
        names = ", ".join(dict.fromkeys(a.tensor.name for a in self.rows))
        return f"rows of {names} transposed in blocks of {self.block} columns"


def plan_vectors(kernel, fast_math=True):
    """The kernel with a plan on every VECTOR loop and on the loops around them. A
    kernel this returned comes back as it is (for the same target and fast_math): the
    code generator plans what it is given, most often a kernel planned already (a
    symbolic matmul's nine nests: 33 ms a build)."""
    how = (fast_math, target(), USE_VNNI)
    done = _PLANNED.get(id(kernel))
    if done is not None and done[0]() is kernel and done[1] == how:
        return kernel
    planned = _plan_vectors(kernel, fast_math)
    key = id(planned)
    _PLANNED[key] = (weakref.ref(planned, lambda _: _PLANNED.pop(key, None)), how)
    return planned


_PLANNED = {}       # id(kernel) -> (weak reference to it, (fast_math, target, USE_VNNI))


def _plan_vectors(kernel, fast_math):
    partials = sum_partials(kernel)
    vnni = target().vnni_widths if USE_VNNI else ()

    def vector(loop):
        plan = plan_vector_loop(loop, fast_math, partials=partials, vnni=vnni)
        if isinstance(plan, str):
            return loop.replace(kind=LoopKind.SERIAL, plan=Scalar(plan))
        if plan.width < 2:
            return loop.replace(kind=LoopKind.SERIAL, plan=Scalar("one lane"))
        return loop.replace(plan=plan)

    kernel = kernel.replace(body=tuple(_whole_tiles(s) for s in kernel.body))
    kernel = map_nest(kernel, _hoist_guard)

    def visit(node):
        if not isinstance(node, Loop) or node.plan is not None:
            return node
        if node.kind is LoopKind.VECTOR:
            return vector(node)
        if node.kind is not LoopKind.SERIAL:
            return node
        transposed = _transposed(node, fast_math)
        if transposed is not None:
            return node.replace(plan=transposed)
        peeled = _peel_full_tiles(node)
        if peeled is not None:
            full, rest = peeled
            return (map_nest(full, visit).replace(plan=Peeled("full")),
                    rest.replace(plan=Peeled("rest")))
        return node
    return map_nest(kernel, visit)


def vector_refusal(loop, fast_math=True):
    """Why `loop` (a VECTOR loop) cannot run on vector registers, or None."""
    plan = plan_vector_loop(loop, fast_math)
    return plan if isinstance(plan, str) else None


# ---------------------------------------------------------------- whole tiles

TILE_KINDS = (LoopKind.UNROLLED, LoopKind.VECTOR)
WHOLE, PARTIAL = "whole tile", "partial tile"


def _whole_tiles(node, in_tile=False, versions=True):
    """Split each tile -- a nest of unrolled and vector loops of constant extent, such as
    a register tile's write-back or a row of a packed panel -- whose statements are
    guarded (the tile may pass the tensor's edge) into `if W: the nest without its
    guards` and `if not W: the nest as it was`, where W says every guard holds (or,
    for a guard that writes the padding, fails) for the whole tile. Most tiles are
    whole, and their vector code then needs no masks (AMD's masked stores cost ~20
    cycles each: a 6 x 16 write-back with masks took longer than 256 steps of its
    micro-kernel... took 136 ns a tile here)."""
    if isinstance(node, Guard) and node.note in (WHOLE, PARTIAL):
        return node
    tile = _is_tile(node)
    # a tile nest, or one loop around tile nests (a micro-kernel's k loop, a packed
    # copy's loop over k): the test then runs once before that loop
    around = isinstance(node, Loop) and not tile and all(
        _is_tile(n) for c in node.body for n in walk(c) if isinstance(n, Loop))
    if (tile or around) and not in_tile:
        split = _split_whole(node, versions)
        if split is not None:
            return split
    body = getattr(node, "body", None)
    if not body:
        return node
    new = []
    for child in body:
        r = _whole_tiles(child, in_tile or tile, versions)
        new.extend(r if isinstance(r, tuple) else (r,))
    if len(new) == len(body) and all(a is b for a, b in zip(new, body)):
        return node                      # (a rebuilt loop would lose its plan)
    return node.replace(body=tuple(new))


def _hoist_guard(node):
    """`for v: if A: S` (an unrolled or vector loop whose body is one guard, A without v)
    as `if A: for v: S`. The rows of a partial register tile (`if row < M` inside the
    unrolled rows' vector loop) were tested, and their addresses and broadcasts of A
    made again, for each vector of a row: the partial tile of a 256^2 matmul was 560 of
    its 1216 instructions. A guard that also tests v stays whole: it is a mask, and
    the masks of a row are made once for all rows."""
    if not (isinstance(node, Loop) and node.kind in TILE_KINDS and len(node.body) == 1):
        return node
    guard = node.body[0]
    if not isinstance(guard, Guard) or guard.note or guard.choice or \
            node.var in sym.sympify(guard.cond).free_symbols:
        return node
    # (again on the loop: a guard nested in this one that does not test v moves out
    # too, so that one pass is the whole rewrite and planning stays idempotent)
    return guard.replace(body=(_hoist_guard(node.replace(body=guard.body)),))


def _is_tile(node):
    return isinstance(node, Loop) and node.kind in TILE_KINDS and \
        sym.sympify(node.extent).is_Integer and sym.sympify(node.start).is_Integer


def _split_whole(loop, versions=True):
    """(Guard(W, unguarded nest), Guard(not W, nest)) for a tile nest (or one loop around
    tile nests, when W does not depend on that loop), or None when it holds no guard
    whose truth over the tiles can be decided before it."""
    ranges = {}
    for n in walk(loop):
        if isinstance(n, Loop) and n is not loop or _is_tile(n):
            if not _is_tile(n):
                return None
            ranges[n.var] = (int(n.start), int(n.start) + int(n.extent) - 1)
    guards = [n for n in walk(loop) if isinstance(n, Guard)]
    spans = tuple(ranges.items())
    holds = {id(g): _over_tile(g.cond, spans, True) for g in guards}
    fails = {id(g): _over_tile(g.cond, spans, False) for g in guards}
    # W: every guard holds, except one that fails where the others hold (the padding of
    # a packed copy: `if inside: copy` then `if not inside: 0`)
    terms = set()
    for g in guards:
        if fails[id(g)] and terms and fails[id(g)] <= terms:
            continue
        if holds[id(g)] is not None:
            terms |= holds[id(g)]
    if not terms or any(loop.var in t.free_symbols for t in terms):
        return None
    whole = all_of(*terms)
    if whole is sym.false:
        return None                                      # (constant sizes: never whole)

    def strip(node):
        if isinstance(node, Guard):
            if holds[id(node)] is not None and holds[id(node)] <= terms:
                return node.body                         # true on the whole tile
            if fails[id(node)] is not None and fails[id(node)] <= terms:
                return ()                                # false on the whole tile
        return node
    if whole is sym.true:
        return (map_nest(loop, strip),)
    # a partial tile that reads B in place: versions of fewer vectors (edge_tiles), each
    # split in turn (its whole tile is a width of exactly that many vectors)
    edge = partial_tile_versions(loop) if versions else None
    partial = (loop,) if edge is None else (edge[0],) + tuple(
        v.replace(body=tuple(_flat(_whole_tiles(c, versions=False) for c in v.body)))
        for v in edge[1:])
    return (Guard(whole, (map_nest(loop, strip),), WHOLE),
            Guard(negation(whole), partial, PARTIAL))


def _flat(results):
    return [n for r in results for n in (r if isinstance(r, tuple) else (r,))]


@functools.lru_cache(maxsize=4096)
def _over_tile(cond, spans, value):
    """The conditions (a frozenset of relations `e >= 0`, e an integer expression in the
    variables outside the tile) under which `cond` is `value` at every point of the
    tile (its variables in `spans`: ((var, (first, last)), ...)), or None when `cond` is
    not a conjunction (for True) or disjunction (for False) of affine relations in them.
    Memoized: the same guards come back in each nest of a kernel's specializations (a
    matmul's first compile asks 126 times, 72 of them distinct)."""
    ranges = dict(spans)
    parts = (sym.And if value else sym.Or).make_args(cond)
    out = set()
    for r in parts:
        want = value
        if isinstance(r, sym.Not):
            r, want = r.args[0], not value
        if not isinstance(r, (sym.StrictLessThan, sym.LessThan, sym.StrictGreaterThan,
                              sym.GreaterThan)):
            return None
        # r holds <=> d > 0 (strict) or d >= 0, with d affine in the tile's variables
        d = r.rhs - r.lhs if isinstance(r, (sym.StrictLessThan, sym.LessThan)) else r.lhs - r.rhs
        strict = isinstance(r, (sym.StrictLessThan, sym.StrictGreaterThan))
        picks = {}                   # d where it is smallest (to hold) or largest (to fail)
        for v, (lo, hi) in ranges.items():
            c = affine_coefficient(d, v)
            if c is None or not c.is_number:
                return None
            if c:
                picks[v] = sym.Integer((lo if c > 0 else hi) if want else (hi if c > 0 else lo))
        worst = d.xreplace(picks)
        if worst.free_symbols & set(ranges):
            return None
        # as `e >= 0` over the integers: holding, d > 0 is d - 1 >= 0; failing, d >= 0
        # fails when -d - 1 >= 0 and d > 0 fails when -d >= 0
        e = (worst - 1 if strict else worst) if want else (-worst if strict else -worst - 1)
        out.add(at_least(e if _expanded(e) else sym.expand(e), 0))
    return frozenset(out)


def _expanded(e):
    """Is `e` a sum of products none of which holds a sum (what sym.expand gives, and
    what the relations of tile guards nearly always are already: expand was half of
    _over_tile's time)?"""
    for node in sym.preorder_traversal(e):
        if isinstance(node, sym.Mul) and any(isinstance(f, sym.Add) for f in node.args):
            return False
        if isinstance(node, sym.Pow) and isinstance(node.base, sym.Add):
            return False
    return True


# ---------------------------------------------------------------- full tiles

def _peel_full_tiles(loop):
    """(full, rest) for a loop `jo` holding vector loops of extent Min(c, A - c*jo) as
    direct children, or None: full runs jo < floor(A/c) with the extents c, rest the
    remaining iterations as they were."""
    jo = loop.var
    tiles, split = {}, None
    inner_vars = {n.var for n in walk(loop) if isinstance(n, Loop)}
    children = {id(c) for c in loop.body}
    for n in walk(loop):
        if not (isinstance(n, Loop) and n.kind is LoopKind.VECTOR):
            continue
        e = sym.sympify(n.extent)
        if jo not in e.free_symbols:
            continue
        if id(n) not in children:
            return None          # copies of deeper loops: more code than the tests save
        if not isinstance(e, sym.Min) or len(e.args) != 2:
            return None
        c = next((x for x in e.args if x.is_Integer), None)
        rest = next((x for x in e.args if not x.is_Integer), None)
        if c is None or rest is None or c <= 0 or affine_coefficient(rest, jo) != -c:
            return None
        bound = sym.floor(sym.expand(rest + c * jo) / c)       # jo < bound: A - c*jo >= c
        if bound.free_symbols & inner_vars:
            return None                                       # not known before the loop
        tiles[e] = c
        split = bound if split is None else Min(split, bound)
    if not tiles:
        return None

    def whole(node):
        if isinstance(node, Loop) and node.kind is LoopKind.VECTOR and \
                sym.sympify(node.extent) in tiles:
            return node.replace(extent=tiles[sym.sympify(node.extent)])
        return node
    start, end = sym.sympify(loop.start), sym.sympify(loop.start) + sym.sympify(loop.extent)
    mid = Min(sym.Max(split, start), end)
    full = map_nest(loop, whole).replace(extent=mid - start)
    rest = loop.replace(start=mid, extent=end - mid)
    return full, rest


# ---------------------------------------------------------------- transposed rows

def _transposed(loop, fast_math):
    """The Transposed plan of `for j: V` (V one vector loop, not reducing along its
    lanes, whose reads of rows move across the lanes and by one along j), or None."""
    if len(loop.body) != 1:
        return None
    inner = loop.body[0]
    if not isinstance(inner, Loop) or inner.kind is not LoopKind.VECTOR:
        return None
    j = loop.var
    if j in sym.sympify(inner.start).free_symbols | sym.sympify(inner.extent).free_symbols:
        return None
    plan = inner.plan if inner.plan is not None else plan_vector_loop(inner, fast_math)
    if isinstance(plan, str) or not hasattr(plan, "width") or plan.reductions or \
            plan.width < 2 or plan.unroll != 1:
        return None
    found = _transposable(inner, plan, j)
    return None if found is None else Transposed(tuple(found[0]), found[1])


def _transposable(inner, plan, j):
    """The reads of the vector loop `inner` to load as transposed blocks (they move
    with the lanes and with j, from buffers the loop does not write, and a register of
    their elements holds W of them) and the block's columns, or None when the loop does
    not fit the pattern: statements whose targets move with j, guards on j, other reads
    that move with j and the lanes."""
    var, w = inner.var, plan.width
    if w & (w - 1):
        return None
    out, blocks = [], set()
    for s in walk(inner):
        if isinstance(s, Guard) and j in s.cond.free_symbols:
            return None
        if not isinstance(s, (Store, Update)):
            continue
        targets = [(s.buffer, s.index)] + ([(s.arg.buffer, s.arg.index)]
                                            if getattr(s, "arg", None) else [])
        if any(j in sym.sympify(ix).free_symbols for _, index in targets for ix in index):
            return None
        values = [s.value] + ([s.arg.position] if getattr(s, "arg", None) else [])
        for v in values:
            for a in walk_expr(v):
                if not isinstance(a, Access):
                    continue
                along_j = any(affine_coefficient(ix, j) != 0 for ix in a.index)
                across = any(affine_coefficient(ix, var) != 0 for ix in a.index)
                if not (along_j and across):
                    continue
                if id(a.tensor) in plan.written:
                    return None
                # K columns: W*K elements in at most 16 registers
                blocks.add(max(2, min(w, 16 * plan.bits // (8 * w * itemsize(a.dtype)))))
                out.append(a)
    if not out or len(blocks) != 1:
        return None
    return out, blocks.pop()

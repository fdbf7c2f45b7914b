"""A register tile at the matrix's edge computes only the vectors of columns it has.

The blocked contraction's micro-kernel updates a tile of MR rows x NR columns (NR = C
vectors of W lanes) for every step of k,

    for k: for row in MR (unrolled): for col in NR (vector): acc[row, col] += A * B

and the write-back after it stores the columns inside the matrix (`col + NR*t < rem`
masks the rest). At the right edge of a matrix whose width NR does not divide, the
tile still computed all NR columns: 123 x 51234 @ 51234 x 456 (456 = 7 x 64 + 8) took
32.3 ms on one thread, 448 columns 27.9 ms, 512 columns 32.7. Here the update loop is
chosen by the columns the tile has, c vectors for (c-1)*W < rem <= c*W:

    if rem > (C-1)*W: the loop as it was
    if rem <= W: the loop over one vector
    ...

Each version is straight-line code over constant offsets, so its tile stays in
registers. The columns a version skips stay zero and are masked at the write-back; the
packed panel of B it reads is padded with zeros past the edge.

A tile that reads B in place (the few-rows stream of auto.py) guards its update by the
matrix's edge instead (`if col + NR*t < N`). Its versions are made inside its partial
tile (`partial_tile_versions`, called by vectorize._whole_tiles, which splits each
version again: a width of exactly c vectors runs unmasked); in a version, the vectors
before the last run without that bound and the last keeps the guard (`_columns`). On
AVX-512, one thread, 5 x 1000 @ 1000 x N (with vector.unit_steps_test; numpy 4.5 us at
N = 16 to 16 at N = 64): N = 16 13.3 -> 4.7 us (7.5 with the test alone), 32 15.4 ->
5.4 (8.1), 47 18.8 -> 6.2, 48 15.7 -> 5.6 (9.0), 100 20 -> 7.9 (10.7), 1000 81 -> 66;
3 x 1000 x 40 7.9 -> 4.8; whole tiles alike within noise (N = 64 5.2 -> 5.3, 3 x 1000 x
64 4.5 -> 4.4; 4.9 -> 5.2 with the versions beside the whole tile). The AVX2 tile's k loop
is unrolled (four rows of B a pass), which this does not take: there the versions cost
8-13% at N a multiple of 16 (even inside the partial tile) for 1.2-1.7x elsewhere (5 x
1000 x 24 10.8 -> 6.4 us), so they were left out.

Only an update loop of that shape (a reduction loop around an unrolled loop around a
vector loop of constant extent updating a LOCAL tile, nothing else but that guard) whose
write-back or guard masks by its vector variable changes.
"""
import tex.symbolic as sym

from tex.indices import all_of, greater, less

from .ir import Guard, Loop, LoopKind, Scope, Update, VectorTail, children, walk
from .target import target


def edge_tiles(kernel):
    """The kernel with its edge tiles' update loops versioned (module docstring)."""
    return _rewrite(kernel)


def _rewrite(node):
    body = children(node)
    if not body or isinstance(node, Guard) and (node.note or "").startswith("edge tile"):
        return node                 # (versions made already: the pass is idempotent)
    new = []
    for n, child in enumerate(body):
        child = _rewrite(child)
        rem = _edge_width(child, body[n + 1:])
        new.extend(_versions(child, rem) if rem is not None else (child,))
    new = tuple(new)
    return node if len(new) == len(body) and all(a is b for a, b in zip(new, body)) \
        else node.replace(body=new)


def _tile_update(loop):
    """The vector loop of `loop` when it is a tile's update loop, else None."""
    if not (isinstance(loop, Loop) and loop.kind is LoopKind.SERIAL and loop.reduction
            and len(loop.body) == 1):
        return None
    rows = loop.body[0]
    if not (isinstance(rows, Loop) and rows.kind is LoopKind.UNROLLED and len(rows.body) == 1):
        return None
    cols = rows.body[0]
    if not (isinstance(cols, Loop) and cols.kind is LoopKind.VECTOR and
            cols.tail is VectorTail.MASK and sym.sympify(cols.extent).is_Integer and
            sym.sympify(cols.start) == 0 and len(cols.body) == 1):
        return None
    u = _lane_guarded(cols)[1]
    if not (isinstance(u, Update) and u.buffer.scope is Scope.LOCAL and u.arg is None):
        return None
    return cols


def _lane_guarded(cols):
    """(the columns the guard of the update keeps, or None; the update) of a tile's vector
    loop `cols`: a tile that reads B in place (the few-rows stream) guards its update by
    the matrix's edge, `cols.var + X < Y`; a tile over a zero-padded panel does not."""
    u = cols.body[0]
    if isinstance(u, Guard) and len(u.body) == 1 and not u.choice:
        rem = _lane_bound(u.cond, cols.var)
        return (rem, u.body[0]) if rem is not None else (None, None)
    return None, u


def _edge_width(loop, after):
    """The columns the tile has (`rem`, from its write-back's mask in `after`), when
    `loop` is a tile's update loop and the tile is more than one vector wide."""
    cols = _tile_update(loop)
    if cols is None:
        return None
    rem, u = _lane_guarded(cols)
    lanes = target().lanes(u.buffer.dtype)
    if int(cols.extent) <= lanes or int(cols.extent) % lanes:
        return None
    if rem is not None:
        return None             # versioned in its partial tile (partial_tile_versions)
    for stmt in after:
        for n in walk(stmt):
            if isinstance(n, Loop) and n.var == cols.var and n.kind is LoopKind.VECTOR:
                for g in walk(n):
                    if isinstance(g, Guard):
                        rem = _lane_bound(g.cond, cols.var)
                        if rem is not None:
                            return rem
    return None


def _lane_bound(cond, var):
    """`Y - X` of a conjunct `var + X < Y` of `cond` (X free of var), else None."""
    c = _lane_conjunct(cond, var)
    return None if c is None else c.rhs - (c.lhs - var)


def _lane_conjunct(cond, var):
    """The conjunct `var + X < Y` of `cond` (X, Y free of var), else None."""
    for c in sym.And.make_args(cond):
        if isinstance(c, sym.StrictLessThan) and var in c.lhs.free_symbols and \
                var not in c.rhs.free_symbols and var not in (c.lhs - var).free_symbols:
            return c
    return None


def partial_tile_versions(loop):
    """The versions of a tile's update loop that reads B in place (guarded by the matrix's
    edge), for the partial tile of vectorize._whole_tiles, or None: the whole tile keeps
    the loop as it is, never beside versions it does not run."""
    cols = _tile_update(loop)
    if cols is None:
        return None
    rem, u = _lane_guarded(cols)
    lanes = target().lanes(u.buffer.dtype)
    if rem is None or int(cols.extent) <= lanes or int(cols.extent) % lanes:
        return None
    # the versions stand outside `loop`: a width that moves with a loop of the tile (a
    # guard on a split of k, say) is no tile's width
    inside = {n.var for n in walk(loop) if isinstance(n, Loop)}
    return None if sym.sympify(rem).free_symbols & inside else _versions(loop, rem)


def _versions(loop, rem):
    """The update loop as Guards by the tile's width `rem` (module docstring)."""
    cols = _tile_update(loop)
    edge, update = _lane_guarded(cols)
    guarded = edge is not None
    lanes = target().lanes(update.buffer.dtype)
    count = int(cols.extent) // lanes
    out = []
    for c in (count, *range(1, count)):
        if c == count and not guarded:
            version = loop
        else:
            rows = loop.body[0].replace(body=_columns(cols, c, lanes, guarded))
            version = loop.replace(body=(rows,))
        cond = greater(rem, (count - 1) * lanes) if c == count else \
            all_of(greater(rem, (c - 1) * lanes), less(rem, c * lanes, strict=False)) \
            if c > 1 else less(rem, lanes, strict=False)
        note = "edge tile" if c == count else f"edge tile: {c} of {count} vectors"
        out.append(Guard(cond, (version,), note=note))
    return tuple(out)


def _columns(cols, vectors, lanes, guarded):
    """The vector loops of a version of `vectors` vectors of `cols`. With the update
    guarded by the matrix's edge, the vectors before the last are inside it (the
    version's width says so): they run without that bound, and only the last vector
    is masked."""
    if not guarded:
        return (cols.replace(extent=sym.Integer(vectors * lanes)),)
    guard = cols.body[0]
    inner = (vectors - 1) * lanes
    last = cols.replace(start=sym.Integer(inner), extent=sym.Integer(lanes))
    if not inner:
        return (last,)
    bound = _lane_conjunct(guard.cond, cols.var)
    rest = [c for c in sym.And.make_args(guard.cond) if c is not bound]
    body = guard.body if not rest else (guard.replace(cond=all_of(*rest)),)
    return (cols.replace(extent=sym.Integer(inner), body=body), last)

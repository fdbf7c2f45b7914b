"""The BLIS-style schedule of a contraction, written with the ordinary primitives.

A contraction C[.., i, j] = sum_k f(A[.. i .. k ..], B[.. k .. j ..]) has an index j
that only B reads (C's last index, so C's rows are written with vectors), an index i
that only A reads, and a reduced index k that both read. Its blocked schedule
(Goto's algorithm, as BLIS runs it) is

    for batch..:                                   (indices both operands read)
      for jc in N / NC:                            parallel
        for kc in K / KC:                          reduction
          pack B[kc-block, jc-block] -> B_pack[jr, k, jj]       (zero-padded micro-panels)
          for ic in M / MC:                        parallel
            pack A[ic-block, kc-block] -> A_pack[ir, k, ii]
            for jr in NC / NR:
              for ir in MC / MR:
                for k in KC:                       the micro-kernel: MR x NR accumulators
                  for ii in MR:                    unrolled   stay in vector registers,
                    for jj in NR:                  vector     one FMA per register a step
                      acc[ii, jj] += A_pack[ir, k, ii] * B_pack[jr, k, jj]
                C[tile] += acc                     (guarded: the tile may pass M or N)

Every line of it is a step of `s.history`: `block_contraction` only calls split,
reorder, pack, unroll, vectorize and parallel, so a user can print it, replay it and
change it. The register tile comes from the register file (MR rows of NR/W vectors,
leaving registers for the B vectors and A's broadcast), KC and MC from L2 (a B
micro-panel and the packed A block, a quarter of it each), NC from L3 (see
default_blocking for why KC is not L1-sized). The tiles of i and j are split with
guard tails: the micro-kernel always runs
whole MR x NR tiles over the zero padding of the packed panels, and only the write
back to C checks the bounds, so tails cost no separate code path.
"""

import numpy as np
import tex.symbolic as sym

from tex.expr import Access, CeilDiv, walk as walk_expr
from tex.records import record

from .target import target


@record
class Roles:
    """Which index plays which part in a contraction (see the module docstring)."""
    i: object           # an output index read by A only
    j: object           # the last output index that only B reads
    k: object           # the reduced index both operands read
    a: object           # the tensor read with i (A)
    b: object           # the tensor read with j (B)
    batch: tuple        # output indices both operands read (loops outside the blocks)


def contraction_roles(defn):
    """The Roles of a sum of a product of two tensors' reads, or None (also when an
    operand is read at two indices: A[i, k] * B[k, j] * B[k, j + 1])."""
    red = defn.reduction
    if red is None or red.combiner != "sum" or len(defn.indices) < 2:
        return None
    reads = [n for n in walk_expr(red.body) if isinstance(n, Access)]
    tensors = list(dict.fromkeys(n.tensor for n in reads))
    if len(tensors) != 2 or len({(n.tensor, tuple(sym.expand(x) for x in n.index))
                                 for n in reads}) != 2:
        return None               # each operand read through one index (packing needs it)

    def readers(x):
        return {n.tensor for n in reads
                if x in set().union(*(sym.sympify(ix).free_symbols for ix in n.index))}
    j = next((x for x in reversed(defn.indices) if len(readers(x)) == 1), None)
    if j is None:
        return None
    (b,) = readers(j)
    a = next(t for t in tensors if t is not b)
    i = next((x for x in reversed(defn.indices) if x is not j and readers(x) == {a}), None)
    # k: a reduced index both read, preferably one each reads alone in a dimension (a
    # convolution's channels c, not its window r of x[b, c, t + r]): whatever the order
    # inside `over=`, the long reduction is blocked (conv1d: 15.6 against 6.8 ms)
    both = [x for x in red.over if readers(x) == {a, b}]
    plain = [x for x in both if all(sym.sympify(ix) == x for n in reads for ix in n.index
                                    if x in sym.sympify(ix).free_symbols)]
    k = (plain or both)[-1] if both else None
    if i is None or k is None:
        return None
    batch = tuple(x for x in defn.indices if x not in (i, j))
    return Roles(i, j, k, a, b, batch)


def operand_bytes(roles):
    return max(np.dtype(roles.a.dtype).itemsize, np.dtype(roles.b.dtype).itemsize)


def parallel_blocks(defn, roles, blocking):
    """How many blocks the threads share: the batch, and the ic and jc blocks."""
    blocks = CeilDiv(defn.extents[roles.i], blocking.mc) * \
        CeilDiv(defn.extents[roles.j], blocking.nc)
    for x in roles.batch:
        blocks = blocks * defn.extents[x]
    return blocks


@record
class Blocking:
    mr: int             # register tile rows (unrolled)
    nr: int             # register tile columns (a few vectors)
    kc: int             # reduction block (L2)
    mc: int             # rows of the packed A block (L2)
    nc: int             # columns of the packed B block (L3)


NARROW_MR = 12      # register tile rows at most with one or two vectors of columns
# the L3 a block may count on: a server's L3 as /sys reports it is the whole socket's,
# in slices spread over dozens of cores that other tenants run on (a 2-core VM of an
# Emerald Rapids Xeon sees 300 MiB: nc = 4096 made 2048^3 on 2 threads one column block
# for both threads, 169 GFLOP/s against 201 with the nc = 1024 of a 32 MiB L3 while
# numpy's BLAS worker spun on one CPU, 212 against 214 without it; 1 thread 3-8% slower)
L3_SHARED = 32 << 20


def default_blocking(dtype, operand_bytes, machine=None, vectors=None):
    """Block sizes for accumulators of `dtype` and operands of `operand_bytes` bytes an
    element, from the target's vector registers and caches (schedule/target.py):

    - MR x NR: NR/W vectors of MR rows of accumulators, plus the NR/W vectors of B and a
      broadcast of A in registers, with enough independent accumulators to cover the
      FMA latency: 6 x 2 vectors with 16 registers (12 accumulators), 6 x 4 with 32.
    - kc: a B micro-panel (kc x NR) in a quarter of L2, at most 1024 (and at most what
      lets eight tiles of rows of A fill half of L2): the micro-kernel
      streams it from L2 while it goes through A's micro-panels, and a long kc
      amortizes each tile's initialisation and write-back (measured: Zen 5, 1 MiB L2:
      kc = 1024 25% faster than an L1-sized 256; Zen 3, 512 KiB L2: 512 to 1024 alike,
      256 8% slower at 2048^3).
    - `vectors` (narrow products, fewer columns than the full tile): NR = that many
      vectors, MR up to NARROW_MR rows (2048 x 2048 @ 2048 x 16 on AVX-512 ran 4.7 ms
      as dot products and ~2.7 in a 12 x 16 tile; numpy 2.6).
    - mc: the packed A block (mc x kc) in a quarter of L2, or eight register tiles of
      rows if that still fits half of it; a multiple of MR, so that no tile of a block
      is padding (Zen 3: mc = 16 from the quarter rule made every third tile a third
      padding; 48 ran 1024^3 12% faster).
    - nc: the packed B block (kc x nc) in an eighth of L3, a multiple of NR: the L3 of
      a cloud machine is shared with other tenants' cores (Zen 3, 32 MiB L3: a 4 MiB
      B block ran 2048^3 at 87 GFLOP/s, 1 MiB at 94). L3 counts at most L3_SHARED
      (a server's whole-socket L3 is not one core's to use)."""
    machine = machine or target()
    registers = machine.vector_registers
    lanes = machine.lanes(dtype)
    if vectors is None:
        vectors = full_tile_vectors(machine)           # NR / W
        spare = 2 + _pair_registers(dtype, operand_bytes, machine)
        mr = (registers - vectors - spare) // vectors  # 6 (AVX-512 int8: 5) and AVX2 6
    else:
        mr = min(NARROW_MR, (registers - vectors - 2) // vectors)
    nr = vectors * lanes
    l2, l3 = machine.cache(2, 512 << 10), min(L3_SHARED, machine.cache(3, 8 << 20))
    # (and short enough that eight tiles of rows of A fit half of L2 at that kc)
    cap = min(1024, (l2 // 2) // (8 * mr * operand_bytes))
    kc = max(64, min(cap, (l2 // 4) // (nr * operand_bytes)) // 64 * 64)
    rows = (l2 // 4) // (kc * operand_bytes)
    if rows < 8 * mr and 8 * mr * kc * operand_bytes <= l2 // 2:
        rows = 8 * mr
    mc = max(mr, rows // mr * mr)
    nc = max(nr, min(4096, (l3 // 8) // (kc * operand_bytes)) // nr * nr)
    return Blocking(mr, nr, kc, mc, nc)


def _pair_registers(dtype, operand_bytes, machine):
    """Registers an int32 tile of 8- or 16-bit products needs beyond a float tile's:
    its steps of k go in pairs (backends/llvm/pairs.py), and on AVX-512 the pairs of B
    are interleaved by vpermt2w, whose two index vectors and the table it overwrites
    stay in registers: 4, so the tile has 5 rows of 4 vectors (6 spilled accumulators in
    every step: int8 1024^3 ran 100 GOP/s with 6 rows, 130 with 5, Emerald Rapids).
    AVX2 interleaves by unpacks, which need no index: none."""
    paired = np.dtype(dtype) == np.int32 and operand_bytes <= 2
    return 4 if paired and machine.has("avx512bw") else 0


def full_tile_vectors(machine=None):
    """Vectors of columns in the full register tile: 4 with 32 vector registers, 2
    with 16."""
    return 4 if (machine or target()).vector_registers == 32 else 2


FUSED_NC = 112      # columns of B a fused nest packs (at most; a multiple of NR): 7 AVX2 panels


def fused_columns(blocking):
    """The columns of B a fused nest packs at a time (its column block)."""
    return max(blocking.nr, FUSED_NC // blocking.nr * blocking.nr)


def _reads_index(defn, tensor, x):
    return any(isinstance(a, Access) and a.tensor is tensor and
               any(x in sym.sympify(ix).free_symbols for ix in a.index)
               for a in walk_expr(defn.reduction.body))


def sliced_blocking(defn, roles, blocking, slices, lanes):
    """The register tile of a contraction computed as slices (fusion.Slicing: GEGLU's
    two halves of B): each slice gets a share of the tile's columns when B reads the
    slice index (2 x 6 x 8 float32 on AVX2: A broadcast once for both), of its rows
    when A does."""
    from dataclasses import replace
    count = slices.count
    if _reads_index(defn, roles.b, slices.var) and blocking.nr // count >= lanes:
        return replace(blocking, nr=blocking.nr // count // lanes * lanes)
    return replace(blocking, mr=max(1, blocking.mr // count))


def block_fused_contraction(stage, roles, blocking, avoid=frozenset(), slice_var=None,
                            in_lanes=frozenset()):
    """The blocked schedule for a contraction with fused consumers: the whole of k runs
    inside the register tile, so each tile's sum is final after its k loop and the
    consumers' epilogue reads it in registers:

        for jc in N / NC:                          parallel; NC <= 128 columns (B_pack = K x NC)
          pack B[:, jc-block] -> B_pack[jr, k, jj]
          for ic in M / MC:                        parallel
            for jr: for ir:
              for k in K: for ii: for jj: acc[ii, jj] += A[i, k] * B_pack[jr, k, jj]
              epilogue on acc

    A is read in place: MR rows of it, each streamed along k (measured on Zen 3 as fast
    as packing it, 1024^3 and 512 x 1024 x 4096). The threads share the first batch loop,
    the jc blocks and the ic blocks, or the jr panels when a consumer reduces over i;
    never a loop over an index in `avoid` (those a fused consumer reduces over), unless
    the consumers reduce over it in lanes (`in_lanes`: their per-lane partials, which
    epilogue.privatize_parts then keeps apart per part): a consumer that reduces over j
    gets the jc blocks dealt in parts (`jp`, up to four a thread, when each thread gets
    four blocks or more, evenly, and a block's rows x k are few: calls.thread_parts; each
    thread packs its own B blocks, one parallel region a call), where the ic blocks of
    every jc block had a region of their own (16 for 1024^3: right after a numpy call,
    whose BLAS thread keeps a core, each waited on it). A sliced root's slice
    index `slice_var` runs in the tile, unrolled, between k and the tile's rows."""
    from tex.expr import AutoParts
    bl = blocking
    jc, j1 = stage.split(roles.j, fused_columns(bl))
    parts = []
    if roles.j in avoid and roles.j in in_lanes:
        d = stage.state.definition
        work = d.extents[roles.i] * d.extents[roles.k]
        jp, jc = stage.split_parts(jc, AutoParts(f"{d.name}_column_parts", work,
                                                 d.extents[roles.j], rule="threads",
                                                 block=fused_columns(bl)))
        parts = [jp]
    jr, jj = stage.split(j1, bl.nr, tail="guard")
    ic, i1 = stage.split(roles.i, bl.mc)
    ir, ii = stage.split(i1, bl.mr, tail="guard")
    others = [h for h in stage.loops if h.is_reduction]
    sliced = [h for h in stage.loops if h.var is stage.state.subst.get(slice_var)]
    batch = [h for h in stage.loops if not h.is_reduction and h.var not in
             {x.var for x in [*parts, jc, jr, jj, ic, ir, ii] + sliced}]
    # B's slices run between the tile's rows and its vector: each broadcast of A feeds
    # both slices' FMAs at once (with the slice loop outside the rows, the six
    # broadcasts stayed live across both slices and the 12 accumulators spilled: 2.4x
    # slower); A's slices (rows) run outside the rows
    if sliced and _reads_index(stage.state.definition, roles.b, slice_var):
        order = [ii, *sliced, jj]
    else:
        order = [*sliced, ii, jj]
    stage.reorder(*batch, *parts, jc, ic, jr, ir, *others, *order)
    stage.pack(roles.b, jc, layout="loops")
    if not _streams_along(stage.state.definition, roles.a, roles.k):
        stage.pack(roles.a, ic, layout="loops")
    for loop in sliced:
        stage.unroll(loop)
    stage.unroll(ii)
    stage.vectorize(jj, tail="mask")     # an epilogue may refuse
    origin = {stage.state.subst[x]: x for x in stage.state.definition.indices}
    parallel = [b for b in batch[:1] if origin.get(b.var) not in avoid]
    # the column blocks first (each thread packs its own B block and runs all of A's
    # rows past it: one parallel region a call), A's row blocks when there is one
    # column block (a region nested in a running one runs on its caller alone: the
    # team goes to the outermost loop with two iterations); GEGLU 512 x 1024 x 4096 on
    # 2 threads: 12.3 -> 10.4 ms, and 20.9 -> 13.7 ms right after a numpy call (whose
    # BLAS thread keeps a core: the region per column block then waited on it 44 times)
    parallel += [jc] if roles.j not in avoid else parts
    parallel += [ic] if roles.i not in avoid else [jr] if roles.j not in avoid else []
    for loop in parallel:
        stage.parallel(loop)


def _streams_along(defn, tensor, k):
    """Is `tensor`'s read contiguous along k (k in its last dimension only)? Read in
    place, its rows are then streamed; otherwise each step of k jumps a row of it (a new
    page every step for a 1024-wide float32 row: the transposed consumer's nest ran at
    half speed), and it is packed."""
    for a in walk_expr(defn.reduction.body):
        if isinstance(a, Access) and a.tensor is tensor:
            return k in sym.sympify(a.index[-1]).free_symbols and not any(
                k in sym.sympify(ix).free_symbols for ix in a.index[:-1])
    return False


def window_indices(defn):
    """Reduced indices read only inside compound index expressions (r in x[t + r])."""
    red = defn.reduction
    reads = [n for n in walk_expr(red.body) if isinstance(n, Access)]
    out = set()
    for x in red.over:
        uses = [sym.sympify(ix) for n in reads for ix in n.index
                if x in sym.sympify(ix).free_symbols]
        if uses and any(ix != x for ix in uses):
            out.add(x)
    return out


def _origin(stage, var):
    """The definition's index a loop of `stage` runs over (unsplit loops)."""
    return next((x for x, e in stage.state.subst.items() if e is var), None)


def block_contraction(stage, roles, blocking=None, k_loop=None):
    """Apply the blocked schedule (module docstring) to `stage` with the primitives.
    `k_loop` is the loop of k to block when k was split before (the chunk loop of a
    split_k, whose parts loop then stays outermost)."""
    red = stage.definition.reduction
    if blocking is None:
        blocking = default_blocking(red.dtype, operand_bytes(roles))
    bl = blocking
    jc, j1 = stage.split(roles.j, bl.nc)
    jr, jj = stage.split(j1, bl.nr, tail="guard")
    kc, k1 = stage.split(roles.k if k_loop is None else k_loop, bl.kc)
    ic, i1 = stage.split(roles.i, bl.mc)
    ir, ii = stage.split(i1, bl.mr, tail="guard")
    private = stage.state.private
    parts = [h for h in stage.loops if h.var is private]
    others = [h for h in stage.loops if h.is_reduction and h.var is not private and
              h.var not in (kc.var, k1.var)]
    # a window's index (r of x[b, c, t + r]: short, read at an offset) runs inside the
    # register tile next to k, so each tile sums over all of it before its write-back
    # (conv1d, 8 x 64 -> 64 channels x 1024, window 7: 7.0 -> 4.6 ms); other reduced
    # indices, of any length, stay outside the blocks of k
    windows = window_indices(stage.definition)
    inner = [h for h in others if _origin(stage, h.var) in windows]
    outer = [h for h in others if h not in inner]
    batch = [h for h in stage.loops
             if not h.is_reduction and h.var not in {x.var for x in (jc, jr, jj, ic, ir, ii)}]
    stage.reorder(*parts, *batch, jc, *outer, kc, ic, jr, ir, k1, *inner, ii, jj)
    stage.pack(roles.b, kc, layout="loops")
    stage.pack(roles.a, ic, layout="loops")
    stage.unroll(ii)
    stage.vectorize_known(jj, tail="mask")
    for loop in batch[:1] + [jc, ic]:
        stage.parallel(loop)
    return bl

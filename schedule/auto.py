"""`s.auto()`: the built-in heuristics (also what `tex.compile(out)` uses).

Per stage, assuming row-major inputs (the common layout; other layouts still run
correctly, only slower):
1. Loop order. The innermost loop should walk the last (unit-stride) dimension of as
   many accesses as possible. If the last output index does that better than the
   innermost reduction index, it moves inside the reductions (the accumulator becomes
   the output row: matmul runs in i, k, j order and LLVM vectorizes j).
2. Split-K. For one-dimensional outputs (row or column reductions) the outermost
   reduction loop is split into a call-time number of parts
   (`tex.backends.llvm.runtime.AUTO_PARTS`): 1 when the output rows already give every
   thread enough work, else four parts a thread (a reduction to a few long rows gets its
   threads this way). With one part the merge is a single copy pass. The parts' nest is
   a specialization for the sizes some thread count splits (auto_nest.auto_split_k), so a
   kernel built for other calls leaves it out. A total (a scalar: a dot product, a sum of
   a whole array) splits its outermost reduction loop the same way when it reads a
   megabyte or more (float64 dot of 4M: 1.34 -> 0.75 ms on 2 threads, numpy's threaded
   ddot 0.70; float32 sum 0.68 -> 0.36, numpy 1.0).
3. Threads. The parts loop and the first output loop are both parallel; at run time a
   loop with one iteration, or too little work, stays on the calling thread, so the
   team goes to whichever loop has the work.
4. Vectors. Byte-sized integer sums get the vector-accumulator strategy (VNNI where
   the host has it); argmax/argmin get explicit vector code on their innermost loop;
   float row maxima and minima get it too on rows of 64 float32 or more (LLVM's
   vectorizer leaves a row's last elements to a scalar loop), float row sums on rows of
   256 or more; everything else is left to LLVM's loop vectorizer, which does as well
   there.
"""
import functools

import numpy as np
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import (Access, AutoParts, all_of, any_of, at_least, less, negation,
                      walk as walk_expr)

from .auto_nest import (auto_reduction_strategy, auto_split_k, auto_vectorize,
                        parallel_first_output_loop, parts_possible, row_accumulators)
from .order import prefers_reduction_outside, stream_reads, unit_stride_score
from .target import target


def auto_schedule(sched, fuse=True, keep=()):
    """Schedule every stage but those in `keep` (scheduled already: tex.tune's plans).
    Its specializations' schedules are deferred (handles.Specialization): the steps it
    records meanwhile do not run them, as a user's later step does."""
    sched._run_deferred()
    sched._in_auto = True
    try:
        return _auto_schedule(sched, fuse, keep)
    finally:
        sched._in_auto = False


def _auto_schedule(sched, fuse, keep):
    if fuse:
        _form_kernels(sched)
    for stage in sched.stages:
        d = stage.definition
        if d in sched._fused or d in keep:
            continue                      # runs in its root's nest, or scheduled
        epilogue = sched._epilogue(d)
        if epilogue is not None:
            _auto_fused_root(stage, epilogue)
            _check_fusion(sched, stage)
            continue
        if _auto_blocked(stage) or _auto_streamed_rows(stage):
            continue
        if d.reduction is not None:
            stream_reads(stage, 4 * target().lanes(d.reduction.dtype))
        for nest in row_accumulators(stage) or (stage,):
            auto_reduction_strategy(nest)
            for part in auto_split_k(nest):
                parallel_first_output_loop(part)
                auto_vectorize(part)
    return sched


def _form_kernels(sched):
    """Fuse each consumer into the kernel of a definition it reads, when the maps of
    their indices allow it (schedule/fusion.py): elementwise and reduction consumers run
    in their producer's epilogue. The reasons for the fusions not made are kept in
    `sched.not_fused` and printed with the schedule."""
    from . import fusion
    for d in sched.program.definitions:
        for root in fusion.fusion_candidates(sched.program, sched._fused, d):
            try:
                sched.fuse(d, into=root)
                break
            except ScheduleError as e:
                why = str(e).partition(": ")[2]
                sched._not_fusing(d.name, root.name, why.partition("epilogue: ")[2] or why)


def _reduced_by_members(epilogue):
    """The root's indices that a fused reduction consumer reduces over (no thread may
    own a loop over them: the consumer combines across it)."""
    out = set()
    for f in epilogue.members:
        red = f.definition.reduction
        if red is not None:
            out |= {f.to_root[x] for x in red.over}
    return out


def _reduced_in_lanes(epilogue, fast_math):
    """The root's indices that every fused consumer reducing over them may regroup
    (the epilogue keeps their partials per vector lane: epilogue._lanes)."""
    out, refused = set(), set()
    for f in epilogue.members:
        red = f.definition.reduction
        if red is None:
            continue
        acc = red.body.dtype if COMBINERS[red.combiner].positional else red.dtype
        ok = COMBINERS[red.combiner].may_reassociate(acc, fast_math and red.fast_math)
        for x in red.over:
            (out if ok else refused).add(f.to_root[x])
    return out - refused


def _auto_fused_root(stage, epilogue):
    """A definition with consumers in its epilogue: a contraction gets the fused blocked
    schedule (blocking.block_fused_contraction: all of k inside the register tile) for
    calls with a register tile's rows and two vectors' columns, its default nest (k
    innermost: each element's sum final in a scalar) otherwise; any other definition
    keeps its default order. The threads never share a loop over an index a consumer
    reduces over."""
    from .blocking import block_fused_contraction, contraction_roles, default_blocking, \
        operand_bytes, sliced_blocking
    d = stage.state.definition              # (a sliced root: its slices' definition)
    avoid = _reduced_by_members(epilogue)
    red = d.reduction
    # (a consumer storing T[j, i] still gets j on vectors: its tile is stored transposed
    # element by element, 1024^3 with a bias at 1.24x numpy's (a @ b + bias).T copy; i
    # on vectors needed A packed transposed and B repacked per block of i: 0.76x)
    roles = contraction_roles(d)
    if roles is not None and COMBINERS[red.combiner].may_reassociate(red.dtype,
                                                                       stage.state.fast_math):
        blocking = default_blocking(red.dtype, operand_bytes(roles))
        slices = epilogue.slices
        if slices is not None:
            blocking = sliced_blocking(d, roles, blocking, slices, target().lanes(red.dtype))
        rows, cols = d.extents[roles.i], d.extents[roles.j]
        few = 2 * target().lanes(red.dtype)
        cond = all_of(at_least(rows, blocking.mr), at_least(cols, few))
        if cond is not sym.false:
            spec = stage if cond is sym.true else stage.specialize(cond)
            block_fused_contraction(spec, roles, blocking, avoid,
                                    slices.var if slices is not None else None,
                                    _reduced_in_lanes(epilogue, stage.state.fast_math))
            if cond is sym.true:
                return
    # a column sum (a vector times a matrix) with its consumers in the epilogue streams
    # rows as it does alone (`sum(X[i, j], over=i) / R`, 8192 x 512 float32 on one thread:
    # 24.7 ms as one scalar column after another, numpy's x.mean(0) 1.0)
    if not avoid and _auto_streamed_rows(stage):
        return
    nests = auto_split_k(stage) if red is not None and len(d.indices) == 1 and not avoid \
        else (stage,)
    for nest in nests:
        parallel_first_output_loop(nest, avoid)
        auto_vectorize(nest)


def _check_fusion(sched, stage):
    """Lower a root with its epilogue; a fusion its nest refuses is undone (its
    consumers scheduled on their own), with the reason kept in `sched.not_fused`."""
    d = stage.definition
    try:
        stage.lower(sched._buffers(), sched._states, sched._epilogue(d))
    except ScheduleError as e:
        for m in [m for m, f in sched._fused.items() if f.into is d]:
            if m in sched._fused:
                sched.unfuse(m)
            sched._not_fusing(m.name, d.name, str(e).partition(": ")[2])


def _auto_blocked(stage):
    """Contractions (matmul and every einsum that is one) get the BLIS-style blocked
    schedule of schedule/blocking.py, when their sum may be reassociated, as a
    specialization for calls with at least a register tile's rows (MR) and two vectors'
    columns (on AVX-512, narrower register tiles from one vector's columns: below).
    Below that most of the tile computes padding. Measured against numpy (2048 x
    K=2048), blocked and as dot products over a packed B (k innermost: the
    second specialization, for fewer columns than two vectors): 3 columns 0.27x and
    1.2x, 8 columns 0.18x and 0.48x; 16 columns blocked 0.25x; one column (4096 x
    4096) 0.15x and 0.5-0.9x. Calls with fewer rows and more columns get a
    specialization per number of rows (_few_rows_cases: B streamed once into a tile of
    every row), each built only when a call needs it.

    Before each blocked specialization comes one for the calls whose reduction fits
    one kc block and whose A fits L2, or whose columns are one column block with a
    longer reduction (`whole_k`: the fused nest's order, all of k in the register
    tile, A read in place), where packing A and blocking k cost more than they save.

    In the blocked schedule, when the blocks of the output are too few for the
    threads (123 x 456 from K = 51234), the reduction is split first, into a
    call-time number of parts (AUTO_PARTS, with the blocks as the rows): one part is
    the output itself, so shapes with blocks enough pay nothing for it.
    Returns whether the stage is done (False: the generic heuristics follow)."""
    from .blocking import (_streams_along, block_contraction, block_fused_contraction,
                           contraction_roles, default_blocking, full_tile_vectors,
                           fused_columns, operand_bytes, parallel_blocks)
    d = stage.definition
    roles = contraction_roles(d)
    if roles is None:
        return False
    red = d.reduction
    if not COMBINERS[red.combiner].may_reassociate(red.dtype, stage.state.fast_math):
        return False
    blocking = default_blocking(red.dtype, operand_bytes(roles))
    rows, cols = d.extents[roles.i], d.extents[roles.j]

    def blocked(target, blocking=blocking, parts=None):
        k_loop = None
        if parts is not None:
            _, k_loop = target.split_k(roles.k, parts)
        block_contraction(target, roles, blocking, k_loop)

    def parts_of(bl, name):
        # (each tier's parts a name of its own: the call path computes one value a name)
        return AutoParts(name, parallel_blocks(d, roles, bl), d.extents[roles.k])

    def whole_k(target, blocking=blocking):
        # a reduction that fits one kc block and an A that fits L2, or one column
        # block (fits_whole_k, long_k_in_the_tile): the fused nest's order (all of k
        # inside the register tile, A read in place from L2 once per column block, B
        # packed per column block), without the k blocks' partial sums, A's packing
        # and the split into parts, which cost more than they save there
        # (2 threads, numpy/tex, Zen 5 | AVX2 code with Zen 3's caches: 64^3 0.88 ->
        # 1.45 | 0.67 -> 0.92, 256^3 1.48 -> 2.41 | 0.86 -> 1.19, 1000 products of
        # 16 x 16 0.60 -> 1.22 | 0.73 -> 1.20). With A in L3 only it lost on AVX2 (2048
        # x 256 x 2048 on 2 threads: 0.99 -> 0.94)
        block_fused_contraction(target, roles, blocking)

    def dots(target):
        # the default order has k innermost: a dot product per output element, over
        # a row of A (read once) and a column of B, packed contiguous once per
        # DOT_ROWS rows of A; a k-major A (A[k, i]) is copied too, once per block
        # rather than read down its columns once per output column (4096 x 32 A @ x 8,
        # AVX2 code, 1 thread: 1.79 -> 0.31 ms)
        io, _ = target.split(roles.i, DOT_ROWS)
        target.pack(roles.b, io, layout="loops")
        if not _streams_along(d, roles.a, roles.k):
            target.pack(roles.a, io, layout="loops")
        auto_reduction_strategy(target)
        target.parallel(io)
    # by the number of columns: the full tile from two vectors on (AVX2), or from three
    # (AVX-512's tile of four: at most a quarter of it padding), with a tile of one
    # vector and up to 12 rows for narrower products on AVX-512; dot products below that
    # (2048 x 2048 @ 2048 x 16 on AVX-512: 4.7 ms as dot products, 0.56x numpy, 3.4 ms
    # in the 12 x 16 tile; x 32: 0.64x -> 0.86x. On AVX2 a tile of one vector lost to the
    # dot products at 8 columns, 0.82x against 0.9x. Each tier is one more specialization
    # to compile: a symbolic matmul 1.1 -> 1.6 s on znver4). With 16 float lanes
    # (float32 on AVX-512) the one-vector tile starts at half a vector, its upper lanes
    # masked: 8 to 15 columns ran 1.7-3x faster than as dot products, which load a
    # vector of A and one of B for each FMA (2 threads, Zen 5, 1024 x 1024 @ 1024 x 8
    # 177 -> 100 us, x 12 263 -> 106, 4096 x 256 @ 256 x 8 163 -> 81); with 8 (float64)
    # it lost at 4 columns (166 -> 283 us) and at 6 and 7. Calls with fewer rows than
    # that tile's keep the dot products (7 x 1000 @ 1000 x 8: 5 us, 24 in the generic
    # order).
    lanes = target().lanes(red.dtype)
    l2 = target().cache(2, 512 << 10)
    full = full_tile_vectors()
    half = lanes // 2 if lanes >= 16 and red.dtype == np.float32 else lanes
    tiers = [((full - 1) * lanes, None), (half, 1)] if full > 2 else \
        [(2 * lanes, None)]
    # the columns of the products narrower than a tile, whatever their rows: dot
    # products, or a batch's one-vector whole-k nest (below)
    narrow = lanes if full > 2 else 2 * lanes
    # the whole-k order runs every reduced index in the tile (a window's too): one only
    single = tuple(red.over) == (roles.k,)

    def fits_whole_k(bl):
        """K within one kc block, and A (rows x K) within L2 or read once: the product's
        columns fit the nest's one column block, where the blocked tier packed all of A
        for its one pass (2 threads, tex alone, Zen 5 | AVX2 code with Zen 3's caches:
        1024 x 1024 @ 1024 x 16 229 -> 129 | 259 -> 186 us, x 32 297 -> 223 | 384 ->
        327, 4096 x 1024 @ 1024 x 48 1326 -> 1145 | 2129 -> 1659)."""
        reduction = d.extents[roles.k]
        return all_of(less(reduction, bl.kc, strict=False),
                      any_of(less(rows * reduction, l2 // operand_bytes(roles), strict=False),
                             less(cols, fused_columns(bl), strict=False)))

    def long_k_in_the_tile(bl, upper):
        """The whole-k nest beyond one kc block, for products of one column block whose
        A streams along k (a k-major A would be packed whole): B's K x NR panel in half
        of L2, and with more than one panel of columns (each re-reads A's block of rows)
        that panel and A's mc x K block together within L2; rows for four row blocks
        (the blocked tier splits k among the threads when they are fewer). Packing A
        cost more than the product there, 16 to 112 FMAs an element of A (1 | 2
        threads, Emerald Rapids, numpy/tex: 2048 x 2048 @ 2048 x 16 0.64 -> 1.47 | 0.71
        -> 1.82, x 8192 @ 8192 x 16 0.70 -> 1.72 | 0.80 -> 1.79; 2048 x 2048 @ 2048 x 64
        0.94 -> 1.33 | 0.94 -> 1.38; AVX2 code, 1 thread: 2048 x 2048 @ 2048 x 16 0.93
        -> 1.39, x 4096 @ 4096 x 16 0.99 -> 1.71; x 112 columns alike, 0.97 ->
        0.98-1.07); float64 at 33-96 columns, K = 4096, when A's block and B's panel
        each had all of L2: 0.65-0.9x. `upper`: the tier's columns are fewer."""
        if not _streams_along(d, roles.a, roles.k):
            return sym.false
        b = operand_bytes(roles)
        reduction = d.extents[roles.k]
        width = fused_columns(bl)
        conds = [less(reduction, (l2 // 2) // (bl.nr * b), strict=False),
                 at_least(rows, 4 * bl.mc)]
        if upper is None or upper - 1 > width:
            conds.append(less(cols, width, strict=False))
        if width > bl.nr:
            conds.append(any_of(less(cols, bl.nr, strict=False),
                                less(reduction, l2 // ((bl.nr + bl.mc) * b), strict=False)))
        return all_of(*conds)
    cases, upper = [], None
    for low, vectors in tiers:
        bl = blocking if vectors is None else default_blocking(red.dtype, operand_bytes(roles),
                                                              vectors=vectors)
        wide = at_least(cols, low)
        cond = all_of(at_least(rows, bl.mr), wide if upper is None else
                      all_of(wide, less(cols, upper)))
        if single:
            fits = any_of(fits_whole_k(bl), long_k_in_the_tile(bl, upper))
            cases.append((all_of(cond, fits), functools.partial(whole_k, blocking=bl), ()))
        # the full tile's split-K parts where some thread count takes more than one
        # (too few blocks for the threads, a long k), a tier of its own: each tier is
        # built when a call first needs it, and the parts cost a blocked nest a third of
        # its LLVM time (a first 1024^3: 5680 -> 4617 lines of IR, LLVM ~460 -> ~300
        # ms). Each tier costs every compile its scheduling (~25 ms of a symbolic
        # matmul's ~150), so the narrower tiers keep their parts in their one nest.
        split = parts_possible(parallel_blocks(d, roles, bl), d.extents[roles.k]) \
            if vectors is None else sym.true
        if split is not sym.false:
            parts = parts_of(bl, f"{d.name}_parts" if vectors is None else
                             f"{d.name}_narrow_parts")
            cases.append((all_of(cond, split),
                          functools.partial(blocked, blocking=bl, parts=parts), (parts,)))
        if split is not sym.true:
            cases.append((cond, functools.partial(blocked, blocking=bl), ()))
        upper = low
    if roles.batch and single:
        # a batch of products narrower than the narrowest tile (3 x 3, 8 x 8, 64 x 4):
        # the whole-k nest with a one-vector tile, its columns masked, instead of dot
        # products over a packed B per 64 rows of each product (2 threads, numpy/tex, Zen
        # 5 | AVX2 code: 10000 x 8^3 0.43 -> 0.82 | 0.39 -> 0.77, 10000 x 3^3 0.54 ->
        # 0.69 | 0.55 -> 0.66, 1000 x 12^3 0.23 -> 1.10 | 0.30 -> 0.88, 1000 x 64 x 64 x
        # 4 0.97 -> 1.50 | 1.00 -> 1.64)
        nb = default_blocking(red.dtype, operand_bytes(roles), vectors=1)
        cases.append((all_of(less(cols, narrow), fits_whole_k(nb)),
                      functools.partial(whole_k, blocking=nb), ()))
    # and the calls between the tiles: AVX-512's full tile's rows, but fewer than the
    # one-vector tile's, and fewer columns than the full tile's (2 threads, Zen 5, dot
    # products against the generic order: 11 x 2048 @ 2048 x 16 71 -> 22 us, 8 x 1000 @
    # 1000 x 32 27 -> 22, 7 x 256 @ 256 x 16 8.0 -> 2.3); not a batch of them, whose
    # generic order shares the batch among the threads (the dots' row blocks are one)
    between = sym.false if roles.batch else all_of(less(cols, tiers[0][0]),
                                                   at_least(rows, blocking.mr))
    # fewer rows than the register tile's: a specialization per number of rows, B
    # streamed once into a tile of all the rows (3 x 4096 @ 4096 x 4096 on 2 threads,
    # Zen 5: 4.9 -> 1.7 ms, numpy 3.5; 5 rows 7.3 -> 2.5 ms, numpy 4.4: the generic
    # order read B once per row; an AVX2 target: 1.3-1.7x numpy). Each is built
    # only when a call has that many rows. A @ B.T: dot products by columns first,
    # where they beat the tile (_dots_beat_the_stream).
    few = _few_rows_cases(d, roles, rows, blocking.mr)
    # one row of A from ONE_ROW_DOT_COLUMNS columns on: the one-row tile of
    # _auto_streamed_rows (or of _few_rows_cases) instead, its columns masked, where the
    # dot products copy all of B transposed at every call (1 x 4000 @ 4000 x 15 float32,
    # one thread, Zen 5: 22 -> 6.4 us, AVX2 code 23.6 -> 8.8; x 8: 8.5 -> 6.0 | 8.5 ->
    # 8.9; x 4: 4.5 -> 5.4 | 4.4 -> 8.8, numpy 2.4). Float32 and float64 only, whose row
    # tile is a plain product's (not float16's: its sum is kept in float16, in one chain
    # per lane there), and only a product that the row tile reads along B's rows
    # (_streams_rows: not A @ B.T, whose row tile would step down B's columns)
    one_row = sym.false
    if red.dtype in (np.float32, np.float64) and narrow > ONE_ROW_DOT_COLUMNS:
        if rows == 1 and _streams_rows(stage):
            one_row = sym.true
        elif few and _streams_rows(stage, rows_fixed=True):
            one_row = sym.Eq(rows, 1, evaluate=False)
    dot_columns = any_of(less(cols, narrow), between)
    if one_row is sym.true:
        dot_columns = less(cols, ONE_ROW_DOT_COLUMNS)
    elif one_row is not sym.false:
        dot_columns = all_of(dot_columns, negation(all_of(
            one_row, at_least(cols, ONE_ROW_DOT_COLUMNS))))
    cases.append((dot_columns, dots, ()))
    cases.extend(few)
    # each a deferred specialization (handles.Specialization): a call runs one of them,
    # and a first call's compile schedules, lowers and plans that one (a symbolic matmul:
    # 13 nests, 60 + 90 ms of scheduling and lowering in all, Emerald Rapids)
    for condition, schedule, params in cases:
        if condition is sym.true:              # sizes known now: no specialization
            schedule(stage)
            return True
        if condition is not sym.false and DEFER_SPECIALIZATIONS:
            stage.specialize(condition, schedule, params)
        elif condition is not sym.false:
            schedule(stage.specialize(condition))
    return False


# (False: every specialization scheduled at once, the reference tests/test_nests.py
# compares the deferred ones with)
DEFER_SPECIALIZATIONS = True


def _few_rows_cases(d, roles, rows, mr):
    """[(Eq(rows, m), schedule, its parameters)] for m in 1..mr-1: the streamed-rows schedule on a
    specialization whose number of rows is the constant m (handles.specialize fixes
    it), for a plain product (no batch index) with a symbolic number of rows. One row
    no wider than its register tile comes first, with the tile kept for all of K
    (_auto_streamed_rows). A product that reads both operands along k (A @ B.T) gets
    _dots_by_columns first, where _dots_beat_the_stream, for a symbolic number of rows
    and for a constant one below mr alike (whose streamed case is then its own nest)."""
    red = d.reduction
    if not (not roles.batch and len(red.over) == 1 and d.indices and
            d.indices[-1] is roles.j and red.dtype.kind == "f"):
        return []
    j, k, others = d.indices[-1], red.over[0], list(d.indices[:-1])
    along_k = _reads_both_along(d, k)
    symbolic = isinstance(rows, sym.Symbol)
    if not symbolic and not (along_k and less(rows, mr) is sym.true):
        return []

    def count(m):
        return sym.Eq(rows, m, evaluate=False) if symbolic else sym.sympify(rows == m)

    parts = _stream_parts(d, j, k, f"{d.name}_row_parts")

    def streamed(st, whole_row=False):
        _stream_rows_of_b(st, d, j, k, others, parts, whole_row)
    one = count(1)
    cases = []
    if along_k:
        dots = functools.partial(_dots_by_columns, d=d, j=j, rows=others)
        cases += [(c, dots, ()) for c in _dots_beat_the_stream(d, one, less(rows, mr))
                  if c is not sym.false]
    narrow = less(d.extents[j], _one_row_width(d), strict=False)
    if narrow is not sym.false:
        cases.append((all_of(one, narrow), functools.partial(streamed, whole_row=True),
                      (parts,)))
    if narrow is not sym.true:
        cases.append((one, streamed, (parts,)))
    return cases + [(count(m), streamed, (parts,)) for m in range(2, mr)]


DOT_MIN_VECTORS = 16    # K of at least this many vectors for _dots_by_columns (2+ rows)


def _dots_beat_the_stream(d, one, few):
    """(one row, more rows): where _dots_by_columns beats the streamed tile for A @ B.T
    with few rows (`one`, `few`: conditions on the number of rows), each its own
    specialization (one that fixes one row drops the rows' loop: 1 x 4096 @ (4096 x
    4).T float64 with AVX2 code 9.8 -> 6.4 us). One row from half a vector's K on (and
    4): the one-row tile steps down B's columns with no other rows to share them (one
    thread, Zen 5, float32 | float64, tex us: 1 x 4096 @ (4096 x 16).T 19 | 22 -> 7.1 |
    8.9, numpy 5.8 | 6.8; x 8 11 | 12.5 -> 6.8 | 7.1; float64 x 4 8.2 -> 6.4, AVX2 code
    float32 | float64 x 4 8.7 | 8.3 -> 6.4 | 6.4) but at K = 4 with 16 lanes (7.6 -> 9.4)
    and at K = 2 it lost. More rows from DOT_MIN_VECTORS vectors of K on: a shorter dot
    product is mostly its horizontal sum, where the tile vectorizes along the columns (a
    reviewer's find, float32: 5 x 4096 x 4 8.4 -> 57 us, x 16 21 -> 35; alike from K 64
    on). float64 also keeps the tile while a pass of it over B (STREAM_ROWS_ROLLED of
    B's rows, N x 128 bytes) fits L1, where it beat the dot products on 1 and 2 threads
    (5 x 64 x 4000: 105 | 56 -> 123 | 103 us, 5 x 256 x 4000: 420 | 198 -> 487 | 242, 4
    x 16 x 4000 on 2 threads 19 -> 23); float32's dot products matched or beat it
    there."""
    dtype = np.dtype(d.reduction.dtype)
    lanes, reduction = target().lanes(dtype), d.extents[d.reduction.over[0]]
    cond = all_of(few, at_least(reduction, DOT_MIN_VECTORS * lanes))
    if dtype.itemsize >= 8:
        pass_fits = target().cache(1, 32 << 10) // (STREAM_ROWS_ROLLED * dtype.itemsize)
        cond = all_of(cond, at_least(d.extents[d.indices[-1]], pass_fits + 1))
    one_row = all_of(one, at_least(reduction, max(4, lanes // 2)))
    return (one_row, sym.false) if one is sym.true else (one_row, cond)


def _reads_both_along(d, k):
    """Whether every read of the sum has k in its last dimension with step one (A[i, k]
    B[j, k]: dot products read both operands contiguously)."""
    reads = [n for n in walk_expr(d.reduction.body) if isinstance(n, Access)]
    return bool(reads) and unit_stride_score(reads, k) == len(reads)


def _dots_by_columns(st, d, j, rows):
    """Fewer rows than the register tile's, both operands read along k (A @ B.T, x @
    W.T): a dot product per output element, k innermost (LLVM vectorizes it), the
    columns outermost and parallel, so that each row of B is read from memory once,
    for every row of A at once, and the threads share the columns (A's few rows are
    one or two blocks). The streamed-rows tile stepped down B's columns there (one
    thread, Zen 5, float32 | float64, a symbolic M: 5 x 512 @ (4096 x 512).T 2045 ->
    406 | 3350 -> 930 us, numpy 580 | 1120; 1 x 1000 @ (1000 x 1000).T 278 -> 44 | 322
    -> 96, numpy 40 | 93; AVX2 code 1 x 512 @ (4096 x 512).T 1255 -> 97, numpy 92),
    and the rows outermost read B once per row (5 x 1000 @ (1000 x 1000).T 240 -> 159
    | 441 -> 384 us)."""
    st.reorder(j, *rows, d.reduction.over[0])
    st.parallel(j)


DOT_ROWS = 64           # rows of A a packed copy of B serves (dot-product specialization)
ONE_ROW_DOT_COLUMNS = 8  # one row of A with fewer columns runs dot products (_auto_blocked)
STREAM_ROWS = 4         # rows of B a pass over the output tile adds, unrolled (few rows)
STREAM_ROWS_ROLLED = 16  # the same for several rows of A when the rows of B are a loop
ONE_ROW_STREAM = 8      # the same for one row of A (a loop)
ONE_ROW_VECTORS = 4     # vectors of columns in one row's register tile


def _auto_streamed_rows(stage):
    """A vector times a matrix, C[.., j] = sum_k A[.., k] B[k, j] with no rows of A or
    one (a size known to be 1: tex.einsum's operands of shape (1, K) are), and column
    sums, sum_k f(B[k, j]) (a vector of ones times B): the
    reduction is split into a call-time number of parts (four a thread when the rows
    are few), each part streams its block of B's rows, ONE_ROW_STREAM rows at a time,
    into a register tile of the output row:

        for ko (parallel): for i: for kio in K / parts / 8:
          for jo in N / W:  acc[0..W] = 0
            for kii in 8: for ji in W (vector): acc[ji] += A[i, k] B[k, j]
            C_part[ko, i, j] += acc

    B is read once, row after row (1 x 4096 @ 4096 x 4096 float32 on Zen 5: 2.7 ms on
    one thread as an axpy per row of B, which also gave the threads only the single
    row; 1.8 ms in this form, numpy 1.8-2.0; on 2 threads 1.0 ms, numpy 0.93). Float
    sums only: integer ones keep their vector-accumulator strategy. Column maxima and
    minima (floats and integers) stream too: they ran one strided column after another
    (2 threads, float32 8192 x 512: 2.7 -> 0.48 ms, numpy 1.3; 100000 x 64: 19.7 -> 0.86,
    numpy 4.3; int32 1000 x 1000: 0.35 -> 0.20, numpy 0.20). Column sums of a
    4096 x 4096 float32: 3.45 -> 1.23 ms on 2 threads (numpy 2.0); 100000 x 64: 6.45 ->
    0.37 ms (numpy 1.49); their first compile costs 0.2 s more (0.43 -> 0.62 s). A
    symbolic number of rows below MR gets it as a specialization per count
    (_few_rows_cases), built when a call first has that many rows.
    Returns whether the stage is done."""
    d = stage.definition
    if not _streams_rows(stage):
        return False
    j, k, others = d.indices[-1], d.reduction.over[0], list(d.indices[:-1])
    # an output row that fits the register tile gets it for all of K (ONE_ROW_VECTORS)
    narrow = less(d.extents[j], _one_row_width(d), strict=False)
    if narrow is not sym.false:
        st = stage if narrow is sym.true else stage.specialize(narrow)
        _stream_rows_of_b(st, d, j, k, others, _stream_parts(d, j, k, f"{d.name}_parts"),
                          whole_row=True)
        if narrow is sym.true:
            return True
    _stream_rows_of_b(stage, d, j, k, others, _stream_parts(d, j, k, f"{d.name}_parts"))
    return True


def _streams_rows(stage, rows_fixed=False):
    """Whether _auto_streamed_rows takes the stage: a float sum over one index of one
    read of a matrix (by the last output index) times at most one other read, with no
    output index but that one or only indices of extent 1 (a matrix's one row; with
    `rows_fixed`, any extent, which a specialization then fixes to 1); with no other
    output index, a sum of any function of one matrix read and reads of one index, or
    a float or integer max or min of one."""
    from .blocking import contraction_roles
    d = stage.definition
    red = d.reduction
    if red is None or len(red.over) != 1 or not d.indices or \
            stage.state.private is not None or \
            not COMBINERS[red.combiner].may_reassociate(red.dtype, stage.state.fast_math):
        return False
    # float sums; column maxima and minima of floats and integers too (below)
    extremum = red.combiner in ("max", "min") and red.dtype.kind in "fiu"
    if not (red.combiner == "sum" and red.dtype.kind == "f" or extremum):
        return False
    j, k = d.indices[-1], red.over[0]
    reads = [n for n in walk_expr(red.body) if isinstance(n, Access)]

    def reads_by(n, x):
        return any(x in sym.sympify(ix).free_symbols for ix in n.index)
    matrix = [n for n in reads if reads_by(n, j)]
    others = list(d.indices[:-1])
    if extremum and others:
        return False
    if not others:
        # a column sum of any f(B[k, j], v[j], a[k]): B's rows stream, a read of one
        # index is a vector beside them (a column variance's squared deviations,
        # (X[i, j] - mean[j])**2: tex.var over the rows of 8192 x 512 float32, one
        # thread, 22 -> 1.5 ms, numpy's x.var(0) 6.7)
        distinct = {(n.tensor.name, n.index) for n in reads}
        streamed = {(n.tensor.name, n.index) for n in matrix if reads_by(n, k)}
        return len(distinct) <= 3 and len(streamed) == 1 and prefers_reduction_outside(d)
    if len(reads) not in (1, 2) or len(matrix) != 1 or not prefers_reduction_outside(d):
        return False
    roles = contraction_roles(d)
    return roles is not None and not roles.batch and roles.j is j and \
        (rows_fixed or all(d.extents[x] == 1 for x in others))


def _one_row_width(d):
    """The columns of one row's register tile."""
    return ONE_ROW_VECTORS * target().lanes(d.reduction.dtype)


def _stream_parts(d, j, k, name):
    """The split-K parts of the streamed-rows schedule: few rows give each thread four
    parts of a long K (of a shorter one too in a loop, with a B large enough for a team:
    runtime.STREAM_PARTS, whose `rows` are the columns here and `block` B's element
    size)."""
    b_bytes = max((a.tensor.dtype.itemsize for a in walk_expr(d.reduction.body)
                   if isinstance(a, Access) and any(j in sym.sympify(ix).free_symbols
                                                    for ix in a.index)),
                  default=d.reduction.dtype.itemsize)
    return AutoParts(name, d.extents[j], d.extents[k], rule="split_k_stream", block=b_bytes)


def _stream_rows_of_b(st, d, j, k, rows, parts, whole_row=False):
    """The streamed-rows schedule (above) on `st`, a stage or a specialization whose
    `rows` loops have constant extents: one row is a loop outside the stream; more (a
    few) are unrolled inside it, each row of B then feeding every row of the output's
    register tile, so that B is still read once. `whole_row`: one row of at most one
    register tile's columns (_one_row_width), whose tile then stays in registers for
    all of the part's K instead of going to memory after each pass of rows."""
    from .blocking import full_tile_vectors
    lanes = target().lanes(d.reduction.dtype)
    one = all(st.state.axis(st._var("auto", x)).extent == 1 for x in rows)
    ko, ki = st.split_k(k, parts)
    # B's four rows unrolled need a guard for K's remainder, and a guard on B's rows
    # with one on its columns makes the partial column tile scalar: with a tile of four
    # 16-lane vectors that is 3.6 MB of IR for five rows (1.8 s to build), so several
    # rows take the remainder as a shorter loop instead (1.1 MB), sixteen rows of B a
    # pass: the tile stays in registers through the loop (vector_plan.lanes_in_bounds)
    # and the partial sums in memory are updated once per sixteen rows (m x 65536 @
    # 65536 x 512, one thread, m = 2..5: 0.91/0.79/0.48/0.61x numpy with four rows and
    # the tile in memory, 1.98/2.22/1.32/1.68x now; m x 4096 @ 4096 x 4096: 1.5-2.4x).
    # With a tile of two 8-lane vectors (16 registers) the unrolled form is 1.1 MB and
    # the rolled one lost (on AVX2, one thread, m = 2..5 at 65536 x 512: 1.14/1.43/0.87/
    # 0.90x rolled, 1.38/1.70/0.90/1.30x unrolled)
    # One row of A: a tile of four vectors whatever the register count, eight rows of B
    # a pass as a loop (1 x 4096 @ 4096 x 4096 float32 on one thread, Zen 5: 36-38 GB/s
    # with the full tile and four unrolled rows, 41-42 now; AVX2 code 28 -> 33-34 GB/s,
    # numpy 37; 1 x 777 x 4099 0.52 -> 0.93x numpy, column sums of 100000 x 64 1.65 ->
    # 2.5x). Unrolled with a guard, eight rows made 1.3 MB of IR (a 0.5-1 s first call);
    # the loop makes 0.2 MB, less than four unrolled rows did (0.65 MB: 307 -> 172 ms).
    if one:
        width, pass_rows, unrolled = _one_row_width(d), ONE_ROW_STREAM, False
    else:
        width = full_tile_vectors() * lanes
        unrolled = full_tile_vectors() == 2
        pass_rows = STREAM_ROWS if unrolled else STREAM_ROWS_ROLLED
    kio, kii = st.split(ki, pass_rows, tail="guard" if unrolled else "peel")
    jo, ji = st.split(j, width, tail="guard")
    if one and whole_row:
        # one column tile: each pass of rows adds to the same accumulators, which a
        # tile reordered per pass stored and loaded again, a chain through memory
        # (1 x 4000 @ 4000 x 32 float32, one thread, Zen 5: 12.5 -> 5.5 us, numpy 4.4-5.4;
        # x 64: 14.4 -> 11, numpy 12). A wider row keeps the pass outermost: its tiles
        # would read B a column block at a time (1 x 4096 @ 4096 x 4096: 1.7 -> 3.5 ms)
        st.reorder(ko, *rows, jo, kio, kii, ji)
    elif one:
        st.reorder(ko, *rows, kio, jo, kii, ji)
    else:
        st.reorder(ko, kio, jo, kii, *rows, ji)
        for x in rows:
            st.unroll(x)
    if unrolled or one:
        st.unroll(kii)
    if one:     # a column sum of any f(X[i, j]): f may refuse vectors, so checked
        # the last tile's columns masked, not a scalar loop (1 x 4000 @ 4000 x 16, its
        # tile of 64 float32 columns a quarter full: 11.3 -> 8.4 us on one thread)
        st.vectorize(ji, tail="mask")
    else:       # a plain product's tile
        st.vectorize_known(ji, tail="mask")
    st.parallel(ko)

"""The auto schedule's heuristics for a stage's own nest -- the one a stage runs when it
is not a blocked contraction or a stream of B's rows (auto.py): which loop the threads
share, split-K for few long rows, the vector accumulator for float row maxima and byte
sums, explicit vectors for argmax. tex.tune's generic plans (tuning.py) use them too."""
import functools

import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import Access, AutoParts, all_of, any_of, at_least, less, walk as walk_expr

from .strategies import accumulator_span, reduction_strategy


def parallel_first_output_loop(stage, avoid=frozenset()):
    """The first output loop shares out the rows (not one over an index in `avoid`)."""
    origin = {v: x for x, v in stage.state.subst.items()}
    for loop in stage.loops:
        if not loop.is_reduction and origin.get(loop.var) not in avoid:
            stage.parallel(loop)
            return


# rows enough that split-K takes one part for up to 16 threads, and rows too short for
# more than one part on 2 threads or more (runtime.AUTO_PARTS)
MANY_ROWS = 64
ONE_PART_LENGTH = 2048


# a float row sum takes the vector accumulator from rows this long on (at least a pass)
SUM_MIN_LENGTH = 256


def row_accumulators(stage):
    """A float row max, min or sum (the reduction loop innermost; a sum with an output
    index, float32 or float64: a total keeps its blocked sum, blocked_sums.py): the
    vector accumulator for rows of at least one pass of it (W x U elements; a sum
    SUM_MIN_LENGTH; a specialization when the length is symbolic). LLVM's vectorized
    loop takes 64 float32 a step and leaves the rest of the row to a scalar loop; the
    accumulator's last pass is a vector. Returns the handles that the rest of the auto schedule goes
    on with (the specialization and the stage), or None when nothing was done. Max and
    min, measured on Zen 5, 2 threads, float32 | float64, interleaved: 8192 x 100 125 ->
    61 | 88 -> 54 us, 1000 x 1000 47 -> 26 | 84 -> 46; rows a multiple of 64 long alike
    (16384 x 64 50 | 60 -> 67, 2048 x 2048 97 -> 98 | 426 -> 438); rows shorter than a
    pass lost (65536 x 16, before ops.MINMAX_FLAGS: 362 -> 591) and are not taken.
    Float32 sums on Emerald Rapids (LLVM's loop -> the accumulator, one process,
    interleaved), 1 | 2 threads: 4096 x 4096 1.18-1.19x | 1.18x faster, 1000 x 1000
    1.01 | 1.30, 2048 x 512 1.00 | 1.14, 4096 x 256 0.99 | 1.07, 256 x 256 0.98 | 0.99;
    rows of 77 to 200 0.77-0.98 | 0.97-1.19; AVX2 code (znver3's, 1 thread) 0.85-0.87
    on rows of 128 and 200, 0.96-1.01 from 256 on; float64 0.97-1.01, 4096 x 4096 1.16.
    So a sum starts at 256 elements. Its code sums in tex's order (ops.vector_flags), so
    its first calls can run quick code (backends/llvm/tiers.py) where LLVM's
    reassociated loop could not."""
    d = stage.definition
    red = d.reduction
    if red is None or red.combiner not in ("max", "min", "sum") or red.dtype.kind != "f" or \
            not stage.loops or not stage.loops[-1].is_reduction:
        return None
    if red.combiner == "sum" and (not d.indices or red.dtype.itemsize < 4):
        return None               # (float16 sums were not measured)
    try:
        reduction_strategy(stage.state, "vector_accumulator")    # refused: nothing to do
    except ScheduleError:
        return None
    span = accumulator_span(d)
    if red.combiner == "sum":
        span = max(span, SUM_MIN_LENGTH)
    cond = at_least(stage.state.axes[-1].extent, span)
    if len(d.indices) == 1:
        # split-K's shapes (auto_split_k: few long rows, the parts taken from the
        # outermost reduction loop) keep their parts, which the vector accumulator
        # cannot have (both privatize a loop of the reduction)
        outermost = next(a for a in stage.state.axes if a.reduction)
        cond = all_of(cond, any_of(at_least(d.extents[d.indices[0]], MANY_ROWS),
                                   less(outermost.extent, ONE_PART_LENGTH)))
    if cond is sym.false:
        return None
    if cond is sym.true:
        stage.reduction_strategy("vector_accumulator")
        return (stage,)
    try:
        spec = stage.specialize(cond)
    except ScheduleError:                    # a length that is not a size expression
        return None
    try:
        spec.reduction_strategy("vector_accumulator")
    except ScheduleError:
        pass
    return spec, stage


def auto_reduction_strategy(stage):
    """Byte-sized sums (int8 -> int32 row sums and the like) use the vector accumulator:
    widening (or VNNI dot products, where the host has them) in registers beats LLVM's
    loop (measured 68 against 51 GB/s in cache, 10.9x numpy, and level from DRAM).
    Wider integer types are left to LLVM's vectorizer (float row sums: row_accumulators)."""
    d = stage.definition
    red = d.reduction
    if red is None or red.combiner != "sum" or not stage.loops or \
            not stage.loops[-1].is_reduction:
        return
    loads = [a.tensor.dtype for a in walk_expr(red.body) if isinstance(a, Access)]
    if not loads or max(dt.itemsize for dt in loads) != 1 or red.dtype.kind not in "iu":
        return
    try:
        stage.reduction_strategy("vector_accumulator")
    except ScheduleError:
        pass


def auto_vectorize(stage):
    """Explicit vectors where LLVM's own loop vectorizer gives up: argmax/argmin (it
    cannot vectorize the value-and-position pair; measured 25x faster explicit). For
    sums, products and elementwise loops LLVM's vectorizer matches or beats the
    explicit code, so those loops are left to it."""
    red = stage.definition.reduction
    if red is None or not COMBINERS[red.combiner].positional:
        return
    innermost = stage.loops[-1]
    if innermost.is_reduction:
        try:
            stage.vectorize(innermost)
        except ScheduleError:
            pass


def parts_possible(rows, length):
    """Whether runtime.AUTO_PARTS gives more than one part to some thread count: that
    needs t >= 2, rows < 4 t and a length >= 1024 t, so a length of at least 2048 and
    rows < 4 floor(length / 1024) (tests/test_strategies.py checks the two agree; this
    also holds for rows of 1024 or more, which would need more threads than tex has). A
    nest with the parts is then a specialization for these sizes: a kernel builds a
    specialization when a call first needs it (runtime.compile_kernel)."""
    if at_least(256 * rows, length) is sym.true:   # rows >= length / 256: never (N x N)
        return sym.false
    return all_of(at_least(length, 2048), less(rows, 4 * sym.floor(length / 1024)))


TOTAL_PARTS_MIN_BYTES = 1 << 20     # backends/llvm/parallel.MIDDLING_MIN_BYTES


def auto_split_k(stage, lazy=True):
    """Split the outermost reduction loop into call-time parts (runtime.AUTO_PARTS picks 1
    when the rows already feed every thread); returns the handles the schedule goes on
    with. `lazy`: the parts' nest is a specialization for `parts_possible` sizes: the
    parts more than doubled a row sum's code (a first `ij->i`: 754 -> 323 lines of IR,
    124 -> 65 ms with sympy loaded)."""
    d, state = stage.definition, stage.state
    # one-dimensional outputs and scalars: a 2-d output splits its rows and columns
    # first (the parts double its compile time). A scalar (a dot product, a sum of a
    # whole array) splits its outermost reduction loop by the length of all of them, as a
    # specialization for the sizes where the threads pay (a small one stays as it was)
    if d.reduction is None or state.private is not None or len(d.indices) > 1:
        return (stage,)
    position = next(n for n, a in enumerate(state.axes) if a.reduction)
    if d.indices:
        rows, length = d.extents[d.indices[0]], state.axes[position].extent
        parts = AutoParts(f"{d.name}_parts", rows, length)
    else:
        rows = 1
        length = functools.reduce(lambda x, y: x * y,
                                  (a.extent for a in state.axes if a.reduction))
        # parts when the total reads a megabyte or more (runtime.STREAM_PARTS, whose
        # test the specialization's matches: a team cost a 65536-term float32 dot
        # product 1 us of its 10, and a nest with one part 0.2 us more than the plain one)
        term_bytes = sum(a.tensor.dtype.itemsize for a in walk_expr(d.reduction.body)
                         if isinstance(a, Access))
        parts = AutoParts(f"{d.name}_parts", rows, length, rule="split_k_stream",
                          block=max(term_bytes, 1))
    split = parts_possible(rows, length) if d.indices else \
        at_least(length * parts.block, TOTAL_PARTS_MIN_BYTES)
    split = split if lazy else sym.true
    red = state.reduction
    if split is sym.false or split is not sym.true and \
            not COMBINERS[red.combiner].may_reassociate(red.dtype, state.fast_math):
        return (stage,)                     # (split_k's own test: no parts to build)
    try:
        nest = stage if split is sym.true else stage.specialize(split)
    except ScheduleError:                   # a specialization already: split it whole
        nest = stage
    try:
        nest.split_k(nest.loops[position], parts)
    except ScheduleError:                   # float sums without fast_math stay whole
        pass
    return (stage,) if nest is stage else (nest, stage)

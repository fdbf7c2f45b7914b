"""Explicit vector code for `LoopKind.VECTOR` loops (the innermost loop of a stage), and
for the serial loops directly around them (`emit_serial`).

A vector loop `for x in s..s+E` whose body holds Store / Update / Guard statements is
emitted as

    if every access that moves with x has a runtime step of exactly one element:
        acc_vec = identity                       (one per reduction along x, U*W lanes)
        for v in s .. s + E - E%(U*W) step U*W:  body on <U*W x T> vectors
        acc_vec = fold its U registers into W lanes            (only when U > 1)
        for v in .. s + E - E%W step W:          body on <W x T> vectors
        tail "mask": if E%W: body once more with lane mask (lane < E%W)
        acc = combine(acc, horizontal(acc_vec))  (one horizontal step per loop)
        tail "peel": for x in s + E - E%W .. s+E: the scalar body
    elif every access written in the loop has a step of one element, and the other
         moving loads are of 4- or 8-byte elements or the loop covers a whole local buffer:
        the same vector loop, the other moving loads gathered (llvm.masked.gather)
    else:
        the scalar loop (right for any strides)

(A constant bound of E of at most U*W lanes makes each "for v" a branch: one vector.)

Rules:
- Width. R = 512 register bits when the host has avx512f, 256 with avx2, else 128.
  W = R / (8 * n) lanes, n the smallest element size among the accesses that move with
  x, so one load of the narrowest type fills a register (int8 -> int32 sums run 64 lanes
  on AVX-512: four int32 accumulator registers, independent chains). W is halved while
  the widest value type in the body would take more than MAX_REGISTERS registers, and
  is capped by a constant bound of the extent (a 8-wide inner loop gets W = 8).
- Whole local buffers. When x moves through a LOCAL buffer of constant shape element by
  element from its first to its last (`acc[ji]` for ji in 0..64, the vector accumulator
  of a privatized reduction or a register tile), W is the whole buffer (a power of two,
  at most 2*MAX_REGISTERS registers of the widest type), U = 1: the buffer is one
  `<W x T>` value, loaded and stored whole at one address, with the remainder of a short
  tile as a lane mask and a select whatever the tail (lane k is element k, so each
  element sees the scalar loop's operations). LLVM then keeps it in registers across
  the enclosing loops (LICM promotes the loads and stores of a non-escaping alloca at
  one address; SROA removes it).
- Unroll. With a reduction along x, the accumulator's dependence chain (an add of
  latency 3-4, argmax's compare and select) would limit the loop, so the main loop
  runs U*W lanes: U doubles while the accumulator type fits MAX_REGISTERS registers,
  every value 2*MAX_REGISTERS, and a constant extent bound four wide vectors (float32
  sums and argmax on AVX-512: U = 4, four independent zmm chains; int8 -> int32: U = 1).
  LLVM splits a <U*W x T> operation into U independent register operations.
- Accesses. An access whose index moves with x by a coefficient c (affine; c may be a
  size) has step sum_d c_d * stride_d elements; stride values are runtime (a LOCAL
  buffer's are known), so the unit step is checked before the loop (the versioning
  above), or before the reduction loop around a register tile's vector loops
  (`unit_steps_test`). A unit step is a plain `load/store <W x T>` aligned to the
  element size; other steps gather (AVX-512 gathers 32- and 64-bit elements; LLVM assembles narrower
  ones lane by lane, no faster than the scalar loop, which they therefore keep unless
  the loop covers a whole local buffer); an access that does not move is a scalar
  load and a splat (a subtree that does not move is computed as scalars); `IndexValue`
  is base + c * <0, 1, .., W-1>.
- Ops. The op tables of ops.py run on vector operands (an OpContext with lanes makes intrinsics
  take the `.vN` suffix); ops with no vector form (libm's erf, integer power) run lane
  by lane (extract, scalar op, insert). An int32 product of two 8- or 16-bit values
  runs vpmaddwd (one uop; vpmulld takes two on Intel): vector_reduce._short_product.
- Updates. A target that does not move with x is a reduction along the vector loop: a
  vector accumulator starts at the combiner's identity (argmax/argmin: the identity
  value at position INT64_MAX, which never wins a tie), and one horizontal step after
  the loop (llvm.vector.reduce.*, a shuffle tree for argmax/argmin with ops._better's
  tie rule) is combined into the target. When an argmax lane's positions grow with x,
  the first wide vector fills the lanes and the main loop needs no tie test
  (`increasing_better`: one compare and a select on the chain). A float sum/prod
  without fast_math is not reassociated: its loop stays scalar. A target that moves
  with x is loaded, combined and stored as vectors (C[i, j] += A[i, k] * B[k, j] with
  j vectorized).
- VNNI. On a host with avx512vnni (512-bit; 256/128-bit with avx512vl, or avxvnni), an
  int32 sum of int32(x), x int8 or uint8 moving with the loop, runs vpdpbusd: each
  int32 lane gets the exact sum of four bytes (u8 x s8 products with the byte vector
  and ones; masked-off bytes are zeroed), added to the accumulator afterwards so that
  the dots do not wait for each other. The dot puts four bytes into one lane, so it is
  used where lanes are not observable: the private accumulator of a reduction along
  x (horizontal step over W/4 lanes), and a whole LOCAL partial buffer whose total is
  all the kernel ever reads (`vector_plan.sum_partials`: the vector accumulator of a
  privatized sum): the dots go into its first W/4 lanes. Products int32(x) * int32(y)
  of two byte values take one dot (u8 x s8) or two (s8 x s8, u8 x u8). Not for targets
  whose lanes are results (inner-parallel rows, column sums).
- Masks. Guards whose condition moves with x become lane masks; a masked statement
  uses llvm.masked.load/store and masked-off lanes keep the accumulator unchanged (they
  contribute the identity). A guard that does not move with x stays a branch. A row of
  a LOCAL buffer that holds every lane of every chunk (`lanes_in_bounds`: a register
  tile's row) takes a plain load and a select-store even under a mask, so LLVM keeps
  the tile in registers (a masked access to it kept the whole tile in memory).
- Falls back to the scalar loop (vector_plan.py decides; `plan_vector_loop` gives the
  reason): statements other than Store/Update/Guard, a Store to an element that does
  not move with x, an index or guard that is not affine in x, a buffer written in the
  loop and accessed there at another index, a float sum/prod reduction without
  fast_math, a constant extent below 2; at run time, a written access whose step is
  not one element.

Serial loops around a vector loop (`emit_serial`, called by Codegen._loop):
- `for j: for ii (vector): acc[ii] (op)= f(X[ii, j])` -- each lane owns a row, the rows
  step by a runtime stride (inner-parallel reductions) -- runs, for each vector of W
  lanes, blocks of K columns: K contiguous elements of each of the W rows, transposed
  in registers by log2 W rounds of shuffles (W*K elements in at most 16 registers), the
  vector loop's body once per column; the remaining columns gather. Each lane sees its
  row in order, so every combiner and dtype (and float sums without fast_math) give
  the scalar result -- except that a lone row update whose combiner regroups exactly
  (integer ops, float max/min) or under fast_math combines a block's columns as a tree
  first (a chain of log2 K steps instead of K). At run time a j step other than one
  element runs the loop as is.
- A loop `for jo` whose vector loops have extent Min(c, A - c*jo) (a split's last tile
  is shorter) runs its whole tiles, jo < floor(A/c), as a copy with constant extents
  (one vector, no tail test), then the last tile.
"""
import numpy as np
import tex.symbolic as sym
from llvmlite import ir

from tex.expr import Access, IndexValue, Op, negation

from ...scheduler.ir import Guard, Loop, LoopKind, Scope, Store, VectorTail, symbols_of, walk
from ...scheduler.vector_plan import (VectorPlan, access_key, affine_coefficient, itemsize,
                                      local_flat)
from ...scheduler.vectorize import Peeled
from .irtypes import (I1, I8, I32, I64, PTR, memory_type, self_referential, splat_constant,
                      type_suffix, value_type)
from .ops import COMBINE, OPS, _better, increasing_better, vector_flags
from .pairs import paired_vector_value
from .vector_reduce import AccumulatorMixin

GATHER_MIN_BYTES = 4     # narrower strided loads run the scalar loop (no hardware gather)


STRAIGHT_VECTORS = 8       # a constant loop of at most this many vectors is emitted flat


def _per_lane(e):
    """Ops that have no vector form: integer power (a scalar helper)."""
    return e.name == "power" and np.dtype(e.dtype).kind in "iub"


def unit_steps_test(cg, loop):
    """For a reduction loop around register-tile code (every loop inside it unrolled or
    vector: a micro-kernel's k loop), the test that every access moving with its vector
    loops steps by one element, as (i1 value, ids of the vector loops), made before the
    loop; None when no step is a runtime value or one is known not to be one. Codegen
    then emits the loop twice, under the test and under its negation, and each vector
    loop inside skips its own test (VectorLoop.emit): tested inside, it had to be
    unswitched out of the loop by LLVM, which gives up past a size (a few-rows tile of
    5 x 4 vectors with edge versions beside it kept its tests inside the k loop, its
    accumulators spilled: 5 x 1000 @ 1000 x 64 5 -> 9 us), and which only its O3
    pipeline does (a row sum's loops over whole vectors and the last one, `Peeled`)."""
    if loop.kind is not LoopKind.SERIAL or not loop.reduction or \
            not (loop.plan is None or isinstance(loop.plan, Peeled)):
        return None
    vectors = []
    for n in walk(loop):
        if not isinstance(n, Loop) or n is loop:
            continue
        if n.kind is LoopKind.VECTOR and isinstance(n.plan, VectorPlan):
            vectors.append(n)
        elif n.kind is not LoopKind.UNROLLED:
            return None
    if not vectors or any(buf not in cg.memory for v in vectors for buf, _ in v.plan.moving):
        return None
    unit = ir.Constant(I1, 1)
    for v in {id(v): v for v in vectors}.values():
        one = VectorLoop(cg, v, v.plan).steps()[0]
        if isinstance(one, ir.Constant):
            if not one.constant:
                return None
            continue
        unit = _and(cg.b, unit, one)
    if isinstance(unit, ir.Constant):
        return None
    return unit, {id(v) for v in vectors}


def _always(value):
    return isinstance(value, ir.Constant) and bool(value.constant)


def _never(value):
    return isinstance(value, ir.Constant) and not value.constant


def _and(b, known, value):
    """known & value, a constant when `known` decides it (so that the arms it rules out
    are never emitted)."""
    return value if _always(known) else known if _never(known) else b.and_(known, value)


def emit_vector_loop(cg, loop, start, end):
    """Codegen._loop for a VECTOR loop (its VectorPlan made by schedule/vectorize.py):
    vector code, with a scalar version for other strides."""
    VectorLoop(cg, loop, loop.plan).emit(start, end)


def fused_product(s, dt):
    """Whether the fast-math sum `s` of products (a register tile's update, a row dot
    product, and their scalar remainder) is written as llvm.fma, with no fast-math
    flags: the code LLVM made of a product with `contract` and a sum with `reassoc
    contract` (vfmadd), and the same values from a light compile (tiers.same_values),
    which makes no FMA of flagged operations."""
    from ...scheduler.target import target
    v = s.value
    return (s.combiner == "sum" and s.fast_math and np.dtype(dt).kind == "f"
            and np.dtype(dt).itemsize >= 4
            and isinstance(v, Op) and v.name == "multiply" and len(v.args) == 2
            and all(a.dtype == dt for a in v.args) and v.dtype == dt
            and target().has("fma"))


class VectorLoop(AccumulatorMixin):
    """Emits one planned vector loop through the Codegen `cg` (its builder, env, memory)."""

    def __init__(self, cg, loop, plan):
        self.cg, self.loop, self.plan, self.var = cg, loop, plan, loop.var
        self.set_width(plan.width * plan.unroll)
        self.accs = {}          # id(Update) -> (value slot, position slot or None)
        self.phase = "main"     # "first": the first vector of the main loop, "rest": after it
        self.gathering = set()  # ids of buffers whose loads gather (the strided version)
        self.override = {}      # id(Access) -> its <W x T> value for the chunk (transposed)
        # one vector covers the loop (a constant bound of at most W lanes): no loop
        self.single = plan.bound is not None and plan.bound <= plan.width * plan.unroll
        # LOCAL accesses every lane of which is inside the buffer: plain, never masked
        self.plain = plan.whole | plan.in_bounds

    def set_width(self, w):
        self.w = w
        self.iota = ir.Constant(ir.VectorType(I64, w), list(range(w)))

    # ------------------------------------------------------------ types and helpers
    def vtype(self, ty):
        return ir.VectorType(ty, self.w)

    def splat(self, v):
        if isinstance(v, ir.Constant):
            return splat_constant(self.vtype(v.type), v.constant)
        b = self.cg.b
        one = b.insert_element(splat_constant(self.vtype(v.type), 0), v, ir.Constant(I32, 0))
        zeros = splat_constant(ir.VectorType(I32, self.w), 0)
        return b.shuffle_vector(one, splat_constant(self.vtype(v.type), 0), zeros)

    def ops(self, lanes="vector", contract=False):
        """The OpContext of the op tables: <W x T> values (lanes=None: scalars, or a
        width of its own)."""
        return self.cg.ops(self.w if lanes == "vector" else lanes, contract)

    def step(self, expr):
        """The i64 value of expr's coefficient in the loop variable."""
        return self.cg.index(affine_coefficient(expr, self.var))

    # ------------------------------------------------------------ the loop
    def emit(self, start, end):
        """Versions by the runtime steps of the accesses that move with the loop: all of
        them one element -> plain vector loads and stores; otherwise, when every written
        one is and the other loads are of 4- or 8-byte elements (or the loop covers a
        whole local buffer), the loads of other steps gather (llvm.masked.gather); else
        the scalar loop. A LOCAL buffer's step is known
        and needs no test. (Measured on Zen 5: gathers beat the scalar loop by 15-25% on
        column-major float rows, lose to it on stride-2 views, and tie on bytes, which
        no x86 instruction gathers.)"""
        known = self.cg.known_unit_steps.get(id(self.loop))
        if known:                   # tested before the loop around it (unit_steps_test)
            self._vector(start, end)
            return
        b = self.cg.b
        unit, unit_written, strided = self.steps()
        if _always(unit):
            self._vector(start, end)
            return
        if not self.plan.whole and any(itemsize(buf.dtype) < GATHER_MIN_BYTES
                                       for buf, _ in self.plan.moving if id(buf) in strided):
            # no hardware gathers of bytes or halves: the scalar loop (but a whole local
            # buffer is never indexed lane by lane, so that it stays a register value)
            strided = set()

        def gather():
            self.gathering = strided
            self._vector(start, end)
            self.gathering = set()

        def other():
            if not strided or _never(unit_written):
                self._scalar_loop(start, end)
            elif _always(unit_written):          # a LOCAL tile's accumulators, say
                gather()
            else:
                self.cg.tested_steps()
                with b.if_else(unit_written) as (gathered, scalar):
                    with gathered:
                        gather()
                    with scalar:
                        self._scalar_loop(start, end)
        if known is False or _never(unit):   # some access does not step by one element
            other()
            return
        self.cg.tested_steps()
        with b.if_else(unit) as (vector, general):
            with vector:
                self._vector(start, end)
            with general:
                other()

    def steps(self):
        """(unit, unit_written, strided): i1 values (or constants) saying that every
        access moving with the loop, and every written one, steps by one element; and
        the ids of the buffers whose loads would gather otherwise."""
        b = self.cg.b
        unit, unit_written, strided = ir.Constant(I1, 1), ir.Constant(I1, 1), set()
        for buf, index in self.plan.moving:
            step = self.access_step(buf, index)
            if isinstance(step, int):
                if step != 1:
                    if id(buf) in self.plan.written:
                        unit_written = ir.Constant(I1, 0)
                    strided.add(id(buf))
                    unit = ir.Constant(I1, 0)
                continue
            one = b.icmp_signed("==", step, ir.Constant(I64, 1))
            unit = _and(b, unit, one)
            if id(buf) in self.plan.written:
                unit_written = _and(b, unit_written, one)
            else:
                strided.add(id(buf))
        return unit, unit_written, strided

    def _scalar_loop(self, start, end):
        """The loop on scalars, for steps other than one. Over a register tile (a
        LOCAL buffer moving with the loop) of constant extent it is straight-line code:
        an access at a variable offset would keep the tile out of registers in the
        vector version too."""
        local = any(buf.scope is Scope.LOCAL for buf, _ in self.plan.moving)
        with self.cg.summing_as_vectors():
            if not (local and self.cg.straight_line(self.loop)):
                self.cg._serial_loop(self.loop, start, end)

    def access_step(self, buf, index):
        """The step in elements of buf[index] when the loop variable grows by one: an int
        when known (LOCAL buffers of constant shape), else an i64 value."""
        cg = self.cg
        flat = local_flat(buf, index)
        if flat is not None:
            c = affine_coefficient(flat, self.var)
            if c.is_Integer:
                return int(c)
        _, strides = cg.memory[buf]
        step, known = None, 0           # the runtime part, and the part known now
        for ix, st in zip(index, strides):
            c = affine_coefficient(ix, self.var)
            if c == 0:
                continue
            if c.is_Integer and isinstance(st, ir.Constant):
                known += int(c) * int(st.constant)      # an output's unit last stride
                continue
            term = cg.b.mul(cg.index(c), st)
            step = term if step is None else cg.b.add(step, term)
        if step is None:
            return known
        return cg.b.add(step, ir.Constant(I64, known)) if known else step

    def _vector(self, start, end):
        cg, w = self.cg, self.w
        b = cg.b
        n = b.sub(end, start)
        n = b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)), ir.Constant(I64, 0), n)
        main_end = b.add(start, b.and_(n, ir.Constant(I64, -w)))
        for u in self.plan.reductions:
            self._init_accumulator(u)
        first = start
        if self.plan.increasing:
            # argmax/argmin lanes whose positions only grow: the first full vector fills
            # them, and the loop after it needs no tie test (see ops.increasing_better)
            full = b.icmp_signed(">=", n, ir.Constant(I64, w))
            with b.if_then(full):
                self.phase = "first"
                self._chunk(start, None)
            first = b.select(full, b.add(start, ir.Constant(I64, w)), start)
        self.phase = "main"
        extent = sym.sympify(self.loop.extent)
        if self.single and extent == w and not self.plan.increasing:
            self._chunk(start, None)            # exactly one vector
        elif extent.is_Integer and not self.plan.increasing and \
                int(extent) // w <= STRAIGHT_VECTORS:
            # a few whole vectors (a register tile's row): straight-line code, so that
            # the tile's local accumulator is promoted to registers early in the pipeline
            for c in range(int(extent) // w):
                self._chunk(b.add(start, ir.Constant(I64, c * w)), None)
        else:
            self._main_loop(first, main_end, w)
        self.phase = "rest"
        if self.plan.unroll > 1:          # the remaining whole vectors of W lanes
            self._narrow_accumulators(self.plan.width)
            main_end, first = b.add(start, b.and_(n, ir.Constant(I64, -self.w))), main_end
            self._main_loop(first, main_end, self.w)
        # a constant extent that whole vectors cover needs no tail (a split's whole tiles)
        no_tail = extent.is_Integer and int(extent) % w == 0 and int(extent) % self.w == 0
        if self.masked_tail and not no_tail:
            rem = b.sub(end, main_end)
            with b.if_then(b.icmp_signed(">", rem, ir.Constant(I64, 0))):
                mask = b.icmp_signed("<", self.iota, self.splat(rem))
                # one vector covers the loop: a remainder means no whole vector ran, so
                # the last vector starts at the start (the same address as the whole one)
                self._chunk(start if self.single else main_end, mask)
        for u in self.plan.reductions:
            self._finish_accumulator(u)
        if not self.masked_tail and not no_tail:
            md = cg.module.add_metadata([ir.MetaDataString(cg.module,
                                                           "llvm.loop.vectorize.enable"),
                                         ir.Constant(I1, 0)])
            with cg.summing_as_vectors():
                cg._serial_loop(self.loop, main_end, end, self_referential(cg.module, md))

    @property
    def masked_tail(self):
        """A loop over a whole LOCAL buffer ends with a masked vector whatever its tail
        (lane k of the vector is element k of the buffer, so each element sees the same
        operations as in the scalar remainder loop; the buffer stays one vector value)."""
        return self.loop.tail is VectorTail.MASK or bool(self.plan.whole)

    def _main_loop(self, start, stop, step):
        cg = self.cg
        b, name = cg.b, self.var.name
        if self.single:                # at most one vector: a branch, not a loop
            with b.if_then(b.icmp_signed("<", start, stop)):
                self._chunk(start, None)
            return
        cg.counted_loop(start, stop, step, f"{name}.v", lambda v: self._chunk(v, None))

    def _chunk(self, base, mask):
        """The body for lanes base .. base+W-1 (those where `mask` is set)."""
        self.cg.env[self.var] = base
        self._statements(self.loop.body, mask)
        del self.cg.env[self.var]

    # ------------------------------------------------------------ statements
    def _statements(self, body, mask):
        cg = self.cg
        for s in body:
            if isinstance(s, Guard):
                if self.var in symbols_of(s.cond):
                    m = self._lane_condition(s.cond)
                    self._statements(s.body, m if mask is None else cg.b.and_(mask, m))
                else:
                    with cg.b.if_then(cg.condition(s.cond)):
                        self._statements(s.body, mask)
            elif isinstance(s, Store):
                v = self.value(s.value, mask)
                self._write(s.buffer, s.index, v, mask)
            elif id(s) in self.accs:
                self._accumulate(s, mask)
            else:
                self._update_row(s, mask)

    def _update_row(self, s, mask):
        """A target that moves with the loop: load, combine and store whole vectors."""
        cg = self.cg
        b, dt = cg.b, s.buffer.dtype
        acc = self._read(s.buffer, s.index, mask)
        if id(s) in self.plan.vnni:
            # a sum-only partial covered whole: the dots of the W bytes add into its
            # first W/4 lanes (the total is all that is read), the other lanes keep theirs
            d = self._dot(self.plan.vnni[id(s)], mask)
            k = d.type.count
            zero = splat_constant(d.type, 0)
            pad = b.shuffle_vector(d, zero, ir.Constant(ir.VectorType(I32, self.w), [
                ir.Constant(I32, n if n < k else k) for n in range(self.w)]))
            self._write(s.buffer, s.index, b.add(acc, pad), None)
            return
        if s.arg is None and self._fuses(s, dt):
            self._write(s.buffer, s.index, self._fma(s, acc, mask), mask)
            return
        x = self.reduced_value(s, mask)
        if s.arg is None:
            fast = vector_flags(s.combiner, s.fast_math)
            self._write(s.buffer, s.index,
                        COMBINE[s.combiner](self.ops(), dt, acc, x, fast), mask)
            return
        acc_pos = self._read(s.arg.buffer, s.arg.index, mask)
        pos = self.value(s.arg.position, mask)
        better = increasing_better(self.ops(), dt, s.combiner, x, acc) if s.arg.ordered \
            else _better(self.ops(), dt, s.combiner, x, acc, pos, acc_pos)
        # the best value is max(acc, x) with NaN winning (argmin: min) whichever position
        # wins a tie: written as a select of the loaded acc, LLVM makes the store a
        # masked store (vmaskmovps: ~20 cycles on AMD; 12 of them per register tile of
        # a fused argmax cost 7% of its matmul)
        best = COMBINE[s.combiner[3:]](self.ops(), dt, acc, x, s.fast_math)
        self._write(s.buffer, s.index, best, mask)
        self._write(s.arg.buffer, s.arg.index, b.select(better, pos, acc_pos), mask)

    def _fma(self, s, acc, mask):
        """acc + the product `s` sums (a `_fuses` update), as one llvm.fma."""
        a, m = (self.value(v, mask) for v in s.value.args)
        return self.cg.b.call(self.ops().intrinsic("fma", s.buffer.dtype, 3), [a, m, acc])

    def _fuses(self, s, dt):
        """Whether the update `s` is written as llvm.fma (fused_product), outside the
        steps of a pair."""
        return self.cg.pairing is None and fused_product(s, dt)

    # ------------------------------------------------------------ values
    def reduced_value(self, update, mask):
        """An Update's value; with fast_math its float products may fuse into FMAs with
        the accumulation (as for scalar reductions), but not a sum's, whose combine
        step has no flags (ops.vector_flags: a flag left alone would only keep its quick
        code from running, tiers.same_values)."""
        if self.cg.pairing is not None:         # both steps of a pair (pairs.py)
            return paired_vector_value(self, update, mask)
        return self.value(update.value, mask, vector_flags(update.combiner,
                                                            update.fast_math))

    def value(self, e, mask, contract=False):
        """e for the W lanes of the current chunk, as a <W x T> vector."""
        cg = self.cg
        if id(e) not in self.plan.dependent:
            scalar = self._scalar(e, mask, contract)
            return self.cg._reuse(("splat", scalar, self.w), lambda: self.splat(scalar))
        if isinstance(e, Access):
            if id(e) in self.override:
                return self.override[id(e)]
            return self._read(e.tensor, e.index, mask)
        if isinstance(e, IndexValue):
            base = self.splat(cg.index(e.expr))
            return cg.b.add(base, cg.b.mul(self.splat(self.step(e.expr)), self.iota))
        args = [self.value(a, mask, contract) for a in e.args]
        if self._short_operands(e):
            return self._short_product(e, args)
        if _per_lane(e):
            return self._lane_by_lane(e, args)
        return OPS[e.name](self.ops(contract=contract), e, *args)

    def _scalar(self, e, mask, contract=False):
        """A value that does not move with the loop. Under a lane mask a load goes
        through a dummy slot when no lane is active (the scalar loop would not load)."""
        cg = self.cg
        if isinstance(e, Access):
            ptr = cg.address(e.tensor, e.index)
            if mask is not None:
                dummy = cg.eb.alloca(memory_type(e.tensor.dtype), name="vec.dummy")
                any_lane = cg.b.call(cg._extern(f"llvm.vector.reduce.or.v{self.w}i1", I1,
                                                [mask.type]), [mask])
                ptr = cg.b.select(any_lane, ptr, dummy)
            elif e.tensor.scope is Scope.INPUT:      # (as in _read: inputs are read-only)
                return cg._reuse(("load", ptr), lambda: cg._load(ptr, e.tensor.dtype))
            return cg._load(ptr, e.tensor.dtype)
        if isinstance(e, Op):
            args = [self._scalar(a, mask, contract) for a in e.args]
            return OPS[e.name](self.ops(None, contract), e, *args)
        return cg.value(e, contract)

    def _lane_by_lane(self, e, args):
        b = self.cg.b
        out = ir.Constant(self.vtype(value_type(e.dtype)), None)
        for k in range(self.w):
            lane = ir.Constant(I32, k)
            r = OPS[e.name](self.ops(None), e, *[b.extract_element(a, lane) for a in args])
            out = b.insert_element(out, r, lane)
        return out

    def _lane_condition(self, c):
        cg = self.cg
        b = cg.b
        if isinstance(c, (sym.And, sym.Or)):
            parts = [self._lane_condition(a) for a in c.args]
            out = parts[0]
            for p in parts[1:]:
                out = b.and_(out, p) if isinstance(c, sym.And) else b.or_(out, p)
            return out
        if self.var not in symbols_of(c):
            return self.splat(cg.condition(c))
        if isinstance(c, sym.Not):
            return b.not_(self._lane_condition(c.args[0]))
        # the lanes of one relation: the same for every unrolled row of a register tile
        # whose mask is (row inside) & (lanes inside), so made once per chunk; those of
        # its opposite made already (a packed copy's padding: `if not inside: 0`) are
        # inverted
        def make():
            opposite = negation(c)
            known = cg.reused(("lanes", self.w, opposite, cg._bound([opposite])))
            return self._lanes(c) if known is None else b.not_(known)
        return cg._reuse(("lanes", self.w, c, cg._bound([c])), make)

    def _lanes(self, c):
        b = self.cg.b
        d = c.lhs - c.rhs
        step = self.step(d)
        lanes = self.iota if isinstance(step, ir.Constant) and step.constant == 1 else \
            b.mul(self.splat(step), self.iota)
        lanes = b.add(self.splat(self.cg.index(d)), lanes)
        ops = {sym.StrictLessThan: "<", sym.LessThan: "<=", sym.StrictGreaterThan: ">",
               sym.GreaterThan: ">=", sym.Eq: "==", sym.Ne: "!="}
        return b.icmp_signed(ops[type(c)], lanes, ir.Constant(lanes.type, 0))

    # ------------------------------------------------------------ memory
    def _read(self, buf, index, mask):
        """buf[index] for the lanes of the chunk: a whole LOCAL buffer, or a row of one
        that holds every lane (plan.in_bounds), is one plain load; a strided access
        gathers, others load (masked)."""
        ptr = self.cg.address(buf, index)
        if access_key(buf, index) in self.plain:
            return self._load(ptr, buf.dtype, None)
        if id(buf) in self.gathering:
            return self._gather(ptr, self.access_step(buf, index), buf.dtype, mask)
        if buf.scope is Scope.INPUT:
            # a kernel never writes its inputs: the rows of a register tile read each
            # vector of B once, not once per row (IR LLVM would only merge again)
            return self.cg._reuse(("vector load", ptr, mask, buf.dtype),
                                  lambda: self._load(ptr, buf.dtype, mask))
        return self._load(ptr, buf.dtype, mask)

    def _write(self, buf, index, v, mask):
        """Store the lanes of `v` (where `mask` is set) to buf[index]; a whole LOCAL buffer,
        or a row of one that holds every lane, takes one plain store (the masked-off
        lanes keep their values through a select)."""
        ptr = self.cg.address(buf, index)
        if access_key(buf, index) in self.plain and mask is not None:
            old = self._load(ptr, buf.dtype, None)
            v, mask = self.cg.b.select(mask, v, old), None
        self._store(ptr, v, buf.dtype, mask)

    def _gather(self, ptr, step, dt, mask):
        """llvm.masked.gather of the lanes ptr + k*step (a runtime step in elements)."""
        cg = self.cg
        b, mty = cg.b, self.vtype(memory_type(dt))
        if isinstance(step, int):
            step = ir.Constant(I64, step)
        offsets = b.mul(self.splat(step), self.iota)
        ptrs = b.gep(ptr, [offsets], source_etype=memory_type(dt))
        ptrs.type = ir.VectorType(PTR, self.w)      # llvmlite types a vector GEP as scalar
        if mask is None:
            mask = splat_constant(self.vtype(I1), 1)
        fn = cg._extern(f"llvm.masked.gather.{type_suffix(mty)}.v{self.w}p0", mty,
                        [ptrs.type, I32, mask.type, mty])
        v = b.call(fn, [ptrs, ir.Constant(I32, itemsize(dt)), mask, ir.Constant(mty, None)])
        return b.trunc(v, self.vtype(I1)) if np.dtype(dt).kind == "b" else v

    def _load(self, ptr, dt, mask):
        cg = self.cg
        b, mty = cg.b, self.vtype(memory_type(dt))
        align = itemsize(dt)
        if mask is None:
            v = b.load(vector_pointer(b, ptr, mty), typ=mty, align=align)
        else:
            fn = cg._extern(f"llvm.masked.load.{type_suffix(mty)}.p0", mty,
                            [PTR, I32, mask.type, mty])
            v = b.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(mty, None)])
        return b.trunc(v, self.vtype(I1)) if np.dtype(dt).kind == "b" else v

    def _store(self, ptr, v, dt, mask):
        cg = self.cg
        b = cg.b
        if np.dtype(dt).kind == "b":
            v = b.zext(v, self.vtype(I8))
        align = itemsize(dt)
        if mask is None:
            b.store(v, vector_pointer(b, ptr, v.type), align=align)
            return
        fn = cg._extern(f"llvm.masked.store.{type_suffix(v.type)}.p0", ir.VoidType(),
                        [v.type, PTR, I32, mask.type])
        b.call(fn, [v, ptr, ir.Constant(I32, align), mask])


def vector_pointer(b, ptr, vty):
    """llvmlite types the pointers of allocas (`i32*`); a vector access through one needs
    a `<W x i32>*` (LLVM itself reads both as the same opaque `ptr`)."""
    if getattr(ptr.type, "is_opaque", True):
        return ptr
    return b.bitcast(ptr, ir.PointerType(vty))

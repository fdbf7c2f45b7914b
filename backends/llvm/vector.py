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
  above). A unit step is a plain `load/store <W x T>` aligned to the element size;
  other steps gather (AVX-512 gathers 32- and 64-bit elements; LLVM assembles narrower
  ones lane by lane, no faster than the scalar loop, which they therefore keep unless
  the loop covers a whole local buffer); an access that does not move is a scalar
  load and a splat (a subtree that does not move is computed as scalars); `IndexValue`
  is base + c * <0, 1, .., W-1>.
- Ops. The op tables of ops.py run on vector operands (an OpContext with lanes makes intrinsics
  take the `.vN` suffix); ops with no vector form (libm's erf, integer power) run lane
  by lane (extract, scalar op, insert).
- Updates. A target that does not move with x is a reduction along the vector loop: a
  vector accumulator starts at the combiner's identity (argmax/argmin: the identity
  value at position INT64_MAX, which never wins a tie), and one horizontal step after
  the loop (llvm.vector.reduce.*, a shuffle tree for argmax/argmin with ops._better's
  tie rule) is combined into the target. When an argmax lane's positions grow with x,
  the first wide vector fills the lanes and the main loop needs no tie test
  (`_increasing_better`: one compare and a select on the chain). A float sum/prod
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
  contribute the identity). A guard that does not move with x stays a branch.
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
import sympy as sp
from llvmlite import ir

from tex.expr import Access, IndexValue, Op

from ...scheduler.ir import Guard, Scope, Store
from ...scheduler.stage import identity
from ...scheduler.vector_plan import (access_key, affine_coefficient, dot_width, itemsize,
                                      local_flat)
from .irtypes import (I1, I8, I32, I64, PTR, const, memory_type, self_referential, type_suffix,
                      value_type)
from .ops import COMBINE, OPS, _better

INT64_MAX = (1 << 63) - 1
GATHER_MIN_BYTES = 4     # narrower strided loads run the scalar loop (no hardware gather)


STRAIGHT_VECTORS = 8       # a constant loop of at most this many vectors is emitted flat


def _per_lane(e):
    """Ops that have no vector form: libm's erf, integer power (a scalar helper)."""
    return e.name == "erf" or (e.name == "power" and np.dtype(e.dtype).kind in "iub")


def emit_vector_loop(cg, loop, start, end):
    """Codegen._loop for a VECTOR loop (its VectorPlan made by schedule/vectorize.py):
    vector code, with a scalar version for other strides."""
    VectorLoop(cg, loop, loop.plan).emit(start, end)


class VectorLoop:
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

    def set_width(self, w):
        self.w = w
        self.iota = ir.Constant(ir.VectorType(I64, w), list(range(w)))

    # ------------------------------------------------------------ types and helpers
    def vtype(self, ty):
        return ir.VectorType(ty, self.w)

    def splat(self, v):
        if isinstance(v, ir.Constant):
            return ir.Constant(self.vtype(v.type), v.constant)
        b = self.cg.b
        one = b.insert_element(ir.Constant(self.vtype(v.type), None), v, ir.Constant(I32, 0))
        zeros = ir.Constant(ir.VectorType(I32, self.w), [ir.Constant(I32, 0)] * self.w)
        return b.shuffle_vector(one, ir.Constant(self.vtype(v.type), None), zeros)

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
        cg = self.cg
        b = cg.b
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
            unit = b.and_(unit, one)
            if id(buf) in self.plan.written:
                unit_written = b.and_(unit_written, one)
            else:
                strided.add(id(buf))
        if isinstance(unit, ir.Constant) and unit.constant:
            self._vector(start, end)
            return
        if not self.plan.whole and any(itemsize(buf.dtype) < GATHER_MIN_BYTES
                                       for buf, _ in self.plan.moving if id(buf) in strided):
            # no hardware gathers of bytes or halves: the scalar loop (but a whole local
            # buffer is never indexed lane by lane, so that it stays a register value)
            strided = set()
        with b.if_else(unit) as (vector, other):
            with vector:
                self._vector(start, end)
            with other:
                if not strided:
                    self._scalar_loop(start, end)
                else:
                    with b.if_else(unit_written) as (gather, scalar):
                        with gather:
                            self.gathering = strided
                            self._vector(start, end)
                            self.gathering = set()
                        with scalar:
                            self._scalar_loop(start, end)

    def _scalar_loop(self, start, end):
        """The loop on scalars, for steps other than one. Over a register tile (a
        LOCAL buffer moving with the loop) of constant extent it is straight-line code:
        an access at a variable offset would keep the tile out of registers in the
        vector version too."""
        local = any(buf.scope is Scope.LOCAL for buf, _ in self.plan.moving)
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
            # them, and the loop after it needs no tie test (see _increasing_better)
            full = b.icmp_signed(">=", n, ir.Constant(I64, w))
            with b.if_then(full):
                self.phase = "first"
                self._chunk(start, None)
            first = b.select(full, b.add(start, ir.Constant(I64, w)), start)
        self.phase = "main"
        extent = sp.sympify(self.loop.extent)
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
            cg._serial_loop(self.loop, main_end, end, self_referential(cg.module, md))

    @property
    def masked_tail(self):
        """A loop over a whole LOCAL buffer ends with a masked vector whatever its tail
        (lane k of the vector is element k of the buffer, so each element sees the same
        operations as in the scalar remainder loop; the buffer stays one vector value)."""
        return self.loop.tail == "mask" or bool(self.plan.whole)

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
                if self.var in s.cond.free_symbols:
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
            zero = ir.Constant(d.type, [ir.Constant(I32, 0)] * k)
            pad = b.shuffle_vector(d, zero, ir.Constant(ir.VectorType(I32, self.w), [
                ir.Constant(I32, n if n < k else k) for n in range(self.w)]))
            self._write(s.buffer, s.index, b.add(acc, pad), None)
            return
        x = self.reduced_value(s, mask)
        if s.arg is None:
            self._write(s.buffer, s.index,
                        COMBINE[s.combiner](self.ops(), dt, acc, x, s.fast_math), mask)
            return
        acc_pos = self._read(s.arg.buffer, s.arg.index, mask)
        pos = self.value(s.arg.position, mask)
        better = _better(self.ops(), dt, s.combiner, x, acc, pos, acc_pos)
        self._write(s.buffer, s.index, b.select(better, x, acc), mask)
        self._write(s.arg.buffer, s.arg.index, b.select(better, pos, acc_pos), mask)

    # ------------------------------------------------------------ VNNI
    def _dot(self, info, mask):
        """<W/4 x i32>: the sums of each four consecutive lanes of int32(x) (or of
        int32(x) * int32(y)) over the W byte lanes (masked-off lanes count 0), by
        vpdpbusd, which multiplies unsigned bytes by signed ones and adds each four
        products into an int32 lane -- exactly (at most 4 * 255 * 128 in magnitude; the
        non-saturating form). Signed x signed runs as (x ^ 0x80) * y - 128 * y, unsigned
        x unsigned as x * (y ^ 0x80) + 2 * (x * 64), each a dot of its own."""
        cg = self.cg
        b = cg.b
        bits = dot_width(self.w, self.plan.vnni_widths, self.plan.bits)
        nb, lanes = bits // 8, bits // 32
        vty = ir.VectorType(I32, lanes)
        fn = cg._extern(f"llvm.x86.avx512.vpdpbusd.{bits}", vty, [vty, vty, vty])
        bty = ir.VectorType(I8, self.w)

        def byte_vector(e):
            v = self.value(e, mask)
            if mask is not None:
                v = b.select(mask, v, ir.Constant(bty, [ir.Constant(I8, 0)] * self.w))
            return v

        def splat8(k):
            return ir.Constant(bty, [ir.Constant(I8, k)] * self.w)
        x = byte_vector(info.x)
        sx = np.dtype(info.x.dtype).kind == "i"
        if info.y is None:
            terms = [(1, splat8(1), x) if sx else (1, x, splat8(1))]
        else:
            y = byte_vector(info.y)
            sy = np.dtype(info.y.dtype).kind == "i"
            if sx and not sy:
                terms = [(1, y, x)]
            elif sy and not sx:
                terms = [(1, x, y)]
            elif sx:                                   # signed x signed
                terms = [(1, b.xor(x, splat8(0x80)), y), (-1, splat8(0x80), y)]
            else:                                      # unsigned x unsigned
                terms = [(1, x, b.xor(y, splat8(0x80))), (2, x, splat8(64))]
        zero = ir.Constant(vty, [ir.Constant(I32, 0)] * lanes)
        total = None
        for scale, u8, s8 in terms:
            parts = []
            for off in range(0, self.w, nb):
                pick = [ir.Constant(I32, off + k) for k in range(nb)]
                pieces = [v if nb == self.w else
                          b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, nb), pick))
                          for v in (u8, s8)]
                # the accumulator is added after the dot, not passed to it: the dots do
                # not wait for each other (a chain of adds of latency 1, not of dots)
                parts.append(b.call(fn, [zero] + [b.bitcast(p, vty) for p in pieces]))
            while len(parts) > 1:            # concatenate pairwise (a power of two of them)
                n = parts[0].type.count
                idx = ir.Constant(ir.VectorType(I32, 2 * n), [ir.Constant(I32, k)
                                                              for k in range(2 * n)])
                parts = [b.shuffle_vector(parts[k], parts[k + 1], idx)
                         for k in range(0, len(parts), 2)]
            d = parts[0]
            if scale != 1:
                d = b.mul(d, ir.Constant(d.type, [ir.Constant(I32, scale)] * d.type.count))
            total = d if total is None else b.add(total, d)
        return total

    # ------------------------------------------------------------ reductions along the loop
    def _acc_type(self, u):
        """The vector accumulator of reduction u: W lanes, W/4 for a VNNI dot."""
        lanes = self.w // 4 if id(u) in self.plan.vnni else self.w
        return ir.VectorType(value_type(u.buffer.dtype), lanes)

    def _init_accumulator(self, u):
        cg = self.cg
        dt = u.buffer.dtype
        vty = self._acc_type(u)
        slot = cg.eb.alloca(vty, name=f"{u.buffer.name}.vec")
        cg.b.store(ir.Constant(vty, [self._identity(u.combiner, dt)] * vty.count), slot)
        pos_slot = None
        if u.arg is not None:
            pos_slot = cg.eb.alloca(self.vtype(I64), name=f"{u.arg.buffer.name}.vec")
            cg.b.store(self.splat(ir.Constant(I64, INT64_MAX)), pos_slot)
        self.accs[id(u)] = (slot, pos_slot)

    @staticmethod
    def _identity(combiner, dt):
        base = {"argmax": "max", "argmin": "min"}.get(combiner, combiner)
        return const(dt, identity(base, dt).value)

    def _accumulate(self, u, mask):
        cg = self.cg
        b, dt = cg.b, u.buffer.dtype
        slot, pos_slot = self.accs[id(u)]
        acc = b.load(slot, typ=self._acc_type(u))
        if id(u) in self.plan.vnni:
            b.store(b.add(acc, self._dot(self.plan.vnni[id(u)], mask)), slot)
            return
        x = self.reduced_value(u, mask)
        if u.arg is None:
            new = COMBINE[u.combiner](self.ops(), dt, acc, x, u.fast_math)
            b.store(new if mask is None else b.select(mask, new, acc), slot)
            return
        acc_pos = b.load(pos_slot, typ=self.vtype(I64))
        pos = self.value(u.arg.position, mask)
        increasing = id(u) in self.plan.increasing and self.phase != "rest"
        if increasing and self.phase == "first":
            better = ir.Constant(self.vtype(I1), 1)
        elif increasing:
            better = _increasing_better(self.ops(), dt, u.combiner, x, acc)
        else:
            better = _better(self.ops(), dt, u.combiner, x, acc, pos, acc_pos)
        if mask is not None:
            better = b.and_(better, mask)
        b.store(b.select(better, x, acc), slot)
        b.store(b.select(better, pos, acc_pos), pos_slot)

    def _finish_accumulator(self, u):
        """One horizontal step, combined into the scalar target (under the guards that
        do not move with the loop, as the scalar loop would)."""
        cg = self.cg
        b = cg.b
        cond = ir.Constant(I1, 1)
        for g in self.plan.guards_of[id(u)]:
            cond = b.and_(cond, cg.condition(g))
        with b.if_then(cond):
            self._horizontal(u)

    def _horizontal(self, u):
        cg = self.cg
        b, dt = cg.b, u.buffer.dtype
        slot, pos_slot = self.accs[id(u)]
        vec = b.load(slot, typ=self._acc_type(u))
        ptr = cg.address(u.buffer, u.index)
        acc = cg._load(ptr, dt)
        if u.arg is None:
            r = _reduce_intrinsic(cg, u.combiner, dt, vec, u.fast_math)
            cg._store(ptr, COMBINE[u.combiner](cg.ops(), dt, acc, r, u.fast_math), dt)
            return
        pos = b.load(pos_slot, typ=self.vtype(I64))
        vec, pos = self._halve(u, vec, pos, 1)
        zero = ir.Constant(I32, 0)
        x, p = b.extract_element(vec, zero), b.extract_element(pos, zero)
        pos_ptr = cg.address(u.arg.buffer, u.arg.index)
        acc_pos = cg._load(pos_ptr, np.int64)
        better = _better(cg.ops(), dt, u.combiner, x, acc, p, acc_pos)
        cg._store(ptr, b.select(better, x, acc), dt)
        cg._store(pos_ptr, b.select(better, p, acc_pos), np.int64)

    def _halve(self, u, vec, pos, lanes):
        """Combine the upper half of the lanes into the lower half until `lanes` remain
        (argmax/argmin: by the tie rule, so the order of the lanes does not matter)."""
        cg = self.cg
        b, dt = cg.b, u.buffer.dtype
        n = vec.type.count
        while n > lanes:
            half = n // 2
            lo = ir.Constant(ir.VectorType(I32, half), [ir.Constant(I32, k) for k in range(half)])
            hi = ir.Constant(ir.VectorType(I32, half),
                             [ir.Constant(I32, k + half) for k in range(half)])
            v_lo, v_hi = b.shuffle_vector(vec, vec, lo), b.shuffle_vector(vec, vec, hi)
            if pos is None:
                vec = COMBINE[u.combiner](self.ops(half), dt, v_lo, v_hi, u.fast_math)
            else:
                p_lo, p_hi = b.shuffle_vector(pos, pos, lo), b.shuffle_vector(pos, pos, hi)
                better = _better(self.ops(half), dt, u.combiner, v_hi, v_lo, p_hi, p_lo)
                vec, pos = b.select(better, v_hi, v_lo), b.select(better, p_hi, p_lo)
            n = half
        return vec, pos

    def _narrow_accumulators(self, lanes):
        """From the U*W lanes of the main loop to W lanes (new slots of W lanes)."""
        b = self.cg.b
        wide = {}
        for u in self.plan.reductions:
            slot, pos_slot = self.accs[id(u)]
            vec = b.load(slot, typ=self._acc_type(u))
            pos = None if pos_slot is None else b.load(pos_slot, typ=self.vtype(I64))
            wide[id(u)] = self._halve(u, vec, pos, lanes // 4 if id(u) in self.plan.vnni
                                      else lanes)
        self.set_width(lanes)
        for u in self.plan.reductions:
            vec, pos = wide[id(u)]
            slot = self.cg.eb.alloca(vec.type, name=f"{u.buffer.name}.vec")
            b.store(vec, slot)
            pos_slot = None
            if pos is not None:
                pos_slot = self.cg.eb.alloca(pos.type, name=f"{u.arg.buffer.name}.vec")
                b.store(pos, pos_slot)
            self.accs[id(u)] = (slot, pos_slot)

    # ------------------------------------------------------------ values
    def reduced_value(self, update, mask):
        """An Update's value; with fast_math its float products may fuse into FMAs with
        the accumulation (as for scalar reductions)."""
        return self.value(update.value, mask, update.fast_math)

    def value(self, e, mask, contract=False):
        """e for the W lanes of the current chunk, as a <W x T> vector."""
        cg = self.cg
        if id(e) not in self.plan.dependent:
            return self.splat(self._scalar(e, mask, contract))
        if isinstance(e, Access):
            if id(e) in self.override:
                return self.override[id(e)]
            return self._read(e.tensor, e.index, mask)
        if isinstance(e, IndexValue):
            base = self.splat(cg.index(e.expr))
            return cg.b.add(base, cg.b.mul(self.splat(self.step(e.expr)), self.iota))
        args = [self.value(a, mask, contract) for a in e.args]
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
        if isinstance(c, (sp.And, sp.Or)):
            parts = [self._lane_condition(a) for a in c.args]
            out = parts[0]
            for p in parts[1:]:
                out = b.and_(out, p) if isinstance(c, sp.And) else b.or_(out, p)
            return out
        if self.var not in c.free_symbols:
            return self.splat(cg.condition(c))
        if isinstance(c, sp.Not):
            return b.not_(self._lane_condition(c.args[0]))
        d = c.lhs - c.rhs
        lanes = b.add(self.splat(cg.index(d)), b.mul(self.splat(self.step(d)), self.iota))
        ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">",
               sp.GreaterThan: ">=", sp.Eq: "==", sp.Ne: "!="}
        return b.icmp_signed(ops[type(c)], lanes, ir.Constant(lanes.type, 0))

    # ------------------------------------------------------------ memory
    def _read(self, buf, index, mask):
        """buf[index] for the lanes of the chunk: a whole LOCAL buffer is one plain load
        (every lane is in bounds), a strided access gathers, others load (masked)."""
        ptr = self.cg.address(buf, index)
        if access_key(buf, index) in self.plan.whole:
            return self._load(ptr, buf.dtype, None)
        if id(buf) in self.gathering:
            return self._gather(ptr, self.access_step(buf, index), buf.dtype, mask)
        return self._load(ptr, buf.dtype, mask)

    def _write(self, buf, index, v, mask):
        """Store the lanes of `v` (where `mask` is set) to buf[index]; a whole LOCAL buffer
        takes one plain store (the masked-off lanes keep their values through a select)."""
        ptr = self.cg.address(buf, index)
        if access_key(buf, index) in self.plan.whole and mask is not None:
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
            mask = ir.Constant(self.vtype(I1), [ir.Constant(I1, 1)] * self.w)
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


def _increasing_better(cg, dt, combiner, x, acc):
    """ops._better when x's position is known to come after acc's (a lane of the main
    loop, filled by the first vector): never a tie win, and a NaN wins only over a number.
    For floats `x >u acc` (greater or unordered) and `acc` ordered say exactly that."""
    b, kind = cg.b, np.dtype(dt).kind
    op = ">" if combiner == "argmax" else "<"
    if kind == "f":
        return b.and_(b.fcmp_unordered(op, x, acc), b.fcmp_ordered("ord", acc, acc))
    return b.icmp_signed(op, x, acc) if kind == "i" else b.icmp_unsigned(op, x, acc)


def _reduce_intrinsic(cg, combiner, dt, vec, fast):
    """llvm.vector.reduce.* of a vector accumulator to a scalar."""
    dt = np.dtype(dt)
    ty = value_type(dt)
    suffix = type_suffix(vec.type)
    if dt.kind == "f":
        if combiner in ("sum", "prod"):
            name = "fadd" if combiner == "sum" else "fmul"
            start = ir.Constant(ty, -0.0 if combiner == "sum" else 1.0)
            fn = cg._extern(f"llvm.vector.reduce.{name}.{suffix}", ty, [ty, vec.type])
            return cg.b.call(fn, [start, vec], fastmath=("reassoc",) if fast else ())
        if dt.itemsize in (4, 8):
            return _float_extreme(cg, combiner, dt, vec)
        name = "fmaximum" if combiner == "max" else "fminimum"
    elif dt.kind == "b":
        name = "or" if combiner in ("sum", "max") else "and"
    else:
        sign = "s" if dt.kind == "i" else "u"
        name = {"sum": "add", "prod": "mul", "max": sign + "max", "min": sign + "min"}[combiner]
    fn = cg._extern(f"llvm.vector.reduce.{name}.{suffix}", ty, [vec.type])
    return cg.b.call(fn, [vec])


def _float_extreme(cg, combiner, dt, vec):
    """llvm.vector.reduce.fmaximum/fminimum (NaN if any lane is NaN, -0 < +0) by integer
    keys: a float's bits with the magnitude bits flipped when it is negative order as
    signed integers as the floats do, with -0 below +0; one smax/smin tree of single
    instructions, then the NaN test -- where LLVM's x86 lowering of fmaximum does a
    NaN- and sign-aware blend at each of the log2 W steps."""
    b = cg.b
    ty = value_type(dt)
    n = vec.type.count
    ity = ir.IntType(8 * dt.itemsize)
    vty = ir.VectorType(ity, n)
    bits = b.bitcast(vec, vty)

    def flip(v, t):
        sign = b.ashr(v, ir.Constant(t, [ir.Constant(ity, 8 * dt.itemsize - 1)] * n)
                      if isinstance(t, ir.VectorType) else ir.Constant(ity, 8 * dt.itemsize - 1))
        low = (1 << (8 * dt.itemsize - 1)) - 1
        mag = ir.Constant(t, [ir.Constant(ity, low)] * n) if isinstance(t, ir.VectorType) \
            else ir.Constant(ity, low)
        return b.xor(v, b.and_(sign, mag))
    key = flip(bits, vty)
    op = "smax" if combiner == "max" else "smin"
    fn = cg._extern(f"llvm.vector.reduce.{op}.{type_suffix(vty)}", ity, [vty])
    r = b.bitcast(flip(b.call(fn, [key]), ity), ty)
    any_nan = cg._extern(f"llvm.vector.reduce.or.v{n}i1", I1, [ir.VectorType(I1, n)])
    nan = b.call(any_nan, [b.fcmp_unordered("uno", vec, vec)])
    return b.select(nan, ir.Constant(ty, float("nan")), r)

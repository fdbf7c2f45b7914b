"""The reductions of a vector loop (vector.py's VectorLoop): vector accumulators through
the loop, narrowed to W lanes after the wide main loop, one horizontal step into the
scalar target after it (llvm.vector.reduce.*, or a shuffle tree for argmax/argmin with
ops._better's tie rule); and VNNI dot products (vpdpbusd) for int8 sums."""
import numpy as np
from llvmlite import ir

from tex.combiners import COMBINERS
from tex.expr import Op

from ...scheduler.target import target
from ...scheduler.vector_plan import dot_width
from .irtypes import I1, I8, I16, I32, I64, const, splat_constant, type_suffix, value_type
from .ops import COMBINE, _better, increasing_better, vector_flags

INT64_MAX = (1 << 63) - 1
SHORT = (np.int8, np.uint8, np.int16)     # values an int16 lane holds exactly


class AccumulatorMixin:
    """VectorLoop's accumulators and dots (uses its width, plan, slots and values)."""

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
                v = b.select(mask, v, splat_constant(bty, 0))
            return v

        def splat8(k):
            return splat_constant(bty, k)
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
        zero = splat_constant(vty, 0)
        total = None
        for scale, u8, s8 in terms:
            # the accumulator is added after the dot, not passed to it: the dots do
            # not wait for each other (a chain of adds of latency 1, not of dots)
            d = _concatenate(b, [b.call(fn, [zero, b.bitcast(u, vty), b.bitcast(s, vty)])
                                 for u, s in zip(_split(b, u8, nb), _split(b, s8, nb))])
            if scale != 1:
                d = b.mul(d, splat_constant(d.type, scale))
            total = d if total is None else b.add(total, d)
        return total

    # ------------------------------------------------------------ short products
    def _short_operands(self, e):
        """Is e int32(x) * int32(y) with x and y 8-bit or int16 values (an int8 matmul's
        update, a quantized dot without VNNI) and a pmaddwd of the register width?"""
        return short_product(e) and _pmaddwd_bits(self.w, self.plan.bits) is not None

    def _short_product(self, e, args):
        """x * y for int32 lanes that hold 16-bit values, by pmaddwd (vpmaddwd), which
        multiplies int16 pairs and adds each pair into an int32 lane: with y's upper
        halves zeroed, lane k is x_k * y_k + hi(x_k) * 0, exactly. One uop where vpmulld
        takes two on Intel (1024^3 int8 -> int32, one thread, Emerald Rapids: 44 -> 67
        GOP/s; its AVX2 code 24 -> 28-32, where the broadcasts of A bound it). The
        zeroed operand is the one that moves with the loop (B's vector in a register
        tile, shared by its rows; the rows' broadcasts are used as they are). LLVM fuses
        the add of an accumulator into vpdpwssd where the CPU's model favours it (an
        explicit vpdpwssd was split back into the two on Emerald Rapids)."""
        b = self.cg.b
        x, y = args
        if id(e.args[0]) in self.plan.dependent and id(e.args[1]) not in self.plan.dependent:
            x, y = y, x
        y = b.and_(y, splat_constant(y.type, 0xFFFF))
        fn, lanes, narrow = pmaddwd(self.cg, _pmaddwd_bits(self.w, self.plan.bits))
        return _concatenate(b, [b.call(fn, [b.bitcast(xs, narrow), b.bitcast(ys, narrow)])
                                for xs, ys in zip(_split(b, x, lanes), _split(b, y, lanes))])

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
        cg.b.store(splat_constant(vty, self._identity(u.combiner, dt).constant), slot)
        pos_slot = None
        if u.arg is not None:
            pos_slot = cg.eb.alloca(self.vtype(I64), name=f"{u.arg.buffer.name}.vec")
            cg.b.store(self.splat(ir.Constant(I64, INT64_MAX)), pos_slot)
        self.accs[id(u)] = (slot, pos_slot)

    @staticmethod
    def _identity(combiner, dt):
        return const(dt, COMBINERS[combiner].identity(dt))

    def _accumulate(self, u, mask):
        cg = self.cg
        b, dt = cg.b, u.buffer.dtype
        slot, pos_slot = self.accs[id(u)]
        acc = b.load(slot, typ=self._acc_type(u))
        if id(u) in self.plan.vnni:
            b.store(b.add(acc, self._dot(self.plan.vnni[id(u)], mask)), slot)
            return
        if u.arg is None and self._fuses(u, dt):       # a row dot product: explicit FMAs
            new = self._fma(u, acc, mask)
            b.store(new if mask is None else b.select(mask, new, acc), slot)
            return
        x = self.reduced_value(u, mask)
        if u.arg is None:
            new = COMBINE[u.combiner](self.ops(), dt, acc, x, vector_flags(u.combiner,
                                                                           u.fast_math))
            b.store(new if mask is None else b.select(mask, new, acc), slot)
            return
        acc_pos = b.load(pos_slot, typ=self.vtype(I64))
        pos = self.value(u.arg.position, mask)
        increasing = id(u) in self.plan.increasing and self.phase != "rest"
        if increasing and self.phase == "first":
            better = ir.Constant(self.vtype(I1), 1)
        elif increasing:
            better = increasing_better(self.ops(), dt, u.combiner, x, acc)
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
            fast = vector_flags(u.combiner, u.fast_math)
            if np.dtype(dt).kind == "f" and u.combiner == "sum":
                # a tree of halves, in this order (llvm.vector.reduce.fadd would need
                # `reassoc` to be one)
                vec, _ = self._halve(u, vec, None, 1)
                r = b.extract_element(vec, ir.Constant(I32, 0))
            else:
                r = _reduce_intrinsic(cg, u.combiner, dt, vec, fast)
            cg._store(ptr, COMBINE[u.combiner](cg.ops(), dt, acc, r, fast), dt)
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
                vec = COMBINE[u.combiner](self.ops(half), dt, v_lo, v_hi,
                                          vector_flags(u.combiner, u.fast_math))
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
        sign = b.ashr(v, splat_constant(t, 8 * dt.itemsize - 1)
                      if isinstance(t, ir.VectorType) else ir.Constant(ity, 8 * dt.itemsize - 1))
        low = (1 << (8 * dt.itemsize - 1)) - 1
        mag = splat_constant(t, low) if isinstance(t, ir.VectorType) \
            else ir.Constant(ity, low)
        return b.xor(v, b.and_(sign, mag))
    key = flip(bits, vty)
    op = "smax" if combiner == "max" else "smin"
    fn = cg._extern(f"llvm.vector.reduce.{op}.{type_suffix(vty)}", ity, [vty])
    r = b.bitcast(flip(b.call(fn, [key]), ity), ty)
    any_nan = cg._extern(f"llvm.vector.reduce.or.v{n}i1", I1, [ir.VectorType(I1, n)])
    nan = b.call(any_nan, [b.fcmp_unordered("uno", vec, vec)])
    return b.select(nan, ir.Constant(ty, float("nan")), r)


def short_product(e):
    """Is `e` int32(x) * int32(y) of two 8- or 16-bit values (SHORT)?"""
    return (isinstance(e, Op) and e.name == "multiply" and e.dtype == np.int32 and
            all(isinstance(a, Op) and a.name == "cast" and a.dtype == np.int32 and
                a.args[0].dtype in SHORT for a in e.args))


def pmaddwd(cg, bits):
    """(the pmaddwd intrinsic of `bits`-bit registers, its int32 lanes, its operands'
    type: twice as many int16 lanes)."""
    lanes = bits // 32
    name = {512: "llvm.x86.avx512.pmaddw.d.512", 256: "llvm.x86.avx2.pmadd.wd",
            128: "llvm.x86.sse2.pmadd.wd"}[bits]
    wide, narrow = ir.VectorType(I32, lanes), ir.VectorType(I16, 2 * lanes)
    return cg._extern(name, wide, [narrow, narrow]), lanes, narrow


def _pmaddwd_bits(lanes, bits):
    """The pmaddwd width (bits) for `lanes` int32 lanes planned for `bits`-bit registers:
    the widest the target runs (512 needs avx512bw) that divides them; None below 128."""
    widths = [512] if target().has("avx512bw") else []
    widths += [256] if target().has("avx2") else []
    for w in widths + [128]:
        parts = lanes * 32 // w
        if w <= bits and lanes * 32 % w == 0 and parts & (parts - 1) == 0:
            return w
    return None


def _split(b, v, n):
    """The vector `v` as consecutive pieces of `n` lanes (itself when it has n)."""
    count = v.type.count
    if n == count:
        return [v]
    return [b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, n),
                                               [ir.Constant(I32, off + k) for k in range(n)]))
            for off in range(0, count, n)]


def _concatenate(b, parts):
    """One vector of the parts' lanes in order (a power of two of equal parts)."""
    while len(parts) > 1:
        n = parts[0].type.count
        idx = ir.Constant(ir.VectorType(I32, 2 * n), [ir.Constant(I32, k) for k in range(2 * n)])
        parts = [b.shuffle_vector(parts[k], parts[k + 1], idx) for k in range(0, len(parts), 2)]
    return parts[0]

"""Explicit vector code for `LoopKind.VECTOR` loops (the innermost loop of a stage).

A vector loop `for x in s..s+E` whose body holds Store / Update / Guard statements is
emitted as

    if every access that moves with x has a runtime step of exactly one element:
        acc_vec = identity                           (one per reduction along x)
        for v in s .. s + E - E%W step W:  body on <W x T> vectors, lanes v..v+W-1
        tail "mask": if E%W: body once more with lane mask (lane < E%W)
        acc = combine(acc, horizontal(acc_vec))      (one horizontal step per loop)
        tail "peel": for x in s + E - E%W .. s+E: the scalar body
    else:
        the scalar loop (right for any strides: views, reversed and transposed rows)

Rules:
- Width. R = 512 register bits when the host has avx512f, 256 with avx2, else 128.
  W = R / (8 * n) lanes, n the smallest element size among the accesses that move with
  x, so one load of the narrowest type fills a register (int8 -> int32 sums run 64 lanes
  on AVX-512: four int32 accumulator registers, independent chains). W is halved while
  the widest value type in the body would take more than MAX_REGISTERS registers, and
  is capped by a constant bound of the extent (a 8-wide inner loop gets W = 8).
- Accesses. An access whose index moves with x by a coefficient c (affine; c may be a
  size) has step sum_d c_d * stride_d elements; stride values are runtime, so the unit
  step is checked before the loop (the versioning above). A unit step is a plain
  `load/store <W x T>` aligned to the element size; an access that does not move is a
  scalar load and a splat (a subtree that does not move is computed as scalars);
  `IndexValue` is base + c * <0, 1, .., W-1>.
- Ops. The op tables of ops.py run on vector operands (Codegen.lanes makes intrinsics
  take the `.vN` suffix); ops with no vector form (libm's erf, integer power) run lane
  by lane (extract, scalar op, insert).
- Updates. A target that does not move with x is a reduction along the vector loop: a
  <W x T> accumulator starts at the combiner's identity (argmax/argmin: the identity
  value at position INT64_MAX, which never wins a tie), and one horizontal step after
  the loop (llvm.vector.reduce.*, a shuffle tree for argmax/argmin with ops._better's
  tie rule) is combined into the target. A float sum/prod without fast_math is not
  reassociated: its loop stays scalar. A target that moves with x is loaded, combined
  and stored as vectors (C[i, j] += A[i, k] * B[k, j] with j vectorized).
- Masks. Guards whose condition moves with x become lane masks; a masked statement
  uses llvm.masked.load/store and masked-off lanes keep the accumulator unchanged (they
  contribute the identity). A guard that does not move with x stays a branch.
- Falls back to the scalar loop (with the reason in `plan_vector_loop`): statements
  other than Store/Update/Guard, a Store to an element that does not move with x, an
  index or guard that is not affine in x, a buffer written in the loop and accessed
  there at another index, a float sum/prod reduction without fast_math.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from llvmlite import ir

from tex.expr import Access, IndexValue, Op

from ...scheduler.ir import Guard, Store, Update
from ...scheduler.stage import identity
from .codegen import (I1, I8, I32, I64, PTR, _self_referential, const, memory_type,
                      type_suffix, value_type)
from .jit import Host
from .ops import COMBINE, OPS, _better

MAX_REGISTERS = 4          # the widest value type of a body fills at most this many
INT64_MAX = (1 << 63) - 1


def register_bits(host=None):
    """The vector register width of the host: 512 (avx512f), 256 (avx2) or 128."""
    host = host or Host.get()
    if host.has_feature("avx512f"):
        return 512
    if host.has_feature("avx2"):
        return 256
    return 128


def _itemsize(dt):
    return np.dtype(dt).itemsize


def _affine_coefficient(expr, var):
    """c such that expr = c*var + rest with c and rest free of var; 0 if var is absent,
    None if expr is not affine in var."""
    expr = sp.sympify(expr)
    if var not in expr.free_symbols:
        return sp.Integer(0)
    expr = sp.expand(expr)
    c = expr.coeff(var)
    if var in c.free_symbols or var in sp.expand(expr - c * var).free_symbols:
        return None
    return c


def _per_lane(e):
    """Ops that have no vector form: libm's erf, integer power (a scalar helper)."""
    return e.name == "erf" or (e.name == "power" and np.dtype(e.dtype).kind in "iub")


@dataclass
class VectorPlan:
    """What the analysis of one vector loop found."""
    width: int
    moving: list = field(default_factory=list)      # (buffer, index) that move with x
    reductions: list = field(default_factory=list)  # Updates whose target does not move
    guards_of: dict = field(default_factory=dict)   # id(Update) -> enclosing fixed guards
    dependent: set = field(default_factory=set)     # ids of value nodes that move with x


class _Refuse(Exception):
    pass


def plan_vector_loop(loop, fast_math=True, bits=None):
    """A VectorPlan, or a string saying why the loop stays scalar."""
    try:
        return _Planner(loop, fast_math, bits or register_bits()).plan()
    except _Refuse as why:
        return str(why)


class _Planner:
    def __init__(self, loop, fast_math, bits):
        self.loop, self.var, self.fast_math, self.bits = loop, loop.var, fast_math, bits
        self.plan_ = VectorPlan(0)
        self.writes = {}            # buffer -> index written in the loop
        self.reads = []             # (buffer, index) read
        self.sizes = []             # element sizes of values in registers
        self.coeffs = {}

    def coefficient(self, expr):
        key = sp.sympify(expr)
        if key not in self.coeffs:
            self.coeffs[key] = _affine_coefficient(key, self.var)
        c = self.coeffs[key]
        if c is None:
            raise _Refuse(f"index {expr} is not affine in {self.var.name}")
        return c

    def moves(self, index):
        return any(self.coefficient(ix) != 0 for ix in index)

    def plan(self):
        self.statements(self.loop.body, ())
        for buf, index in self.reads:
            if buf in self.writes and self.writes[buf] != tuple(index):
                raise _Refuse(f"{buf.name} is written and read at different indices")
        for u in self.plan_.reductions:
            for buf in [u.buffer] + ([u.arg.buffer] if u.arg else []):
                if any(b is buf for b, _ in self.reads) or self.writes.get(buf) != "reduce":
                    raise _Refuse(f"accumulator {buf.name} is used by other statements")
        self.plan_.width = self.width()
        return self.plan_

    def write(self, buf, index, reduce=False):
        key = "reduce" if reduce else tuple(index)
        if buf in self.writes and self.writes[buf] != key:
            raise _Refuse(f"{buf.name} is written twice at different indices")
        self.writes[buf] = key
        self.sizes.append(_itemsize(buf.dtype))
        if not reduce:
            self.plan_.moving.append((buf, tuple(index)))

    def statements(self, body, guards):
        for s in body:
            if isinstance(s, Guard):
                conds = [s.cond] if not isinstance(s.cond, sp.And) else list(s.cond.args)
                fixed = tuple(c for c in conds if self.var not in c.free_symbols)
                for c in conds:
                    if c not in fixed:
                        self.condition(c)
                self.statements(s.body, guards + fixed)
            elif isinstance(s, Store):
                if not self.moves(s.index):
                    raise _Refuse(f"store to {s.buffer.name} does not move with the loop")
                self.write(s.buffer, s.index)
                self.value(s.value)
            elif isinstance(s, Update):
                self.update(s, guards)
            else:
                raise _Refuse(f"{type(s).__name__} inside the loop")

    def update(self, s, guards):
        self.value(s.value)
        if s.arg is not None:
            self.value(s.arg.position)
            self.sizes.append(8)
        if self.moves(s.index) or (s.arg is not None and self.moves(s.arg.index)):
            if s.arg is not None and not (self.moves(s.index) and self.moves(s.arg.index)):
                raise _Refuse("argmax value and position targets move differently")
            self.write(s.buffer, s.index)
            if s.arg is not None:
                self.write(s.arg.buffer, s.arg.index)
            return
        dt = np.dtype(s.buffer.dtype)
        if dt.kind == "f" and s.combiner in ("sum", "prod") and not (s.fast_math and
                                                                     self.fast_math):
            raise _Refuse(f"'{s.combiner}' on {dt} is not reassociated without fast_math")
        self.write(s.buffer, s.index, reduce=True)
        if s.arg is not None:
            self.write(s.arg.buffer, s.arg.index, reduce=True)
        self.plan_.reductions.append(s)
        self.plan_.guards_of[id(s)] = guards

    def condition(self, c):
        if isinstance(c, (sp.And, sp.Or)):
            for a in c.args:
                self.condition(a)
        elif isinstance(c, sp.core.relational.Relational):
            self.coefficient(c.lhs - c.rhs)
        else:
            raise _Refuse(f"guard {c} is not a comparison")

    def value(self, e):
        """Record accesses and register sizes; returns whether e moves with x."""
        if isinstance(e, Access):
            moving = self.moves(e.index)
            self.reads.append((e.tensor, tuple(e.index)))
            if moving:
                self.plan_.moving.append((e.tensor, tuple(e.index)))
        elif isinstance(e, IndexValue):
            moving = self.coefficient(e.expr) != 0
        elif isinstance(e, Op):
            moving = False
            for a in e.args:
                moving |= self.value(a)       # every argument: each records its accesses
        else:
            moving = False
        if moving:
            self.plan_.dependent.add(id(e))
            self.sizes.append(_itemsize(e.dtype))
        return moving

    def width(self):
        moving = [_itemsize(buf.dtype) for buf, _ in self.plan_.moving]
        narrow = min(moving or self.sizes or [8])
        wide = max(self.sizes or [narrow])
        w = self.bits // (8 * narrow)
        while w > 2 and w * wide * 8 > MAX_REGISTERS * self.bits:
            w //= 2
        bound = _constant_bound(self.loop.extent)
        if bound is not None and bound >= 1:
            fit = 1 << (bound.bit_length() - 1)               # largest power of two <= bound
            if self.loop.tail == "mask" and fit < bound:
                fit *= 2                                      # one masked vector covers it
            w = max(1, min(w, fit))
        return w


def _constant_bound(extent):
    """An integer upper bound of a loop extent (Min(64, N - 64*jo) -> 64), or None."""
    e = sp.sympify(extent)
    if e.is_Integer:
        return int(e)
    if isinstance(e, sp.Min):
        ints = [int(a) for a in e.args if a.is_Integer]
        return min(ints) if ints else None
    return None


def emit_vector_loop(cg, loop, start, end):
    """Codegen._loop for a VECTOR loop: vector code with a scalar version for other
    strides, or the scalar loop when the body cannot be vectorized."""
    plan = plan_vector_loop(loop, cg.fast_math)
    if isinstance(plan, str) or plan.width < 2:
        cg._serial_loop(loop, start, end)
        return
    VectorLoop(cg, loop, plan).emit(start, end)


class VectorLoop:
    """Emits one planned vector loop through the Codegen `cg` (its builder, env, memory)."""

    def __init__(self, cg, loop, plan):
        self.cg, self.loop, self.plan, self.var = cg, loop, plan, loop.var
        self.w = plan.width
        self.iota = ir.Constant(ir.VectorType(I64, self.w), list(range(self.w)))
        self.accs = {}          # id(Update) -> (value slot, position slot or None)

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

    @contextmanager
    def vector_ops(self, on=True):
        """Inside, the op tables build <W x T> intrinsics (on=False: scalar ones)."""
        saved, self.cg.lanes = self.cg.lanes, self.w if on else None
        try:
            yield
        finally:
            self.cg.lanes = saved

    def step(self, expr):
        """The i64 value of expr's coefficient in the loop variable."""
        return self.cg.index(_affine_coefficient(expr, self.var))

    # ------------------------------------------------------------ the loop
    def emit(self, start, end):
        cg = self.cg
        b = cg.b
        unit = ir.Constant(I1, 1)
        for buf, index in self.plan.moving:
            _, strides = cg.memory[buf]
            step = None
            for ix, st in zip(index, strides):
                c = _affine_coefficient(ix, self.var)
                if c != 0:
                    term = b.mul(cg.index(c), st)
                    step = term if step is None else b.add(step, term)
            unit = b.and_(unit, b.icmp_signed("==", step, ir.Constant(I64, 1)))
        with b.if_else(unit) as (vector, scalar):
            with vector:
                self._vector(start, end)
            with scalar:
                cg._serial_loop(self.loop, start, end)

    def _vector(self, start, end):
        cg, w = self.cg, self.w
        b = cg.b
        n = b.sub(end, start)
        n = b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)), ir.Constant(I64, 0), n)
        main_end = b.add(start, b.and_(n, ir.Constant(I64, -w)))
        for u in self.plan.reductions:
            self._init_accumulator(u)
        self._main_loop(start, main_end)
        if self.loop.tail == "mask":
            rem = b.sub(end, main_end)
            with b.if_then(b.icmp_signed(">", rem, ir.Constant(I64, 0))):
                mask = b.icmp_signed("<", self.iota, self.splat(rem))
                self._chunk(main_end, mask)
        for u in self.plan.reductions:
            self._finish_accumulator(u)
        if self.loop.tail != "mask":
            md = cg.module.add_metadata([ir.MetaDataString(cg.module,
                                                           "llvm.loop.vectorize.enable"),
                                         ir.Constant(I1, 0)])
            cg._serial_loop(self.loop, main_end, end, _self_referential(cg.module, md))

    def _main_loop(self, start, stop):
        cg = self.cg
        b, name = cg.b, self.var.name
        pre = b.block
        head = cg.fn.append_basic_block(f"{name}.vhead")
        body = cg.fn.append_basic_block(f"{name}.vbody")
        done = cg.fn.append_basic_block(f"{name}.vend")
        b.branch(head)
        b.position_at_end(head)
        v = b.phi(I64, name=f"{name}.v")
        v.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", v, stop), body, done)
        b.position_at_end(body)
        self._chunk(v, None)
        nxt = b.add(v, ir.Constant(I64, self.w))
        nxt.flags.append("nsw")
        b.branch(head)
        v.add_incoming(nxt, b.block)
        b.position_at_end(done)

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
                self._store(cg.address(s.buffer, s.index), v, s.buffer.dtype, mask)
            elif id(s) in self.accs:
                self._accumulate(s, mask)
            else:
                self._update_row(s, mask)

    def _update_row(self, s, mask):
        """A target that moves with the loop: load, combine and store whole vectors."""
        cg = self.cg
        b, dt = cg.b, s.buffer.dtype
        ptr = cg.address(s.buffer, s.index)
        acc = self._load(ptr, dt, mask)
        x = self.value(s.value, mask)
        with self.vector_ops():
            if s.arg is None:
                self._store(ptr, COMBINE[s.combiner](cg, dt, acc, x, s.fast_math), dt, mask)
                return
            pos_ptr = cg.address(s.arg.buffer, s.arg.index)
            acc_pos = self._load(pos_ptr, np.int64, mask)
            pos = self.value(s.arg.position, mask)
            better = _better(cg, dt, s.combiner, x, acc, pos, acc_pos)
            self._store(ptr, b.select(better, x, acc), dt, mask)
            self._store(pos_ptr, b.select(better, pos, acc_pos), np.int64, mask)

    # ------------------------------------------------------------ reductions along the loop
    def _init_accumulator(self, u):
        cg = self.cg
        dt = u.buffer.dtype
        slot = cg.eb.alloca(self.vtype(value_type(dt)), name=f"{u.buffer.name}.vec")
        cg.b.store(self.splat(self._identity(u.combiner, dt)), slot)
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
        vty = self.vtype(value_type(dt))
        acc = b.load(slot, typ=vty)
        x = self.value(u.value, mask)
        with self.vector_ops():
            if u.arg is None:
                new = COMBINE[u.combiner](cg, dt, acc, x, u.fast_math)
                b.store(new if mask is None else b.select(mask, new, acc), slot)
                return
            acc_pos = b.load(pos_slot, typ=self.vtype(I64))
            pos = self.value(u.arg.position, mask)
            better = _better(cg, dt, u.combiner, x, acc, pos, acc_pos)
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
        vec = b.load(slot, typ=self.vtype(value_type(dt)))
        ptr = cg.address(u.buffer, u.index)
        acc = cg._load(ptr, dt)
        if u.arg is None:
            r = _reduce_intrinsic(cg, u.combiner, dt, vec, u.fast_math)
            cg._store(ptr, COMBINE[u.combiner](cg, dt, acc, r, u.fast_math), dt)
            return
        pos = b.load(pos_slot, typ=self.vtype(I64))
        n = self.w
        while n > 1:                      # a shuffle tree: halves combined by the tie rule
            half = n // 2
            lo = ir.Constant(ir.VectorType(I32, half), [ir.Constant(I32, k) for k in range(half)])
            hi = ir.Constant(ir.VectorType(I32, half),
                             [ir.Constant(I32, k + half) for k in range(half)])
            v_lo, v_hi = b.shuffle_vector(vec, vec, lo), b.shuffle_vector(vec, vec, hi)
            p_lo, p_hi = b.shuffle_vector(pos, pos, lo), b.shuffle_vector(pos, pos, hi)
            better = _better(cg, dt, u.combiner, v_hi, v_lo, p_hi, p_lo)
            vec, pos = b.select(better, v_hi, v_lo), b.select(better, p_hi, p_lo)
            n = half
        zero = ir.Constant(I32, 0)
        x, p = b.extract_element(vec, zero), b.extract_element(pos, zero)
        pos_ptr = cg.address(u.arg.buffer, u.arg.index)
        acc_pos = cg._load(pos_ptr, np.int64)
        better = _better(cg, dt, u.combiner, x, acc, p, acc_pos)
        cg._store(ptr, b.select(better, x, acc), dt)
        cg._store(pos_ptr, b.select(better, p, acc_pos), np.int64)

    # ------------------------------------------------------------ values
    def value(self, e, mask):
        """e for the W lanes of the current chunk, as a <W x T> vector."""
        cg = self.cg
        if id(e) not in self.plan.dependent:
            return self.splat(self._scalar(e, mask))
        if isinstance(e, Access):
            return self._load(cg.address(e.tensor, e.index), e.tensor.dtype, mask)
        if isinstance(e, IndexValue):
            base = self.splat(cg.index(e.expr))
            return cg.b.add(base, cg.b.mul(self.splat(self.step(e.expr)), self.iota))
        args = [self.value(a, mask) for a in e.args]
        if _per_lane(e):
            return self._lane_by_lane(e, args)
        with self.vector_ops():
            return OPS[e.name](cg, e, *args)

    def _scalar(self, e, mask):
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
            args = [self._scalar(a, mask) for a in e.args]
            with self.vector_ops(False):
                return OPS[e.name](cg, e, *args)
        return cg.value(e)

    def _lane_by_lane(self, e, args):
        b = self.cg.b
        out = ir.Constant(self.vtype(value_type(e.dtype)), None)
        for k in range(self.w):
            lane = ir.Constant(I32, k)
            with self.vector_ops(False):
                r = OPS[e.name](self.cg, e, *[b.extract_element(a, lane) for a in args])
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
        d = c.lhs - c.rhs
        lanes = b.add(self.splat(cg.index(d)), b.mul(self.splat(self.step(d)), self.iota))
        ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">",
               sp.GreaterThan: ">=", sp.Eq: "==", sp.Ne: "!="}
        return b.icmp_signed(ops[type(c)], lanes, ir.Constant(lanes.type, 0))

    # ------------------------------------------------------------ memory
    def _load(self, ptr, dt, mask):
        cg = self.cg
        b, mty = cg.b, self.vtype(memory_type(dt))
        align = _itemsize(dt)
        if mask is None:
            v = b.load(ptr, typ=mty, align=align)
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
        align = _itemsize(dt)
        if mask is None:
            b.store(v, ptr, align=align)
            return
        fn = cg._extern(f"llvm.masked.store.{type_suffix(v.type)}.p0", ir.VoidType(),
                        [v.type, PTR, I32, mask.type])
        b.call(fn, [v, ptr, ir.Constant(I32, align), mask])


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
        name = "fmaximum" if combiner == "max" else "fminimum"
    elif dt.kind == "b":
        name = "or" if combiner in ("sum", "max") else "and"
    else:
        sign = "s" if dt.kind == "i" else "u"
        name = {"sum": "add", "prod": "mul", "max": sign + "max", "min": sign + "min"}[combiner]
    fn = cg._extern(f"llvm.vector.reduce.{name}.{suffix}", ty, [vec.type])
    return cg.b.call(fn, [vec])

"""Which VECTOR loops get explicit vector code, and at what width: the analysis half
of vector.py (whose docstring states the rules). `plan_vector_loop(loop)` returns a
VectorPlan, or a string saying why the loop stays scalar."""
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from tex.expr import Access, IndexValue, Op

from ...scheduler.ir import Guard, Store, Update
from ...scheduler import host as host_info
from .jit import Host  # noqa: F401  (register_bits(host) takes one)

MAX_REGISTERS = 4          # the widest value type of a body fills at most this many


def register_bits(host=None):
    """The vector register width of the host: 512 (avx512f), 256 (avx2) or 128."""
    if host is None:
        return host_info.register_bits()
    if host.has_feature("avx512f"):
        return 512
    if host.has_feature("avx2"):
        return 256
    return 128


def itemsize(dt):
    return np.dtype(dt).itemsize


def affine_coefficient(expr, var):
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


@dataclass
class VectorPlan:
    """What the analysis of one vector loop found."""
    width: int                                      # W: lanes of a vector
    unroll: int = 1                                 # U: the main loop runs U*W lanes
    moving: list = field(default_factory=list)      # (buffer, index) that move with x
    reductions: list = field(default_factory=list)  # Updates whose target does not move
    guards_of: dict = field(default_factory=dict)   # id(Update) -> enclosing fixed guards
    increasing: set = field(default_factory=set)    # argmax/argmin whose lane positions grow
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
            self.coeffs[key] = affine_coefficient(key, self.var)
        c = self.coeffs[key]
        if c is None:
            raise _Refuse(f"index {expr} is not affine in {self.var.name}")
        return c

    def moves(self, index):
        return any(self.coefficient(ix) != 0 for ix in index)

    def plan(self):
        self.statements(self.loop.body, (), False)
        for buf, index in self.reads:
            if buf in self.writes and self.writes[buf] != tuple(index):
                raise _Refuse(f"{buf.name} is written and read at different indices")
        for u in self.plan_.reductions:
            for buf in [u.buffer] + ([u.arg.buffer] if u.arg else []):
                if any(b is buf for b, _ in self.reads) or self.writes.get(buf) != "reduce":
                    raise _Refuse(f"accumulator {buf.name} is used by other statements")
        self.plan_.width = self.width()
        self.plan_.unroll = self.unroll(self.plan_.width)
        return self.plan_

    def write(self, buf, index, reduce=False):
        key = "reduce" if reduce else tuple(index)
        if buf in self.writes and self.writes[buf] != key:
            raise _Refuse(f"{buf.name} is written twice at different indices")
        self.writes[buf] = key
        self.sizes.append(itemsize(buf.dtype))
        if not reduce:
            self.plan_.moving.append((buf, tuple(index)))

    def statements(self, body, guards, masked):
        for s in body:
            if isinstance(s, Guard):
                conds = [s.cond] if not isinstance(s.cond, sp.And) else list(s.cond.args)
                fixed = tuple(c for c in conds if self.var not in c.free_symbols)
                for c in conds:
                    if c not in fixed:
                        self.condition(c)
                self.statements(s.body, guards + fixed, masked or len(fixed) < len(conds))
            elif isinstance(s, Store):
                if not self.moves(s.index):
                    raise _Refuse(f"store to {s.buffer.name} does not move with the loop")
                self.write(s.buffer, s.index)
                self.value(s.value)
            elif isinstance(s, Update):
                self.update(s, guards, masked)
            else:
                raise _Refuse(f"{type(s).__name__} inside the loop")

    def update(self, s, guards, masked):
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
        if s.arg is not None and not masked and isinstance(s.arg.position, IndexValue):
            c = self.coefficient(s.arg.position.expr)
            if c.is_Integer and c > 0:
                self.plan_.increasing.add(id(s))

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
            self.sizes.append(itemsize(e.dtype))
        return moving

    def width(self):
        moving = [itemsize(buf.dtype) for buf, _ in self.plan_.moving]
        narrow = min(moving or self.sizes or [8])
        w = self.bits // (8 * narrow)
        while w > 2 and self.registers(w) > MAX_REGISTERS:
            w //= 2
        bound = _constant_bound(self.loop.extent)
        if bound is not None and bound >= 1:
            fit = 1 << (bound.bit_length() - 1)               # largest power of two <= bound
            if self.loop.tail == "mask" and fit < bound:
                fit *= 2                                      # one masked vector covers it
            w = max(1, min(w, fit))
        return w

    def registers(self, lanes, sizes=None):
        """Registers that `lanes` lanes of the widest of `sizes` (default: every value) take."""
        return lanes * max(sizes or self.sizes or [1]) * 8 / self.bits

    def unroll(self, w):
        """Reductions along the loop: the accumulators' dependence chains limit the loop
        (a compare-and-select for argmax, an add with latency 3 or 4), so the main loop
        runs U*W lanes, U independent registers of the accumulator type (up to
        MAX_REGISTERS), as long as every value stays within 2*MAX_REGISTERS registers and
        a constant bound of the extent holds at least four wide vectors."""
        if not self.plan_.reductions:
            return 1
        acc = [itemsize(u.buffer.dtype) for u in self.plan_.reductions]
        bound = _constant_bound(self.loop.extent)
        u = 1
        while (self.registers(2 * u * w, acc) <= MAX_REGISTERS
               and self.registers(2 * u * w) <= 2 * MAX_REGISTERS
               and (bound is None or 8 * u * w <= bound)):   # several wide vectors
            u *= 2
        return u


def _constant_bound(extent):
    """An integer upper bound of a loop extent (Min(64, N - 64*jo) -> 64), or None."""
    e = sp.sympify(extent)
    if e.is_Integer:
        return int(e)
    if isinstance(e, sp.Min):
        ints = [int(a) for a in e.args if a.is_Integer]
        return min(ints) if ints else None
    return None

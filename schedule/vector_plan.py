"""Which VECTOR loops get explicit vector code, and at what width: the analysis behind
the vector plans that schedule/vectorize.py attaches to the loop nest (and that
backends/llvm/vector.py emits; its docstring states the rules).
`plan_vector_loop(loop)` returns a VectorPlan, or a string saying why the loop stays
scalar."""
import functools
from dataclasses import dataclass, field

import numpy as np

import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.expr import Access, Const, IndexValue, Op, walk as walk_expr

from .ir import Guard, Loop, Scope, Store, Update, VectorTail, symbols_of
from .target import target

MAX_REGISTERS = 4          # the widest value type of a body fills at most this many


def itemsize(dt):
    return np.dtype(dt).itemsize


def affine_coefficient(expr, var):
    """c such that expr = c*var + rest with c and rest free of var; 0 if var is absent,
    None if expr is not affine in var."""
    expr = sym.sympify(expr)
    if var not in symbols_of(expr):
        return sym.Integer(0)
    return _affine_coefficient(expr, var)


@functools.lru_cache(maxsize=8192)
def _affine_coefficient(expr, var):
    # memoized: a code generator asks about the same index expressions many times.
    # A sum of terms each with var as a plain factor needs neither expand nor coeff.
    c = sym.Integer(0)
    for term in sym.Add.make_args(expr):
        if var not in term.free_symbols:
            continue
        factors = sym.Mul.make_args(term)
        rest = [f for f in factors if f is not var]
        if len(rest) != len(factors) - 1 or any(var in f.free_symbols for f in rest):
            return _expanded_coefficient(expr, var)
        c += sym.Mul(*rest)
    return c


def _expanded_coefficient(expr, var):
    expr = sym.expand(expr)
    c = expr.coeff(var)
    if var in c.free_symbols or var in sym.expand(expr - c * var).free_symbols:
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
    whole: set = field(default_factory=set)         # access_key of LOCAL buffers covered whole
    in_bounds: set = field(default_factory=set)     # access_key of LOCAL rows every lane fits
    written: set = field(default_factory=set)       # ids of buffers written in the loop
    bound: int = None                               # a constant bound of the extent
    vnni: dict = field(default_factory=dict)        # id(Update) -> VnniDot
    vnni_widths: tuple = ()                         # the host's vpdpbusd widths (bits)
    bits: int = 512                                 # the register width planned for

    def describe(self):
        """The plan in a few words, for printed loop nests."""
        lanes = f"{self.width} lanes" + (f" x {self.unroll}" if self.unroll > 1 else "")
        parts = [lanes]
        if self.reductions:
            n = len(self.reductions)
            parts.append(f"{n} vector accumulator{'s' if n > 1 else ''}")
        if self.vnni:
            parts.append("vpdpbusd dots")
        if self.whole:
            parts.append("local buffer in registers")
        return ", ".join(parts)


class _Refuse(Exception):
    pass


def plan_vector_loop(loop, fast_math=True, bits=None, partials=None, vnni=None):
    """A VectorPlan, or a string saying why the loop stays scalar. `bits`: the register
    width (default the target's); `partials`: ids of the kernel's sum-only partial
    buffers (`sum_partials`), whose lanes a VNNI dot may redistribute; `vnni`: the VNNI
    dot widths in bits to use (Target.vnni_widths), or None for none."""
    try:
        return _Planner(loop, fast_math, bits or target().vector_bits, partials or set(),
                        vnni or ()).plan()
    except _Refuse as why:
        return str(why)


def local_flat(buf, index):
    """The flat element offset of buf[index] for a LOCAL buffer of constant shape (its
    strides are the contiguous ones), or None."""
    if buf.scope is not Scope.LOCAL or not all(sym.sympify(d).is_Integer for d in buf.shape):
        return None
    flat, stride = sym.Integer(0), 1
    for ix, d in zip(reversed(index), reversed(buf.shape)):
        flat += sym.sympify(ix) * stride
        stride *= int(d)
    return flat


def access_key(buf, index):
    """(buffer id, index) of an access, for sets of accesses."""
    return id(buf), tuple(sym.sympify(ix) for ix in index)


def buffer_size(buf):
    return int(np.prod([int(d) for d in buf.shape])) if buf.shape else 1


def sum_partials(kernel):
    """Ids of the LOCAL int32 buffers P that only hold partial sums whose total is all
    that is ever read (the vector accumulator of a privatized reduction and the partials
    it is copied to): every read of P is `acc += P[q]` in a loop over all of P's
    elements, or a whole copy `Q[q] = P[q]` into another such buffer; every store to P
    resets all of it to 0 or is such a whole copy; every update of P is a sum. Only the
    total of P can be observed, so a vector loop may add into any of P's lanes (a VNNI
    dot adds four bytes into one int32 lane)."""
    seen, bad, copies = {}, set(), []

    def covers(loops, buf, index):
        """index is the var of the innermost enclosing loop, which spans all of buf."""
        if not loops or loops[-1] is None or len(index) != 1 or buf.ndim != 1:
            return False
        lp = loops[-1]
        return (sym.sympify(index[0]) == lp.var and sym.sympify(lp.start) == 0
                and sym.sympify(lp.extent) == sym.sympify(buf.shape[0]))

    def visit(node, loops):
        if isinstance(node, Loop):
            loops = loops + [node]
        elif isinstance(node, Guard):
            loops = loops + [None]           # a guard between the loop and the statement
        if isinstance(node, (Store, Update)):
            buf, v = node.buffer, node.value
            seen.setdefault(id(buf), buf)
            copy = (isinstance(node, Store) and isinstance(v, Access) and covers(loops, buf, node.index)
                    and covers(loops, v.tensor, v.index) and v.tensor.shape == buf.shape)
            if copy:
                seen.setdefault(id(v.tensor), v.tensor)
                copies.append((id(v.tensor), id(buf)))
            elif isinstance(node, Store):
                if not (isinstance(v, Const) and v.value == 0 and covers(loops, buf, node.index)):
                    bad.add(id(buf))
            elif node.combiner != "sum" or node.arg is not None:
                bad.add(id(buf))
            values = [] if copy else [v] + ([node.arg.position] if getattr(node, "arg", None)
                                            else [])
            for e in values:
                for a in walk_expr(e):
                    if not isinstance(a, Access):
                        continue
                    seen.setdefault(id(a.tensor), a.tensor)
                    merge = (isinstance(node, Update) and node.combiner == "sum"
                             and node.arg is None and a is v and node.buffer is not a.tensor
                             and covers(loops, a.tensor, a.index)
                             and all(loops[-1].var not in sym.sympify(ix).free_symbols
                                     for ix in node.index))
                    if not merge:
                        bad.add(id(a.tensor))
        for c in getattr(node, "body", ()):
            visit(c, loops)

    visit(kernel, [])
    for k, buf in seen.items():
        if not (buf.scope is Scope.LOCAL and buf.dtype == np.int32 and buf.ndim == 1
                and sym.sympify(buf.shape[0]).is_Integer):
            bad.add(k)
    changed = True
    while changed:                        # a copy is fine only between good buffers
        changed = False
        for src, dst in copies:
            if (src in bad) != (dst in bad):
                bad.update((src, dst))
                changed = True
    return set(seen) - bad


@dataclass
class VnniDot:
    """sum(int32(x)) or sum(int32(x) * int32(y)), x and y int8 or uint8 values, moving
    with the loop: vpdpbusd(acc, u8, s8)."""
    x: object               # the int8/uint8 expressions
    y: object = None        # None: a sum of x alone


def _byte(e):
    """x when e is int32(x) with x an int8 or uint8 value, else None."""
    if isinstance(e, Op) and e.name == "cast" and e.dtype == np.int32 and \
            e.args[0].dtype in (np.int8, np.uint8):
        return e.args[0]
    return None


def dot_width(lanes, widths, bits):
    """The vpdpbusd width (bits) that splits `lanes` bytes into whole dots: the widest
    the host runs that fits a register and divides the lanes; None if none does."""
    for w in sorted(widths, reverse=True):
        if w <= bits and (lanes * 8) % w == 0:
            return w
    return None


class _Planner:
    def __init__(self, loop, fast_math, bits, partials=(), vnni=()):
        self.loop, self.var, self.fast_math, self.bits = loop, loop.var, fast_math, bits
        self.partials, self.vnni_widths = partials, vnni
        self.plan_ = VectorPlan(0)
        self.writes = {}            # buffer -> index written in the loop
        self.reads = []             # (buffer, index) read
        self.sizes = []             # element sizes of values in registers
        self.coeffs = {}
        self.row_updates = []       # Updates whose target moves with x

    def coefficient(self, expr):
        key = sym.sympify(expr)
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
        self.plan_.written = {id(b) for b in self.writes}
        self.plan_.bound = _constant_bound(self.loop.extent)
        self.plan_.width = self.width()
        self.plan_.unroll = self.unroll(self.plan_.width)
        if self.whole_width() is not None:
            self.plan_.width, self.plan_.unroll = self.whole_width(), 1
            self.plan_.whole = {access_key(buf, index) for buf, index in self.plan_.moving
                                if self.covers_whole(buf, index)}
        self.plan_.in_bounds = {access_key(buf, index) for buf, index in self.plan_.moving
                                if self.lanes_in_bounds(buf, index)}
        self.plan_.vnni = self.vnni()
        self.plan_.vnni_widths, self.plan_.bits = self.vnni_widths, self.bits
        return self.plan_

    # ---------------------------------------------------------- whole local buffers
    def covers_whole(self, buf, index):
        """buf[index] is a LOCAL buffer of constant shape whose every element the loop
        visits once, in order: flat offset 0 at the start, step 1, extent = its size."""
        flat = local_flat(buf, index)
        bound = _constant_bound(self.loop.extent)
        if flat is None or bound is None or bound != buffer_size(buf):
            return False
        if affine_coefficient(flat, self.var) != 1:
            return False
        return sym.expand(flat.subs(self.var, self.loop.start)) == 0

    def lanes_in_bounds(self, buf, index):
        """buf[index] is a row of a LOCAL buffer of constant shape that the loop walks
        from a constant start (the last vector of an edge tile's version starts past the
        others), `x` itself as the last index, in chunks that never pass the row's end
        (the U*W chunks run inside the bound, the W chunks end by start + the bound
        rounded up to W, at most the row's length): every lane of every chunk is inside
        the buffer, masked or not, so a masked access can be a plain one (a select keeps
        the masked-off lanes). The register tile's accumulator then has only plain
        accesses, which LLVM keeps in registers; one masked access kept all of it in
        memory (a store per FMA: four rows streamed through a tile, 0.48x numpy; an int8
        tile's edge version of 48 of its 64 byte lanes kept the stores of every version
        of the nest in the loop: 2048^3 int8 -> int32 at 37 GOP/s, 1024^3 at 65)."""
        if local_flat(buf, index) is None or not index or sym.sympify(index[-1]) != self.var:
            return False
        if any(self.var in symbols_of(ix) for ix in index[:-1]):
            return False
        bound, w = self.plan_.bound, self.plan_.width
        start = sym.sympify(self.loop.start)
        return start.is_Integer and start >= 0 and bound is not None and \
            int(start) + -(-bound // w) * w <= int(buf.shape[-1])

    def whole_width(self):
        """W = the whole buffer when the loop moves through a LOCAL buffer it covers
        whole (the vector accumulator S_part[ji]): the lanes of the buffer are one vector
        value, so LLVM keeps it in registers across an enclosing loop (the loads and
        stores of a non-escaping alloca at one address are promoted by LICM). Capped at
        2*MAX_REGISTERS registers of the widest value type."""
        if not any(self.covers_whole(buf, index) for buf, index in self.plan_.moving):
            return None
        w = _constant_bound(self.loop.extent)
        if w < 2 or w & (w - 1) or self.registers(w) > 2 * MAX_REGISTERS:
            return None                 # (a power of two: horizontal steps halve it)
        return w

    # ---------------------------------------------------------- VNNI
    def vnni(self):
        """Updates `acc += int32(x)` (x int8 or uint8, moving with the loop) that a VNNI
        dot can run: a reduction along the loop (its vector accumulator is private), or a
        row target that is a sum-only partial the loop covers whole (`sum_partials`)."""
        out = {}
        if not self.vnni_widths:
            return out
        for u in self.plan_.reductions + self.row_updates:
            if u.combiner != "sum" or u.arg is not None or u.buffer.dtype != np.int32:
                continue
            if u not in self.plan_.reductions and not (
                    id(u.buffer) in self.partials
                    and access_key(u.buffer, u.index) in self.plan_.whole):
                continue
            v = u.value
            if id(v) not in self.plan_.dependent:
                continue
            if _byte(v) is not None:
                dot = VnniDot(_byte(v))
            elif (isinstance(v, Op) and v.name == "multiply" and v.dtype == np.int32
                  and all(_byte(a) is not None for a in v.args)):
                dot = VnniDot(_byte(v.args[0]), _byte(v.args[1]))
            else:
                continue
            if dot_width(self.plan_.width, self.vnni_widths, self.bits):
                out[id(u)] = dot
        return out

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
                conds = [s.cond] if not isinstance(s.cond, sym.And) else list(s.cond.args)
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
            self.row_updates.append(s)
            return
        dt = np.dtype(s.buffer.dtype)
        fast = s.fast_math and self.fast_math
        if not COMBINERS[s.combiner].may_reassociate(dt, fast):
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
        if isinstance(c, (sym.And, sym.Or)):
            for a in c.args:
                self.condition(a)
        elif isinstance(c, sym.Relational):
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
            if self.loop.tail is VectorTail.MASK and fit < bound:
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
    e = sym.sympify(extent)
    if e.is_Integer:
        return int(e)
    if isinstance(e, sym.Min):
        ints = [int(a) for a in e.args if a.is_Integer]
        return min(ints) if ints else None
    return None

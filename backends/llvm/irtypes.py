"""The LLVM types of tex's dtypes and the small IR helpers every emitter shares: the
Builder (constant folding and a dominator record for index arithmetic), constants,
intrinsic name suffixes, Python's floor division, loop metadata."""
import contextlib
import math

import numpy as np
import tex.symbolic as sym
from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I16 = ir.IntType(16)
PTR = ir.PointerType()
FAST = ("reassoc", "contract", "nsz")
# A kernel returns code | detail << 8: MISALIGNED (Python retries on aligned copies),
# NOMEM and TOO_LARGE (detail: 1 + the buffer's number in kernel_buffers), INTERRUPTED
# (a Ctrl-C: tex_rt_interrupt was set), OUT_OF_BOUNDS (detail: the checked access),
# DEFERRED (detail: the number of a choice among specializations that this build left
# out and the call needs; returned before anything is computed: Python builds it, retries),
# OVERLAP (an output's memory overlaps an input's: `out=` given one of the inputs or a
# view of it; returned before anything is computed: Python retries on copies of them).
STATUS_OK, STATUS_MISALIGNED, STATUS_NOMEM, STATUS_INTERRUPTED, STATUS_TOO_LARGE, \
    STATUS_OUT_OF_BOUNDS, STATUS_DEFERRED, STATUS_OVERLAP = range(8)
STATUS_DETAIL_SHIFT = 8
NTHREADS = sym.Symbol("tex_num_threads")   # the body's last argument: threads to use
# a sympy relation's comparison, as icmp_signed and Python both spell it
RELATIONS = {sym.Eq: "==", sym.Ne: "!=", sym.StrictLessThan: "<", sym.LessThan: "<=",
             sym.StrictGreaterThan: ">", sym.GreaterThan: ">="}


def value_type(dt):
    """The register type of a dtype (bool is i1)."""
    dt = np.dtype(dt)
    if dt.kind == "b":
        return I1
    if dt.kind in "iu":
        return ir.IntType(8 * dt.itemsize)
    return {2: ir.HalfType(), 4: ir.FloatType(), 8: ir.DoubleType()}[dt.itemsize]


def memory_type(dt):
    """The in-memory type of a dtype (bool is one byte)."""
    return I8 if np.dtype(dt).kind == "b" else value_type(dt)


def is_i64_constant(v):
    return isinstance(v, ir.Constant) and v.type == I64 and isinstance(v.constant, int)


def _signed(value):
    """An i64 constant's value: `const` keeps a negative one in its unsigned form."""
    value &= 2**64 - 1
    return value - 2**64 if value >= 2**63 else value


def _is_i1_constant(v):
    return isinstance(v, ir.Constant) and v.type == I1 and isinstance(v.constant, (bool, int))


_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _fold(lhs, rhs, op, zero=False, one=False):
    """The i64 result of `op` when it is known now: both operands constant, or (for add)
    one of them 0, or (for mul) one of them 1 or 0. None otherwise."""
    a, b = is_i64_constant(lhs), is_i64_constant(rhs)
    if a and b:
        value = op(lhs.constant, rhs.constant) & (2**64 - 1)
        return ir.Constant(I64, value - 2**64 if value >= 2**63 else value)
    if not (a or b) or lhs.type != I64 or rhs.type != I64:
        return None
    const, other = (lhs, rhs) if a else (rhs, lhs)
    if zero and const.constant == 0:
        return other
    if one and const.constant == 1:
        return other
    if one and const.constant == 0:
        return const
    return None


class Builder(ir.IRBuilder):
    """An IRBuilder that records, for the blocks its structured constructs create
    (if/else, counted loops, allocation checks), the block that dominates them, so
    that Codegen._reuse may take a value computed in a dominating block."""

    def __init__(self, block, idom):
        super().__init__(block)
        self.idom = idom                  # block -> its immediate dominator

    # index arithmetic folds on constants and identities as it is emitted (llvmlite
    # does not): the unrolled rows and vector chunks of a register tile are full of
    # `add 0, 16` and `mul 1, x`, and LLVM's time grows with every instruction
    def add(self, lhs, rhs, name="", flags=()):
        folded = _fold(lhs, rhs, lambda a, b: a + b, zero=True)
        return folded if folded is not None else super().add(lhs, rhs, name, flags)

    def sub(self, lhs, rhs, name="", flags=()):
        if is_i64_constant(rhs) and rhs.constant == 0 and lhs.type == I64:
            return lhs
        folded = _fold(lhs, rhs, lambda a, b: a - b)
        return folded if folded is not None else super().sub(lhs, rhs, name, flags)

    def mul(self, lhs, rhs, name="", flags=()):
        folded = _fold(lhs, rhs, lambda a, b: a * b, one=True)
        return folded if folded is not None else super().mul(lhs, rhs, name, flags)

    # and comparisons, selects and masks of constants: `max(n, 0) & -16` of a constant
    # n (the whole vectors of a register tile's row) was three instructions per vector
    def icmp_signed(self, cmpop, lhs, rhs, name=""):
        if is_i64_constant(lhs) and is_i64_constant(rhs):
            return ir.Constant(I1, int(_COMPARE[cmpop](_signed(lhs.constant),
                                                       _signed(rhs.constant))))
        return super().icmp_signed(cmpop, lhs, rhs, name)

    def select(self, cond, lhs, rhs, name="", flags=()):
        if _is_i1_constant(cond):
            return lhs if cond.constant else rhs
        return super().select(cond, lhs, rhs, name, flags)

    def and_(self, lhs, rhs, name=""):
        for known, other in ((lhs, rhs), (rhs, lhs)):
            if _is_i1_constant(known) and other.type == I1:    # a check known to pass
                return other if known.constant else known
        folded = _fold(lhs, rhs, lambda a, b: a & b)
        return folded if folded is not None else super().and_(lhs, rhs, name)

    def dominated(self, block, by=None):
        self.idom[block] = self.block if by is None else by
        return block

    def dominates(self, a, b):
        """Is block `a` (known to be) a dominator of block `b`?"""
        for _ in range(64):
            if b is a:
                return True
            b = self.idom.get(b)
            if b is None:
                return False
        return False

    @contextlib.contextmanager
    def if_then(self, pred, likely=None):
        before = self.block
        with super().if_then(pred, likely) as end:
            self.idom[self.block] = before
            yield end
        self.idom[self.block] = before

    @contextlib.contextmanager
    def if_else(self, pred, likely=None):
        before = self.block

        @contextlib.contextmanager
        def arm(inner):
            with inner:
                self.idom[self.block] = before
                yield
        with super().if_else(pred, likely) as (then, otherwise):
            yield arm(then), arm(otherwise)
        self.idom[self.block] = before


def self_referential(module, *hints):
    """`!0 = distinct !{!0, hints...}`: the form LLVM's loop metadata needs."""
    md = module.add_metadata([None, *hints])
    md.operands = (md, *hints)
    return md


def type_suffix(ty):
    """The overload suffix of an intrinsic: i32, f64, v16f32, v64i8."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {"half": "f16", "float": "f32", "double": "f64"}[str(ty)]


def const(dt, value):
    ty = value_type(dt)
    if isinstance(ty, ir.IntType):
        return ir.Constant(ty, int(value) & ((1 << ty.width) - 1) if ty.width > 1
                           else int(bool(value)))
    return ir.Constant(ty, float(value))


class _Splat(ir.Constant):
    """A vector constant with one value in every lane, printed as LLVM reads it in one
    word (`zeroinitializer`, `splat (float 1.0)`): llvmlite prints it lane by lane,
    and a register tile's 16- and 32-lane constants were much of its IR's text (Python
    formats it, LLVM parses it)."""

    def _get_reference(self):
        lane = self.constant[0]
        value = lane.constant
        if value is None or (value == 0 and math.copysign(1.0, value) > 0):
            return "zeroinitializer"        # (-0.0 is not zero's bits)
        return f"splat ({lane.type} {lane.get_reference()})"


def splat_constant(vector_type, value):
    """The constant vector of `value` (a Python number) in every lane."""
    return _Splat(vector_type, value)


def floor_div(b, a, d):
    """Python's a // d for i64: sdiv rounds toward zero, floor rounds down. A divisor
    known only at the call that is 0 there (a size or parameter in a condition that
    chooses among a stage's nests, which all compute the same result: `Eq(Mod(N, K),
    0)` called with K = 0) divides by 1: sdiv by 0 stops the process (SIGFPE)."""
    if isinstance(d, ir.Constant) and d.constant > 0:
        # a block size, most often: a power of two is one arithmetic shift, another
        # constant needs no test of its sign (fewer instructions for LLVM to take apart)
        if d.constant & (d.constant - 1) == 0:
            return b.ashr(a, ir.Constant(I64, d.constant.bit_length() - 1)) \
                if d.constant > 1 else a
        return b.sub(b.sdiv(a, d), b.zext(b.icmp_signed("<", b.srem(a, d), ir.Constant(I64, 0)),
                                          I64))
    if not isinstance(d, ir.Constant):
        d = b.select(b.icmp_signed("==", d, ir.Constant(I64, 0)), ir.Constant(I64, 1), d)
    q = b.sdiv(a, d)
    r = b.srem(a, d)
    neg = b.icmp_signed("!=", b.icmp_signed("<", r, ir.Constant(I64, 0)),
                        b.icmp_signed("<", d, ir.Constant(I64, 0)))
    adjust = b.and_(b.icmp_signed("!=", r, ir.Constant(I64, 0)), neg)
    return b.sub(q, b.zext(adjust, I64))


def declare(module, name, ret, args):
    """The function `name` of `module`, declared on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn


class OpContext:
    """What the op tables of ops.py lower with, made for each use and never changed: the
    builder, the module that declares the intrinsics, the vector width (None for
    scalars: an intrinsic then takes the `.vN` suffix) and whether float products may
    contract into FMAs (inside a fast-math reduction's value, as BLAS does)."""
    __slots__ = ("b", "module", "lanes", "contract")

    def __init__(self, b, module, lanes=None, contract=False):
        self.b, self.module, self.lanes, self.contract = b, module, lanes, contract

    def _extern(self, name, ret, args):
        return declare(self.module, name, ret, args)

    def intrinsic(self, name, dt, nargs):
        ty = value_type(dt)
        if self.lanes:
            ty = ir.VectorType(ty, self.lanes)
        return declare(self.module, f"llvm.{name}.{type_suffix(ty)}", ty, [ty] * nargs)

"""Per-operation lowering to LLVM IR: tables keyed by the op's name.

Each entry is `fn(cg, expr, *args) -> ir.Value`; the arguments were already converted
to the types numpy's ufunc resolution chose (tex.expr.op casts them), so an entry only
dispatches on kind: bool (i1), signed, unsigned, float. Semantics follow numpy's, with
the cases numpy leaves to the hardware made safe: integer division or modulo by zero
gives 0 (never a SIGFPE), INT_MIN // -1 wraps, float -> int casts saturate.
"""
import numpy as np
from llvmlite import ir

from . import vmath
from .irtypes import FAST, I1, I64, const, type_suffix, value_type


def _kind(dt):
    return {"b": "bool", "i": "int", "u": "uint", "f": "float"}[np.dtype(dt).kind]


def _binary(int_op, float_op, bool_op, uint_op=None):
    def emit(cg, e, a, b):
        kind = _kind(e.args[0].dtype)
        name = {"bool": bool_op, "int": int_op, "uint": uint_op or int_op,
                "float": float_op}[kind]
        if name is None:
            raise NotImplementedError(f"codegen: {e.name} on {e.args[0].dtype}")
        v = getattr(cg.b, name)(a, b)
        if kind == "float" and cg.contract:
            v.flags.append("contract")      # a*b feeding a fast-math sum may become an FMA
        return v
    return emit


def _compare(op):
    def emit(cg, e, a, b):
        kind, other = _kind(e.args[0].dtype), _kind(e.args[1].dtype)
        if kind == "float":
            if op == "!=":
                return cg.b.fcmp_unordered(op, a, b)
            return cg.b.fcmp_ordered(op, a, b)
        if kind == other == "int":
            return cg.b.icmp_signed(op, a, b)
        if {kind, other} == {"int", "uint"}:
            return _mixed_sign_compare(cg.b, op, a, b, signed_left=kind == "int")
        return cg.b.icmp_unsigned(op, a, b)
    return emit


def _mixed_sign_compare(b, op, x, y, signed_left):
    """int64 against uint64 (numpy resolves such comparisons to these two types and
    compares the values exactly): a negative signed side is below every unsigned value,
    else both compare as unsigned."""
    signed = x if signed_left else y
    negative = b.icmp_signed("<", signed, ir.Constant(signed.type, 0))
    unsigned = b.icmp_unsigned(op, x, y)
    below = ("<", "<=", "!=") if signed_left else (">", ">=", "!=")
    if op in below:                                 # true whenever the signed side < 0
        return b.or_(negative, unsigned)
    return b.and_(b.not_(negative), unsigned)       # false whenever it is < 0


def _zero_guarded(cg, dt, b_val, compute):
    """Integer division/modulo: 0 where the divisor is 0; never divide by zero."""
    b = cg.b
    zero = ir.Constant(b_val.type, 0)
    is_zero = b.icmp_unsigned("==", b_val, zero)
    safe = b.select(is_zero, ir.Constant(b_val.type, 1), b_val)
    return b.select(is_zero, zero, compute(safe))


def _int_divmod(cg, dt, a, d):
    """Python floor division and modulo for integers (d != 0); INT_MIN // -1 wraps."""
    b = cg.b
    if _kind(dt) == "uint":
        return b.udiv(a, d), b.urem(a, d)
    minus_one = b.icmp_signed("==", d, ir.Constant(d.type, -1))
    d_safe = b.select(minus_one, ir.Constant(d.type, 1), d)     # sdiv(INT_MIN, -1) traps
    q = b.sdiv(a, d_safe)
    r = b.srem(a, d_safe)
    q = b.select(minus_one, b.neg(a), q)
    r = b.select(minus_one, ir.Constant(d.type, 0), r)
    zero = ir.Constant(d.type, 0)
    signs_differ = b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero))
    adjust = b.and_(b.icmp_signed("!=", r, zero), signs_differ)
    q = b.select(adjust, b.sub(q, ir.Constant(d.type, 1)), q)
    r = b.select(adjust, b.add(r, d), r)
    return q, r


def _float_divmod(cg, dt, a, d):
    """numpy's npy_divmod for floats: (floor quotient, remainder with the divisor's sign)."""
    b = cg.b
    zero = ir.Constant(a.type, 0.0)
    mod = b.frem(a, d)
    div = b.fdiv(b.fsub(a, mod), d)
    mod_nonzero = b.fcmp_unordered("!=", mod, zero)
    signs_differ = b.icmp_unsigned("!=", b.fcmp_ordered("<", d, zero),
                                   b.fcmp_ordered("<", mod, zero))
    fix = b.and_(mod_nonzero, signs_differ)
    mod = b.select(fix, b.fadd(mod, d), mod)
    div = b.select(fix, b.fsub(div, ir.Constant(a.type, 1.0)), div)
    copysign = cg.intrinsic("copysign", dt, 2)
    mod = b.select(mod_nonzero, mod, b.call(copysign, [zero, d]))
    floor = b.call(cg.intrinsic("floor", dt, 1), [div])
    floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), ir.Constant(a.type, 0.5)),
                     b.fadd(floor, ir.Constant(a.type, 1.0)), floor)
    div_nonzero = b.fcmp_unordered("!=", div, zero)
    floor = b.select(div_nonzero, floor, b.call(copysign, [zero, b.fdiv(a, d)]))
    # a zero divisor: numpy gives a / d (inf or nan) and fmod's nan
    d_zero = b.fcmp_ordered("==", d, zero)
    floor = b.select(d_zero, b.fdiv(a, d), floor)
    return floor, mod


def _divmod_op(which):
    def emit(cg, e, a, d):
        dt = e.args[0].dtype
        if dt == np.float16:
            # numpy's npy_half_divmod: in single precision, rounded once to half (in
            # half precision the quotient is rounded before it is floored: 1 ulp off)
            # (a and d may be vectors: cast_value keeps their lanes)
            single = np.dtype("float32")
            wide = _float_divmod(cg, single, cast_value(cg, a, dt, single),
                                 cast_value(cg, d, dt, single))[which]
            return cast_value(cg, wide, single, dt)
        if _kind(dt) == "float":
            return _float_divmod(cg, dt, a, d)[which]
        return _zero_guarded(cg, dt, d, lambda safe: _int_divmod(cg, dt, a, safe)[which])
    return emit


def _power(cg, e, a, b):
    dt = e.dtype
    if _kind(dt) == "float":
        return cg.b.call(cg.intrinsic("pow", dt, 2), [a, b])
    return cg.b.call(_ipow_function(cg, dt), [a, b])


def _ipow_function(cg, dt):
    """`iN tex.ipow.iN(iN base, iN exp)`: power by squaring, wrapping. A negative exponent
    (numpy raises; tex refuses a constant one, expr.op) gives the integer part of the
    true value: 1 for a base of 1, +-1 for -1, else 0."""
    ty = value_type(dt)
    name = f"tex.ipow.{_kind(dt)}{ty.width}"
    fn = cg.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(cg.module, ir.FunctionType(ty, [ty, ty]), name=name)
    fn.linkage = "internal"
    base, exp = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    neg = b.icmp_signed("<", exp, ir.Constant(ty, 0)) if _kind(dt) == "int" else ir.Constant(I1, 0)
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    entry = b.block
    n0 = b.select(neg, ir.Constant(ty, 0), exp)     # in entry: it must dominate the phi
    b.branch(head)
    b.position_at_end(head)
    r, x, n = b.phi(ty), b.phi(ty), b.phi(ty)
    r.add_incoming(ir.Constant(ty, 1), entry)
    x.add_incoming(base, entry)
    n.add_incoming(n0, entry)
    b.cbranch(b.icmp_unsigned("!=", n, ir.Constant(ty, 0)), body, done)
    b.position_at_end(body)
    odd = b.trunc(n, I1)
    r.add_incoming(b.select(odd, b.mul(r, x), r), body)
    x.add_incoming(b.mul(x, x), body)
    n.add_incoming(b.lshr(n, ir.Constant(ty, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    # base**-n truncated toward zero: 1 for a base of 1, +-1 (exp's parity) for -1, else 0
    unit = b.icmp_unsigned("<=", b.add(base, ir.Constant(ty, 1)), ir.Constant(ty, 2)) \
        if _kind(dt) == "int" else ir.Constant(I1, 0)
    odd_exp = b.trunc(exp, I1)
    unit_power = b.select(b.and_(b.icmp_signed("<", base, ir.Constant(ty, 0)), odd_exp),
                          ir.Constant(ty, -1), ir.Constant(ty, 1))
    negative_power = b.select(b.and_(unit, b.icmp_unsigned("!=", base, ir.Constant(ty, 0))),
                              unit_power, ir.Constant(ty, 0))
    b.ret(b.select(neg, negative_power, r))
    return fn


def _unary_float(intrinsic):
    def emit(cg, e, a):
        return cg.b.call(cg.intrinsic(intrinsic, e.dtype, 1), [a])
    return emit


def _float_or_identity(intrinsic):
    """floor, ceil: an intrinsic on floats; integers and bools are their own value."""
    def emit(cg, e, a):
        if _kind(e.args[0].dtype) != "float":
            return a
        return cg.b.call(cg.intrinsic(intrinsic, e.dtype, 1), [a])
    return emit


def _sign(cg, e, a):
    """numpy's sign: -1, 0 or 1; NaN stays NaN and -0.0 gives 0.0."""
    b, kind, ty = cg.b, _kind(e.dtype), a.type
    if kind == "float":
        zero = ir.Constant(ty, 0.0)
        is_zero = b.select(b.fcmp_ordered("==", a, zero), zero, a)       # NaN stays
        neg = b.select(b.fcmp_ordered("<", a, zero), ir.Constant(ty, -1.0), is_zero)
        return b.select(b.fcmp_ordered(">", a, zero), ir.Constant(ty, 1.0), neg)
    zero = ir.Constant(ty, 0)
    if kind == "uint":
        return b.select(b.icmp_unsigned("!=", a, zero), ir.Constant(ty, 1), zero)
    neg = b.select(b.icmp_signed("<", a, zero), ir.Constant(ty, -1), zero)
    return b.select(b.icmp_signed(">", a, zero), ir.Constant(ty, 1), neg)


def _isnan(cg, e, a):
    if _kind(e.args[0].dtype) == "float":
        return cg.b.fcmp_unordered("uno", a, a)
    return cg.b.icmp_unsigned("!=", a, a)          # false, as a value of a's shape


def _isfinite(cg, e, a):
    if _kind(e.args[0].dtype) == "float":
        fabs = cg.b.call(cg.intrinsic("fabs", e.args[0].dtype, 1), [a])
        return cg.b.fcmp_ordered("<", fabs, ir.Constant(a.type, float("inf")))
    return cg.b.icmp_unsigned("==", a, a)          # true


def _negative(cg, e, a):
    return cg.b.fneg(a) if _kind(e.dtype) == "float" else cg.b.neg(a)


def _absolute(cg, e, a):
    kind = _kind(e.dtype)
    if kind == "float":
        return cg.b.call(cg.intrinsic("fabs", e.dtype, 1), [a])
    if kind == "int":
        fn = cg._extern(f"llvm.abs.{type_suffix(a.type)}", a.type, [a.type, I1])
        return cg.b.call(fn, [a, ir.Constant(I1, 0)])
    return a


def _invert(cg, e, a):
    return cg.b.not_(a)


def _shift(left):
    """numpy's left_shift / right_shift: the count read as unsigned, so that a count of
    the type's width or more (or a negative one) shifts every bit out: 0, or -1 for a
    negative signed value shifted right. LLVM's shl, ashr and lshr give poison there."""
    def emit(cg, e, a, n):
        kind, b = _kind(e.dtype), cg.b
        if kind not in ("int", "uint"):
            raise NotImplementedError(f"codegen: {e.name} on {e.dtype}")
        width = np.dtype(e.dtype).itemsize * 8
        beyond = b.icmp_unsigned(">=", n, ir.Constant(n.type, width))
        if kind == "int" and not left:
            return b.ashr(a, b.select(beyond, ir.Constant(n.type, width - 1), n))
        shifted = b.shl(a, n) if left else b.lshr(a, n)
        return b.select(beyond, ir.Constant(a.type, 0), shifted)
    return emit


def _minmax(float_name, int_name, uint_name, bool_op):
    def emit(cg, e, a, b):
        return combine_minmax(cg, e.dtype, a, b, float_name, int_name, uint_name, bool_op, ())
    return emit


def combine_minmax(cg, dt, a, b, float_name, int_name, uint_name, bool_op, fastmath):
    kind = _kind(dt)
    if kind == "bool":
        return getattr(cg.b, bool_op)(a, b)
    name = {"float": float_name, "int": int_name, "uint": uint_name}[kind]
    # fast-math flags are only valid on floating-point calls (smax/umin reject them)
    return cg.b.call(cg.intrinsic(name, dt, 2), [a, b],
                     fastmath=fastmath if kind == "float" else ())


def cast_value(cg, v, src, dst):
    """numpy `astype` from src to dst (float -> int saturates instead of being undefined).
    `v` may be a vector: the result is a vector of as many lanes."""
    b, src, dst = cg.b, np.dtype(src), np.dtype(dst)
    sk, dk, ty = _kind(src), _kind(dst), value_type(dst)
    if src == dst:
        return v
    width = ty.width if dk != "float" else None
    src_width = getattr(_element(v.type), "width", None)
    if isinstance(v.type, ir.VectorType):
        ty = ir.VectorType(ty, v.type.count)
    if dk == "bool":
        if sk == "float":
            return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    if sk == "bool":
        return b.zext(v, ty) if dk != "float" else b.uitofp(v, ty)
    if sk in ("int", "uint") and dk in ("int", "uint"):
        if width == src_width:
            return v
        if width < src_width:
            return b.trunc(v, ty)
        return b.sext(v, ty) if sk == "int" else b.zext(v, ty)
    if sk == "float" and dk == "float":
        return b.fpext(v, ty) if src.itemsize < dst.itemsize else b.fptrunc(v, ty)
    if sk == "int":
        return b.sitofp(v, ty)
    if sk == "uint":
        return b.uitofp(v, ty)
    name = "fptosi" if dk == "int" else "fptoui"
    fn = cg._extern(f"llvm.{name}.sat.{type_suffix(ty)}.{type_suffix(v.type)}", ty, [v.type])
    return b.call(fn, [v])


def _element(ty):
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _cast(cg, e, a):
    return cast_value(cg, a, e.args[0].dtype, e.dtype)


def _logical(op):
    def emit(cg, e, *args):
        vals = [cast_value(cg, v, a.dtype, np.bool_) for v, a in zip(args, e.args)]
        if op == "not":
            return cg.b.not_(vals[0])
        return getattr(cg.b, op)(*vals)
    return emit


OPS = {
    "add": _binary("add", "fadd", "or_"),
    "subtract": _binary("sub", "fsub", None),
    "multiply": _binary("mul", "fmul", "and_"),
    "true_divide": _binary(None, "fdiv", None),
    "floor_divide": _divmod_op(0),
    "remainder": _divmod_op(1),
    "power": _power,
    "negative": _negative,
    "absolute": _absolute,
    "invert": _invert,
    "bitwise_and": _binary("and_", None, "and_"),
    "bitwise_or": _binary("or_", None, "or_"),
    "bitwise_xor": _binary("xor", None, "xor"),
    "left_shift": _shift(left=True),
    "right_shift": _shift(left=False),
    "less": _compare("<"),
    "less_equal": _compare("<="),
    "greater": _compare(">"),
    "greater_equal": _compare(">="),
    "equal": _compare("=="),
    "not_equal": _compare("!="),
    "logical_and": _logical("and_"),
    "logical_or": _logical("or_"),
    "logical_not": _logical("not"),
    "maximum": _minmax("maximum", "smax", "umax", "or_"),
    "minimum": _minmax("minimum", "smin", "umin", "and_"),
    "exp": vmath.op("exp"),
    "log": vmath.op("log"),
    "sqrt": _unary_float("sqrt"),
    "tanh": vmath.op("tanh"),
    "sin": _unary_float("sin"),
    "cos": _unary_float("cos"),
    "rint": _unary_float("rint"),
    "floor": _float_or_identity("floor"),
    "ceil": _float_or_identity("ceil"),
    "sign": _sign,
    "isnan": _isnan,
    "isfinite": _isfinite,
    "log1p": vmath.op("log1p"),
    "expm1": vmath.op("expm1"),
    "erf": vmath.op("erf"),
    "cast": _cast,
    "where": lambda cg, e, c, a, b: cg.b.select(c, a, b),
}


# The flags on a reduction's combine step: reassociation (so that LLVM vectorizes and
# reorders the accumulation) and FMA contraction, but not `nsz`: together with `reassoc`
# it lets InstCombine fold the body into the accumulator, e.g. `acc + (x - x)` -> `acc`,
# which turns the sum of `x - x` over a NaN or inf into 0 instead of NaN.
REDUCE_FLAGS = tuple(f for f in FAST if f != "nsz")
# A max/min reduction's step (llvm.maximum/minimum, NaN-propagating) takes `nsz` too:
# without it, x86 orders -0 below +0 with a sign test and two blends a vector (six
# instructions against three: max, NaN test, masked move), and a float32 row max ran
# 1.5-2x slower (2 threads, Zen 5: 1000 x 1000 44 -> 29 us, 1 x 10^6 67 -> 37, numpy
# 38). numpy's own max of -0 and +0 gives either, by their order in the row.
MINMAX_FLAGS = REDUCE_FLAGS + ("nsz",)


def _combine_arith(int_op, float_op, bool_op):
    def emit(cg, dt, acc, x, fast):
        kind = _kind(dt)
        if kind == "bool":
            return getattr(cg.b, bool_op)(acc, x)
        if kind == "float":
            v = getattr(cg.b, float_op)(acc, x)
            if fast:
                v.flags.extend(REDUCE_FLAGS)
            return v
        return getattr(cg.b, int_op)(acc, x)
    return emit


def _combine_minmax(float_name, int_name, uint_name, bool_op):
    def emit(cg, dt, acc, x, fast):
        return combine_minmax(cg, dt, acc, x, float_name, int_name, uint_name, bool_op,
                              MINMAX_FLAGS if fast else ())
    return emit


def vector_flags(combiner, fast):
    """Whether a combine step of code tex vectorized takes the fast-math flags: not a
    sum's. Its vector lanes, accumulators and horizontal tree are already the
    reassociation fast_math allows, so the flags bought nothing but leave to LLVM to
    reorder the sum further (its optimized code and a light compile then summed in
    different orders: such kernels could not run quick code first, tiers.same_values);
    without them the values are the same at any optimization level. A max or min keeps
    its `nsz` (MINMAX_FLAGS: three instructions a vector instead of six)."""
    return fast and combiner != "sum"


COMBINE = {
    "sum": _combine_arith("add", "fadd", "or_"),
    "prod": _combine_arith("mul", "fmul", "and_"),
    "max": _combine_minmax("maximum", "smax", "umax", "or_"),
    "min": _combine_minmax("minimum", "smin", "umin", "and_"),
}


def _better(cg, dt, combiner, x, acc, pos, acc_pos):
    """argmax/argmin: does (x, pos) replace the best (acc, acc_pos)? Equal values keep the
    smaller position and the NaN with the smallest position wins (numpy's argmax), so the
    answer does not depend on the order the reduction visits positions in."""
    b, kind = cg.b, _kind(dt)
    op = ">" if combiner == "argmax" else "<"
    earlier = b.icmp_signed("<", pos, acc_pos)
    if kind == "float":
        strictly = b.fcmp_ordered(op, x, acc)
        tie = b.and_(b.fcmp_ordered("==", x, acc), earlier)
        x_nan = b.fcmp_unordered("uno", x, x)
        acc_nan = b.fcmp_unordered("uno", acc, acc)
        nan_wins = b.and_(x_nan, b.or_(b.not_(acc_nan), earlier))
        return b.or_(b.or_(strictly, tie), nan_wins)
    signed = kind == "int"
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    tie = b.and_(b.icmp_unsigned("==", x, acc), earlier)
    return b.or_(cmp(op, x, acc), tie)


def increasing_better(cg, dt, combiner, x, acc):
    """ops._better when x's position is known to come after acc's (a lane of the main
    loop, filled by the first vector): never a tie win, and a NaN wins only over a number.
    For floats `x >u acc` (greater or unordered) and `acc` ordered say exactly that."""
    b, kind = cg.b, np.dtype(dt).kind
    op = ">" if combiner == "argmax" else "<"
    if kind == "f":
        return b.and_(b.fcmp_unordered(op, x, acc), b.fcmp_ordered("ord", acc, acc))
    return b.icmp_signed(op, x, acc) if kind == "i" else b.icmp_unsigned(op, x, acc)


__all__ = ["OPS", "COMBINE", "cast_value", "const", "I64"]

"""Vectorized math: exp, log, tanh, erf, expm1, log1p as polynomial kernels in LLVM IR.

LLVM lowers `llvm.exp.v8f32` and friends to one libm call per lane, and libm's erf has
no intrinsic at all, so an elementwise gate or a fused GEGLU epilogue ran scalar. Here
each function is a small internal `alwaysinline` function per type (`tex.vmath.exp.v8f32`,
`tex.vmath.exp.f64`, ...) built from fadd/fmul/llvm.fmuladd/bit casts only, in the style
of SLEEF and numpy's SIMD loops, so it is the same code for a scalar or a <N x T> vector
and vectorizes wherever the loop does. float16 goes through float32.

- exp: Cody-Waite reduction x = n ln2 + r (ln2 split in a high part with trailing zeros
  and a low part), a minimax polynomial for exp(r) on [-ln2/2, ln2/2], and the scale 2^n
  applied as two powers of two so that results in the denormal range round once. The
  argument is clamped first, so overflow gives inf and underflow 0 without special cases.
- log: exponent/mantissa split (denormals scaled by 2^25 / 2^54 first) into
  m in [sqrt(2)/2, sqrt(2)), then fdlibm's form with s = f / (2 + f), f = m - 1.
- tanh: |x| < 0.625: x + x^3 P(x^2); above: 1 - 2 / (exp(2|x|) + 1) with x's sign
  (saturates to +-1 through exp's overflow).
- erf: |x| < 1: x P(x^2); above: 1 - exp(-x^2) R(|x|) with R a polynomial fit of
  erfc(x) exp(x^2) on [1, 4] (float32) or three pieces of [1, 6] (float64; each lane
  picks its piece's coefficients), |x| clamped there (erf is +-1 beyond in that type).
- expm1, log1p: Kahan's tricks on the kernels above, u = exp(x): (u - 1) x / log(u);
  u = 1 + x: log(u) x / (u - 1), exact where u rounds to 1.

inf, -inf, NaN, signed zeros and denormals follow numpy. Polynomials were fitted by
Chebyshev interpolation in 60-digit arithmetic (mpmath). Max error measured over 2^20
arguments (random bit patterns over every exponent, dense grids over [-20, 20] and the
overflow / underflow thresholds, the specials), float32 against the float64 result,
float64 against numpy's float64 (erf: math.erf); tests/test_vmath.py asserts the bound:

    ulps                exp    log    tanh   erf    expm1  log1p
    float32 measured    1.04   0.80   1.24   0.94   2.38   2.23
    float32 bound       1.5    1      1.5    1.5    3      3
    float64 bound       1      1      2      1.5    2      2

(float64's tanh loses its second ulp just above 0.625, in 1 - 2 / (e + 1).)
"""
import math

import numpy as np
from llvmlite import ir

from .irtypes import declare, type_suffix

LN2_HI = {"f32": 0.693145751953125, "f64": 6.93147180369123816490e-01}   # n * LN2_HI exact
LN2_LO = {"f32": 1.4286068203094173e-06, "f64": 1.90821492927058770002e-10}
EXP_RANGE = {"f32": (-104.0, 89.0), "f64": (-746.0, 710.0)}   # exp is 0 / inf beyond
ERF_ONE = {"f32": 4.0, "f64": 6.0}                              # erf(x) rounds to 1 beyond

EXP = {
    "f32": (0.5, 0.1666657702559799, 0.041666554662050534, 0.008363173074513711,
            0.001392617611993558),
    "f64": (0.5000000000000001, 0.16666666666666669, 0.041666666666624164, 0.008333333333330065,
            0.0013888888917196719, 0.00019841269863040545, 2.4801521322368692e-05,
            2.7557268480310024e-06, 2.7620075879983367e-07, 2.5100375832561234e-08),
}
LOG = {
    "f32": (0.6666666655449709, 0.40000121839806124, 0.28550820815960665, 0.23330467216303835),
    "f64": (0.666666666666667, 0.39999999999899505, 0.28571428625975487, 0.2222221113479508,
            0.18182889125261723, 0.15331721600556042, 0.14616449685043406),
}
TANH = {
    "f32": (-0.3333333317214036, 0.1333330355691574, -0.053959259577204544, 0.02176891865102821,
            -0.008343945515839153, 0.002292744816178142),
    "f64": (-0.3333333333333333, 0.13333333333333042, -0.05396825396789699, 0.021869488519008305,
            -0.008863235103240878, 0.0035921217511549622, -0.0014557754120478055,
            0.0005896606577757043, -0.0002375906496055562, 9.257116129556769e-05,
            -3.12011014257974e-05, 6.485163482793113e-06),
}
ERF_SMALL = {
    "f32": (1.1283791658483509, -0.37612626666720334, 0.11283594715160218, -0.026854212010626412,
            0.005189087423433974, -0.000801686428716587, 7.875875062685488e-05),
    "f64": (1.1283791670955126, -0.37612638903183543, 0.11283791670945006, -0.02686617064323777,
            0.0052239776071164225, -0.0008548325975389692, 0.00012055294904839707,
            -1.492473690741966e-05, 1.6447424703317362e-06, -1.6208483801871705e-07,
            1.3720064546777686e-08, -7.795898827002142e-10),
}
ERFC_F32 = (0.2108063640611436, -0.07434733674204068, 0.024937994751043007, -0.008001693887595496,
            0.0024670657614729186, -0.0007331529642909852, 0.0002109179637713861,
            -5.9523157031741315e-05, 1.6114106393804864e-05, -3.7472737729690635e-06,
            9.763901572173902e-07, -4.264734348150259e-07, 1.0301512994682683e-07)
ERFC_F64 = (
    (0.3215854164543175, -0.16362291773256007, 0.07615103985547739, -0.032930905299562635,
     0.013377340953068511, -0.005145957547985475, 0.0018861348769562312, -0.0006619300663930904,
     0.00022330994586274217, -7.265892257522832e-05, 2.2864294807967016e-05, -6.974987241686018e-06,
     2.067088490322641e-06, -5.961119446974675e-07, 1.6708703859197203e-07, -4.585146974854072e-08,
     1.329844554951821e-08, -3.4778531023839574e-09),
    (0.1936620962790687, -0.06323763756063484, 0.019758592987322816, -0.005934337896997966,
     0.0017195818852915683, -0.0004821950849815436, 0.0001311818004875362, -3.469860956890751e-05,
     8.940156439196906e-06, -2.2473735137402935e-06, 5.519738191507474e-07, -1.3262502467727597e-07,
     3.121531648858328e-08, -7.2012225046835695e-09, 1.6194561547466204e-09, -3.601905695321358e-10,
     8.88871719258283e-11, -1.9033341776852134e-11),
    (0.11630270721024731, -0.02350344859816315, 0.00466132636897215, -0.0009080988970296605,
     0.00017392830404389724, -3.27757811351432e-05, 6.081114529130165e-06, -1.1115677167336422e-06,
     2.0029203969026852e-07, -3.5595758245294924e-08, 6.242305999386548e-09,
     -1.0807407331242056e-09, 1.8494111335759245e-10, -3.124412795480489e-11, 5.12800546963121e-12,
     -8.473208026588069e-13, 1.6893363955995483e-13, -2.7193036019864156e-14),
)


class _Kernel:
    """IR helpers for one float type `ty` (scalar or vector): constants splat to it,
    `fmuladd`, Horner polynomials, bit casts to the integer type of the same width."""

    def __init__(self, module, b, ty):
        self.module, self.b, self.ty = module, b, ty
        elem = ty.element if isinstance(ty, ir.VectorType) else ty
        self.key = "f64" if isinstance(elem, ir.DoubleType) else "f32"
        self.width = 64 if self.key == "f64" else 32
        self.mant = 52 if self.key == "f64" else 23
        ity = ir.IntType(self.width)
        self.ity = ir.VectorType(ity, ty.count) if isinstance(ty, ir.VectorType) else ity

    def c(self, v):
        return ir.Constant(self.ty, float(v))

    def ci(self, v):
        return ir.Constant(self.ity, int(v))

    def intrinsic(self, name, *args):
        fn = declare(self.module, f"llvm.{name}.{type_suffix(self.ty)}", self.ty,
                     [self.ty] * len(args))
        return self.b.call(fn, list(args))

    def fma(self, a, m, c):
        return self.intrinsic("fmuladd", a, m, c)

    def poly(self, x, coeffs):
        """Horner's c0 + x (c1 + x (c2 + ...)); a coefficient may be a number or a value."""
        coeffs = [k if isinstance(k, ir.Value) else self.c(k) for k in coeffs]
        acc = coeffs[-1]
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, k)
        return acc

    def lt(self, a, v):
        return self.b.fcmp_ordered("<", a, v if isinstance(v, ir.Value) else self.c(v))

    def gt(self, a, v):
        return self.b.fcmp_ordered(">", a, v if isinstance(v, ir.Value) else self.c(v))

    def eq(self, a, v):
        return self.b.fcmp_ordered("==", a, self.c(v))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, cond, a, other):
        return self.b.select(cond, a, other)

    def bits(self, x):
        return self.b.bitcast(x, self.ity)

    def real(self, i):
        return self.b.bitcast(i, self.ty)

    def pow2(self, n):
        """2^n for integer lanes n in the normal exponent range."""
        bias = 1023 if self.key == "f64" else 127
        return self.real(self.b.shl(self.b.add(n, self.ci(bias)), self.ci(self.mant)))

    def call(self, name, x):
        return self.b.call(function(self.module, name, self.ty), [x])


def _exp(k, x):
    b = k.b
    lo, hi = EXP_RANGE[k.key]
    xc = k.sel(k.gt(x, hi), k.c(hi), x)
    xc = k.sel(k.lt(xc, lo), k.c(lo), xc)
    xc = k.sel(k.isnan(x), k.c(0), xc)
    magic = 1.5 * 2.0 ** k.mant                    # adding it rounds to an integer
    t = k.fma(xc, k.c(1 / math.log(2)), k.c(magic))
    n_f = b.fsub(t, k.c(magic))
    n = b.sub(k.bits(t), k.bits(k.c(magic)))
    r = k.fma(n_f, k.c(-LN2_HI[k.key]), xc)
    r = k.fma(n_f, k.c(-LN2_LO[k.key]), r)
    p = b.fadd(k.fma(b.fmul(r, r), k.poly(r, EXP[k.key]), r), k.c(1))
    n1 = b.ashr(n, k.ci(1))
    y = b.fmul(b.fmul(p, k.pow2(n1)), k.pow2(b.sub(n, n1)))
    return k.sel(k.isnan(x), x, y)


def _log(k, x):
    b = k.b
    tiny = k.lt(x, np.finfo(np.float64 if k.key == "f64" else np.float32).tiny)
    shift = 54 if k.key == "f64" else 25
    xs = k.sel(tiny, b.fmul(x, k.c(2.0 ** shift)), x)
    sqrt_half = k.bits(k.c(math.sqrt(0.5)))
    ix = b.sub(k.bits(xs), sqrt_half)
    e = b.ashr(ix, k.ci(k.mant))
    e = b.sub(e, b.select(tiny, k.ci(shift), k.ci(0)))
    m = k.real(b.add(b.and_(ix, k.ci((1 << k.mant) - 1)), sqrt_half))   # [sqrt(.5), sqrt(2))
    f = b.fsub(m, k.c(1))
    s = b.fdiv(f, b.fadd(f, k.c(2)))
    z = b.fmul(s, s)
    R = b.fmul(z, k.poly(z, LOG[k.key]))
    hfsq = b.fmul(k.c(0.5), b.fmul(f, f))
    dk = b.sitofp(e, k.ty)
    inner = k.fma(s, b.fadd(hfsq, R), b.fmul(dk, k.c(LN2_LO[k.key])))
    y = k.fma(dk, k.c(LN2_HI[k.key]), b.fsub(f, b.fsub(hfsq, inner)))
    y = k.sel(k.eq(x, math.inf), x, y)
    y = k.sel(k.eq(x, 0), k.c(-math.inf), y)
    return k.sel(b.fcmp_unordered("<", x, k.c(0)), k.c(math.nan), y)


def _tanh(k, x):
    b = k.b
    ax = k.intrinsic("fabs", x)
    z = b.fmul(x, x)
    small = k.fma(b.fmul(ax, z), k.poly(z, TANH[k.key]), ax)
    e = k.call("exp", b.fmul(ax, k.c(2)))
    big = b.fsub(k.c(1), b.fdiv(k.c(2), b.fadd(e, k.c(1))))
    return k.intrinsic("copysign", k.sel(k.lt(ax, 0.625), small, big), x)


def _erf(k, x):
    b = k.b
    ax = k.intrinsic("fabs", x)
    z = b.fmul(x, x)
    c0, *rest = ERF_SMALL[k.key]          # x + x (c0 - 1 + z Q(z)): no rounding of x c0
    small = k.fma(x, k.poly(z, [c0 - 1, *rest]), x)
    top = ERF_ONE[k.key]
    a = k.sel(k.lt(ax, top), ax, k.c(top))
    if k.key == "f32":
        rx = k.poly(b.fsub(a, k.c(2.5)), ERFC_F32)
    else:                       # pieces [1, 2), [2, 3.5), [3.5, 6]: per-lane coefficients
        first, second = k.lt(a, 2.0), k.lt(a, 3.5)
        centre = k.sel(first, k.c(1.5), k.sel(second, k.c(2.75), k.c(4.75)))
        coeffs = [k.sel(first, k.c(c0), k.sel(second, k.c(c1), k.c(c2)))
                  for c0, c1, c2 in zip(*ERFC_F64)]
        rx = k.poly(b.fsub(a, centre), coeffs)
    e = k.call("exp", b.fneg(z))
    big = k.intrinsic("copysign", k.fma(b.fneg(e), rx, k.c(1)), x)
    return k.sel(k.lt(ax, 1.0), small, big)


def _expm1(k, x):
    b = k.b
    u = k.call("exp", x)
    um1 = b.fsub(u, k.c(1))
    y = b.fmul(um1, b.fdiv(x, k.call("log", u)))
    y = k.sel(k.eq(u, math.inf), u, y)
    y = k.sel(k.eq(um1, -1), um1, y)
    return k.sel(k.eq(u, 1), x, y)          # also keeps -0.0


def _log1p(k, x):
    b = k.b
    u = b.fadd(k.c(1), x)
    y = b.fmul(k.call("log", u), b.fdiv(x, b.fsub(u, k.c(1))))
    y = k.sel(k.eq(x, math.inf), x, y)
    y = k.sel(k.eq(u, 0), k.c(-math.inf), y)
    return k.sel(k.eq(u, 1), x, y)


KERNELS = {"exp": _exp, "log": _log, "tanh": _tanh, "erf": _erf, "expm1": _expm1,
           "log1p": _log1p}


def function(module, name, ty):
    """`T tex.vmath.<name>.<T>(T x)` in `module`, defined on first use: internal and
    always inlined, so it costs no call and vectorizes with the loop that uses it."""
    fname = f"tex.vmath.{name}.{type_suffix(ty)}"
    fn = module.globals.get(fname)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ty, [ty]), name=fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(KERNELS[name](_Kernel(module, b, ty), fn.args[0]))
    return fn


def emit(cg, name, a):
    """`name`(a) for a float scalar or vector `a`; half goes through float."""
    b = cg.b
    elem = a.type.element if isinstance(a.type, ir.VectorType) else a.type
    if isinstance(elem, ir.HalfType):
        f32 = ir.FloatType()
        wide = ir.VectorType(f32, a.type.count) if isinstance(a.type, ir.VectorType) else f32
        r = b.call(function(cg.module, name, wide), [b.fpext(a, wide)])
        return b.fptrunc(r, a.type)
    return b.call(function(cg.module, name, a.type), [a])


def op(name):
    """An ops.OPS entry: `fn(cg, expr, a)` through the kernel `name`."""
    return lambda cg, e, a: emit(cg, name, a)

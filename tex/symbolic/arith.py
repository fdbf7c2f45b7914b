"""Sums, products and powers in canonical form, and the rewritings of them: `expand`,
`numer_denom` (see core.py for the form)."""
import math
from fractions import Fraction

from .core import Expr, Float, Integer, ONE, ZERO, _number, _sympify, later, sympify


class AssocOp(Expr):
    __slots__ = ()

    @classmethod
    def make_args(cls, e):
        """The terms of a sum (factors of a product), or (e,)."""
        return e.args if isinstance(e, cls) else (sympify(e),)

    @classmethod
    def _unevaluated(cls, args):
        """The args as written (one arg is itself; none is the identity)."""
        return cls._from_args(args) if len(args) > 1 else args[0] if args else cls.identity


class Add(AssocOp):
    __slots__ = ()
    is_Add = True

    def __new__(cls, *args, evaluate=True):
        args = [_sympify(a) for a in args]
        if not evaluate:
            return cls._unevaluated(args)
        number = ZERO
        terms = {}
        for a in args:
            for t in (a.args if isinstance(a, Add) else (a,)):
                if t.is_Number:
                    number = _add_numbers(number, t)
                    continue
                c, rest = t.as_coeff_Mul()
                terms[rest] = _add_numbers(terms[rest], c) if rest in terms else c
        out = [_times(c, t) for t, c in terms.items() if c.value != 0]
        if number.value != 0 or number.is_Float:
            out.append(number)
        if not out:
            return ZERO
        if len(out) == 1:
            return out[0]
        return cls._from_args(sorted(out, key=_term_key))

    def _sort_key(self):
        return (40, len(self._args), tuple(a.sort_key() for a in self._args))

    @property
    def is_integer(self):
        if all(a.is_integer for a in self._args):
            return True
        return None

    @property
    def is_nonnegative(self):
        if all(a.is_nonnegative for a in self._args):
            return True
        return None

    @property
    def is_positive(self):
        if self.is_nonnegative and any(a.is_positive for a in self._args):
            return True
        return None

    @property
    def is_zero(self):
        return False if self.is_positive else None

    def could_extract_minus_sign(self):
        neg = sum(1 for a in self._args if a.could_extract_minus_sign())
        pos = len(self._args) - neg
        return neg > pos or (neg == pos and self._args[0].could_extract_minus_sign())

    def as_ordered_terms(self):
        return list(self._args)


def _term_key(t):
    """Terms of a sum in sympy's order for linear forms: by their symbols, a number last."""
    if t.is_Number:
        return (1,)
    c, rest = t.as_coeff_Mul()
    return (0, rest.sort_key(), c.value)


def _add_numbers(a, b):
    return _number(a.value + b.value)


def _times(c, t):
    """c * t for a number c and a product t without a number."""
    if c.value == 1:
        return t
    if c.value == 0:
        return ZERO
    if t is ONE:
        return c
    return Mul._from_args((c,) + (t.args if isinstance(t, Mul) else (t,)))


class Mul(AssocOp):
    __slots__ = ()
    is_Mul = True

    def __new__(cls, *args, evaluate=True):
        args = [_sympify(a) for a in args]
        if not evaluate:
            return cls._unevaluated(args)
        coeff = Fraction(1)
        is_float = False
        powers = {}
        for a in args:
            for f in (a.args if isinstance(a, Mul) else (a,)):
                if f.is_Number:
                    is_float = is_float or f.is_Float
                    coeff = coeff * f.value
                    continue
                base, e = (f.args if isinstance(f, Pow) and f.exp.is_Rational else (f, ONE))
                powers[base] = _add_numbers(powers[base], e) if base in powers else e
        c = Float(coeff) if is_float else _number(coeff)
        if c.value == 0:
            return c
        factors = []
        for base, e in powers.items():
            p = base if e.value == 1 else Pow(base, e) if e.value != 0 else ONE
            if p.is_Number:
                c = _number(c.value * p.value)
            elif p is not ONE:
                factors.append(p)
        if not factors:
            return c
        if len(factors) == 1:
            (f,) = factors
            if c.value == 1:
                return f
            if f.is_Add and c.is_Rational:
                return Add(*(_times_number(c, t) for t in f.args))
        factors.sort(key=lambda f: f.sort_key())
        return cls._from_args(([c] if c.value != 1 else []) + factors)

    def _sort_key(self):
        c, rest = self.as_coeff_Mul()
        return (30, len(rest.args) if rest.is_Mul else 1,
                tuple(a.sort_key() for a in Mul.make_args(rest)), c.value)

    def as_coeff_Mul(self):
        first = self._args[0]
        if first.is_Number:
            rest = self._args[1:]
            return first, rest[0] if len(rest) == 1 else Mul._from_args(rest)
        return ONE, self

    @property
    def is_integer(self):
        if all(a.is_integer for a in self._args):
            return True
        return None

    @property
    def is_nonnegative(self):
        signs = [_sign(a) for a in self._args]
        if None in signs:
            return None
        return signs.count(-1) % 2 == 0 or None

    @property
    def is_positive(self):
        signs = [_strict_sign(a) for a in self._args]
        if None in signs:
            return None
        return signs.count(-1) % 2 == 0

    @property
    def is_negative(self):
        signs = [_strict_sign(a) for a in self._args]
        if None in signs:
            return None
        return signs.count(-1) % 2 == 1

    def could_extract_minus_sign(self):
        return self._args[0].is_Number and self._args[0].value < 0


def _times_number(c, t):
    tc, rest = t.as_coeff_Mul()
    return _times(_number(c.value * tc.value), rest) if not tc.is_Float else Mul(c, t)


def _sign(a):
    """1 (>= 0), -1 (<= 0) or None, for a factor."""
    if a.is_nonnegative:
        return 1
    if a.is_Number:
        return -1
    return None


def _strict_sign(a):
    if a.is_positive:
        return 1
    if a.is_Number and a.value < 0:
        return -1
    return None


class Pow(Expr):
    __slots__ = ()
    is_Pow = True

    def __new__(cls, base, exp, evaluate=True):
        b, e = _sympify(base), _sympify(exp)
        if not evaluate:
            return cls._from_args((b, e))
        if e.is_Number and e.value == 0:
            return ONE
        if e.is_Number and e.value == 1:
            return b
        if b.is_Number and e.is_Integer:
            if b.value == 0 and e.value < 0:
                raise ZeroDivisionError(f"{b}**{e}")
            v = b.value ** e.value if b.is_Float else Fraction(b.value) ** e.value
            return _number(v)
        if b.is_Integer and e.is_Rational and e.value == Fraction(1, 2) and b.value >= 0:
            r = math.isqrt(b.value)
            if r * r == b.value:
                return Integer(r)
        if b.is_Number and b.value == 1:
            return ONE
        if b.is_Pow and e.is_Integer and b.exp.is_Integer:
            return Pow(b.base, b.exp.value * e.value)
        if b.is_Mul and e.is_Integer:
            return Mul(*(Pow(f, e) for f in b.args))
        return cls._from_args((b, e))

    @property
    def base(self):
        return self._args[0]

    @property
    def exp(self):
        return self._args[1]

    def _sort_key(self):
        return (20, self.base.sort_key(), self.exp.sort_key())

    @property
    def is_integer(self):
        if self.base.is_integer and self.exp.is_Integer and self.exp.value > 0:
            return True
        return None

    @property
    def is_nonnegative(self):
        if self.base.is_nonnegative or (self.exp.is_Integer and self.exp.value % 2 == 0):
            return True
        return None

    @property
    def is_positive(self):
        if self.base.is_positive:
            return True
        return None


# ---------------------------------------------------------------- rewriting
def expand(e):
    """Products of sums multiplied out and positive integer powers of sums too, all
    the way down (the arguments of functions and relations included)."""
    e = sympify(e)
    if not e.args:
        return e
    args = [expand(a) for a in e.args]
    if isinstance(e, Mul):
        return _expand_product(args)
    if isinstance(e, Pow):
        b, x = args
        if b.is_Add and x.is_Integer and x.value > 0:
            return _expand_product([b] * x.value)
        return Pow(b, x)
    return e.func(*args) if any(a is not b for a, b in zip(args, e.args)) else e


def _expand_product(factors):
    terms = [ONE]
    for f in factors:
        terms = [Mul(t, g) for t in terms for g in Add.make_args(f)]
    return Add(*terms)


def numer_denom(e):
    """(numerator, denominator) of e over one common denominator, both without
    fractions: `N/8 + 1` -> (N + 8, 8), `M/P` -> (M, P), `1/P**2 + 1/P` -> (P + 1, P**2).
    sympy's `fraction(together(e))`."""
    num, den = _over_denominator(sympify(e))
    return num, _denominator_expr(den)


def _over_denominator(e):
    """(numerator, denominator) with the denominator kept as (integer, {base: power}):
    as a product it could be distributed (2*(M + 1) is 2*M + 2) and its factors lost."""
    if e.is_Rational:
        return Integer(e.p), (e.q, {})
    if isinstance(e, Pow) and e.exp.is_Integer:
        num, (c, bases) = _over_denominator(e.base)
        k = e.exp.value
        if k > 0:
            return Pow(num, k), (c ** k, {b: p * k for b, p in bases.items()})
        # (num/den)**-k = den**k / num**k
        k = -k
        flipped = Pow(_denominator_expr((c, bases)), k)
        nc, rest = num.as_coeff_Mul()
        if not nc.is_Integer:
            return flipped, (1, {num: k})
        if nc.value < 0:
            flipped, nc = flipped * (-1) ** k, -nc
        factors = {}
        for f in Mul.make_args(rest):
            if f is not ONE:
                base, p = (f.base, f.exp.value) if isinstance(f, Pow) and f.exp.is_Integer \
                    else (f, 1)
                factors[base] = factors.get(base, 0) + p * k
        return flipped, (nc.value ** k, factors)
    if isinstance(e, Mul):
        num, c, bases = ONE, 1, {}
        for f in e.args:
            n, (fc, fb) = _over_denominator(f)
            num, c = num * n, c * fc
            for b, p in fb.items():
                bases[b] = bases.get(b, 0) + p
        return num, (c, bases)
    if isinstance(e, Add):
        parts = [_over_denominator(t) for t in e.args]
        c = math.lcm(*(pc for _, (pc, _) in parts))
        bases = {}
        for _, (_, pb) in parts:
            for b, p in pb.items():
                bases[b] = max(bases.get(b, 0), p)
        terms = []
        for n, (pc, pb) in parts:
            scale = [Integer(c // pc)] + [Pow(b, p - pb.get(b, 0)) for b, p in bases.items()]
            terms.append(Mul(n, *scale))
        return Add(*terms), (c, bases)
    return e, (1, {})


def _denominator_expr(den):
    c, bases = den
    return Mul(Integer(c), *(Pow(b, p) for b, p in bases.items()))


def together(e):
    """e itself: `numer_denom` finds the common denominator (sympy's `together` wrote
    e over it first, and `fraction` split the result)."""
    return sympify(e)


def fraction(e):
    return numer_denom(e)


def simplify(e):
    """The canonical form of an expanded `e`: enough to see that a difference is 0."""
    return expand(e)


later.Add, later.Mul, later.Pow, later.expand = Add, Mul, Pow, expand
Add.identity, Mul.identity = ZERO, ONE

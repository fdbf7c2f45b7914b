"""Integer functions of sizes and loop variables: floor, ceiling, Mod, Min, Max and
CeilDiv (a split's trip count), and `lower_bound`, which decides most comparisons a
schedule asks about without an assumption system."""
import math
from fractions import Fraction

from .arith import Add, Mul, Pow, expand
from .core import Expr, Integer, Symbol, ONE, ZERO, _number, _sympify, later


class Function(Expr):
    """f(*args): `eval` gives the value when the args decide it, else the call is kept."""
    __slots__ = ()
    is_Function = True

    def __new__(cls, *args, evaluate=True):
        args = tuple(_sympify(a) for a in args)
        if evaluate:
            value = cls.eval(*args)
            if value is not None:
                return value
        return cls._from_args(args)

    @classmethod
    def eval(cls, *args):
        return None

    def _sort_key(self):
        return (60, type(self).__name__, tuple(a.sort_key() for a in self._args))


def _size(e):
    return 1 + sum(_size(a) for a in e.args)


def _integer_split(x):
    """(the terms of x known to be integers, the others)."""
    terms = Add.make_args(x)
    return [t for t in terms if t.is_integer], [t for t in terms if not t.is_integer]


class _Rounding(Function):
    """floor and ceiling: a number rounded, an integer kept, integer terms taken out
    (floor(N/2 + M) is M + floor(N/2))."""
    __slots__ = ()
    is_integer = True

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return Integer(cls._round(x.value))
        if x.is_integer:
            return x
        whole, rest = _integer_split(x)
        if whole:
            return Add(cls(Add(*rest)), *whole)
        return None

    @property
    def is_nonnegative(self):
        return True if self.args[0].is_nonnegative else None


class floor(_Rounding):
    """The largest integer <= x; `a // b` of sizes is floor(a/b)."""
    __slots__ = ()
    _round = staticmethod(math.floor)


class ceiling(_Rounding):
    __slots__ = ()
    _round = staticmethod(math.ceil)


class Mod(Function):
    """a - m*floor(a/m): Python's %, the sign of m."""
    __slots__ = ()

    @classmethod
    def eval(cls, a, m):
        if a.is_Number and m.is_Number:
            if m.value == 0:
                raise ZeroDivisionError(f"{a} % 0")
            return _number(a.value - m.value * math.floor(Fraction(a.value) / Fraction(m.value))
                           if not (a.is_Float or m.is_Float) else a.value % m.value)
        if m.is_Number and m.value == 0:
            raise ZeroDivisionError(f"{a} % 0")
        if a.is_Number and a.value == 0:
            return ZERO
        if a == m or a == -m or (m.is_Number and m.value == 1 and a.is_integer):
            return ZERO
        if isinstance(a, Mod) and a.args[1] == m:
            return a
        if m.is_Integer and m.value != 0 and a.is_integer:
            # terms with a coefficient that m divides drop out, the others are reduced
            # (Mod(8*io + ii, 8) is Mod(ii, 8); Mod(9*x + 1, 8) is Mod(x + 1, 8))
            terms, changed = [], False
            for t in Add.make_args(a):
                c, rest = t.as_coeff_Mul()
                if c.is_Integer and (rest.is_integer or rest is ONE):
                    r = c.value % m.value
                    changed = changed or r != c.value
                    if r:
                        terms.append(Integer(r) * rest)
                else:
                    terms.append(t)
            if changed:
                return cls(Add(*terms), m)
        return None

    @property
    def is_integer(self):
        return True if all(x.is_integer for x in self.args) else None

    @property
    def is_nonnegative(self):
        return True if self.args[1].is_positive else None


class Abs(Function):
    """|x|: evaluated for numbers and for an x whose sign is known."""
    __slots__ = ()

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return _number(abs(x.value))
        if x.is_nonnegative:
            return x
        if (-x).is_nonnegative:
            return -x
        return None

    @property
    def is_integer(self):
        return self.args[0].is_integer

    is_nonnegative = True


class CeilDiv(Function):
    """ceiling(a / b) for integers, the trip count of a split's outer loop: it
    evaluates only on integer arguments (sympy's `ceiling(Min(1020, 1024 - 1020*io)/6)`
    simplified wrongly to the quotient, which is why this is a function of its own)."""
    __slots__ = ()
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer and b.value != 0:
            return Integer(-(-a.value // b.value))
        if b.is_Number and b.value == 1:
            return a
        return None

    @property
    def is_nonnegative(self):
        a, b = self.args
        return True if a.is_nonnegative and b.is_positive else None

    @property
    def is_positive(self):
        a, b = self.args
        return True if a.is_positive and b.is_positive else None


class _MinMax(Function):
    """Min and Max, simplified without an assumption system: equal arguments merged,
    numbers folded, and an argument dropped when `lower_bound` shows another is never
    better (`Min(8, M - 8*io)` stays; `Min(M, M + 1)` is M)."""
    __slots__ = ()

    def __new__(cls, *args, evaluate=True):
        args = [_sympify(a) for a in args]
        if not evaluate:
            return cls._from_args(args)
        flat = []
        for a in args:
            flat.extend(a.args if isinstance(a, cls) else (a,))
        numbers = [a for a in flat if a.is_Number]
        rest = [a for a in flat if not a.is_Number]
        if numbers:
            rest.append(cls._pick(numbers))
        kept = []
        for a in dict.fromkeys(rest):
            if any(cls._dominates(b, a) for b in kept):
                continue
            kept = [b for b in kept if not cls._dominates(a, b)] + [a]
        if len(kept) == 1:
            return kept[0]
        # the simpler first: min(64, N - 64*jo), min(N // 2, N - N // 2)
        return cls._from_args(sorted(kept, key=lambda e: (_size(e), e.sort_key())))

    @property
    def is_integer(self):
        return True if all(a.is_integer for a in self.args) else None


class Min(_MinMax):
    __slots__ = ()

    @staticmethod
    def _pick(numbers):
        return min(numbers, key=lambda n: n.value)

    @staticmethod
    def _dominates(a, b):           # a <= b always: b never the least
        return _at_least(b - a)

    @property
    def is_nonnegative(self):
        return True if all(a.is_nonnegative for a in self.args) else None

    @property
    def is_positive(self):
        return True if all(a.is_positive for a in self.args) else None


class Max(_MinMax):
    __slots__ = ()

    @staticmethod
    def _pick(numbers):
        return max(numbers, key=lambda n: n.value)

    @staticmethod
    def _dominates(a, b):
        return _at_least(a - b)

    @property
    def is_nonnegative(self):
        return True if any(a.is_nonnegative for a in self.args) else None

    @property
    def is_positive(self):
        return True if any(a.is_positive for a in self.args) else None


def lower_bound(e):
    """An integer lower bound of the integer expression `e`, or None when none is cheap
    to see: a constant plus non-negative multiples of products of sizes, indices and
    parameters (each >= 0; a positive one >= 1), ceiling quotients of those and Mins
    of those."""
    return _lower_bound(_sympify(e), expanded=False)


def _lower_bound(e, expanded):
    total = 0
    for term in Add.make_args(e):
        c, rest = term.as_coeff_Mul()
        if not c.is_Rational:
            return None
        if rest is ONE:
            total += c.value
            continue
        if c.value < 0:
            return None
        factors = Mul.make_args(rest)
        low = 1
        for f in factors:
            if not expanded and isinstance(f, (Add, Pow)):
                return _lower_bound(expand(e), expanded=True)   # (a + b)*c: distribute
            f_low = _atom_lower_bound(f)
            # a product of lower bounds bounds the product only when none is negative
            if f_low is None or f_low < 0 and len(factors) > 1:
                return None
            low *= f_low
        total += c.value * low
    return total


def _atom_lower_bound(f):
    if isinstance(f, Symbol):
        return (1 if f.is_positive else 0) if f.is_integer and f.is_nonnegative else None
    if isinstance(f, CeilDiv) and f.args[1].is_Integer and f.args[1].value > 0:
        low = lower_bound(f.args[0])
        return None if low is None else -(-low // f.args[1].value)
    if isinstance(f, Min):
        lows = [lower_bound(a) for a in f.args]
        return None if None in lows else min(lows)
    if isinstance(f, Max):
        lows = [lower_bound(a) for a in f.args]
        known = [x for x in lows if x is not None]
        return max(known) if known else None
    if isinstance(f, (floor, Mod)) and f.is_nonnegative:
        return 0
    return None


def _at_least(e, n=0):
    low = lower_bound(e)
    return low is not None and low >= n


later.floor, later.ceiling, later.Mod, later.Abs = floor, ceiling, Mod, Abs

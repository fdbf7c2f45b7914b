"""tex's algebra of sizes, indices and conditions: expression nodes, numbers and symbols
here; sums, products and powers in arith.py, integer functions in functions.py,
relations and and/or/not in logic.py. Expressions keep one canonical form, so that two
spellings of one polynomial are one object.

Why not sympy: tex needs integer affine arithmetic on sizes and loop variables, a few
integer functions (floor, ceiling, Mod, Min, Max, ceil-div) and relations between them.
sympy does all of that and much more, and its import alone (about 300 ms) was most of a
notebook's first `tex.einsum`. This module keeps the part of sympy's interface tex uses
(`args`, `func`, `xreplace`, `free_symbols`, `is_Integer`, ...), so reading the code
that builds schedules needs no new vocabulary.

The canonical form: a sum is flat, its like terms collected, a number last; a product is
flat, a number first, equal bases merged into integer powers; a number times a sum is
distributed (`2*(M + 1)` is `2*M + 2`), anything else is kept as written (`expand`
multiplies out). Objects are immutable and compared by structure.
"""
import operator
import threading
import types
from fractions import Fraction
from numbers import Integral, Rational as _PyRational

import numpy as np

# The names of the modules built on this one (arith: Add, Mul, Pow, expand; functions:
# floor, ceiling, Mod, Abs; logic: the relations, true, false; printer; parse), which
# each module puts here when it is imported (the package's __init__ imports them all):
# an expression's operators need them, and core importing them would be an import cycle.
later = types.SimpleNamespace()


class SympifyError(ValueError):
    """A value that is not a number, a symbol or an expression of them."""


class Basic:
    """An immutable expression node: `args` are its children, `func(*args)` rebuilds it."""
    __slots__ = ("_args", "_hash", "_free", "_key", "__weakref__")
    is_Atom = is_Number = is_Integer = is_Rational = is_Float = is_Symbol = False
    is_Add = is_Mul = is_Pow = is_Relational = is_Boolean = is_Function = False
    is_number = False

    @classmethod
    def _from_args(cls, args):
        obj = object.__new__(cls)
        obj._args = tuple(args)
        return obj

    @property
    def args(self):
        return self._args

    @property
    def func(self):
        return type(self)

    def _hashable_content(self):
        return self._args

    def __hash__(self):
        try:
            return self._hash
        except AttributeError:
            self._hash = h = hash((type(self).__name__, self._hashable_content()))
            return h

    def __eq__(self, other):
        if self is other:
            return True
        if type(self) is not type(other):
            try:
                other = _sympify(other)
            except SympifyError:
                return NotImplemented
            if type(self) is not type(other):
                return False
        return self._hashable_content() == other._hashable_content()

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    @property
    def free_symbols(self):
        try:
            return self._free
        except AttributeError:
            self._free = f = frozenset().union(*(a.free_symbols for a in self._args))
            return f

    def xreplace(self, rule):
        """The expression with each subexpression that is a key of `rule` replaced (by
        structure, outermost first), rebuilt through its constructor."""
        if self in rule:
            return rule[self]
        if not self._args:
            return self
        new = tuple(a.xreplace(rule) for a in self._args)
        if all(a is b for a, b in zip(new, self._args)):
            return self
        return self.func(*new)

    def subs(self, *pairs):
        """`e.subs(old, new)`, `e.subs({old: new, ...})` or a list of pairs, in turn."""
        if len(pairs) == 2:
            pairs = [pairs]
        else:
            (pairs,) = pairs
            pairs = pairs.items() if isinstance(pairs, dict) else pairs
        out = self
        for old, new in pairs:
            out = out.xreplace({sympify(old): sympify(new)})
        return out

    def has(self, *patterns):
        """Does a subexpression equal one of `patterns` or belong to one of them (types)?"""
        types = tuple(p for p in patterns if isinstance(p, type))
        values = [p for p in patterns if not isinstance(p, type)]
        return any((types and isinstance(n, types)) or n in values
                   for n in preorder_traversal(self))

    def atoms(self, *types):
        types = types or (Atom,)
        return {n for n in preorder_traversal(self) if isinstance(n, types)}

    def sort_key(self):
        try:
            return self._key
        except AttributeError:
            self._key = k = self._sort_key()
            return k

    def _sort_key(self):
        return (50, type(self).__name__, tuple(a.sort_key() for a in self._args))

    def __reduce__(self):
        return (_rebuild, (type(self), self._args))

    def __str__(self):
        return later.StrPrinter().doprint(self)

    def __repr__(self):
        """As Python spells it where tex.indices is loaded (`M // 2`, `M % 4`, `ceil(M/4)`:
        what a user wrote and what a notebook shows of `X.shape`), else as `str`."""
        return getattr(later, "ReprPrinter", later.StrPrinter)().doprint(self)


def _rebuild(cls, args):
    return cls(*args)


def preorder_traversal(e):
    """Every node of `e`, parents before children."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, Basic):
            stack.extend(reversed(n.args))


def ordered(items):
    """`items` in the canonical order (the order `Add` and `Mul` keep their args in)."""
    return sorted(items, key=lambda e: e.sort_key())


# ---------------------------------------------------------------- conversion
def _sympify(x):
    """x as an expression: expressions, Python and numpy numbers and booleans."""
    if isinstance(x, Basic):
        return x
    if isinstance(x, (bool, np.bool_)):
        return later.true if x else later.false
    if isinstance(x, (Integral, np.integer)):
        return Integer(int(x))
    if isinstance(x, (float, np.floating)):
        return Float(float(x))
    if isinstance(x, _PyRational):
        return Rational(x.numerator, x.denominator)
    raise SympifyError(f"{x!r} is not a number or an expression")


def sympify(x, locals=None):
    """`_sympify`, and text parsed as Python (`"M // 2 + 1"`, `"P >= 2 and M == 1"`; also
    sympy's spellings `Eq(M, 1)`, `Min`, `Mod`, `ceiling`, `&`), names looked up in
    `locals` or made integer symbols."""
    if isinstance(x, str):
        return later.parse(x, locals or {})
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    return _sympify(x)


def _operand(f):
    """An arithmetic operator's method: `other` converted, else NotImplemented (so that
    tex's own expressions, `2*i * A[i]`, get their turn)."""
    def method(self, other):
        try:
            other = _sympify(other)
        except SympifyError:
            return NotImplemented
        if other.is_Boolean:
            return NotImplemented
        return f(self, other)
    method.__name__ = f.__name__
    return method


class Expr(Basic):
    """An arithmetic expression: integers and rationals of sizes, indices, parameters."""
    __slots__ = ()

    @property
    def is_number(self):
        return not self.free_symbols

    # assumptions (True, False or None for unknown), derived from the args
    is_integer = is_nonnegative = is_positive = None

    @property
    def is_negative(self):
        if self.is_nonnegative:
            return False
        return None

    @property
    def is_zero(self):
        return None

    @_operand
    def __add__(self, o):
        return later.Add(self, o)

    @_operand
    def __radd__(self, o):
        return later.Add(o, self)

    @_operand
    def __sub__(self, o):
        return later.Add(self, -o)

    @_operand
    def __rsub__(self, o):
        return later.Add(o, -self)

    @_operand
    def __mul__(self, o):
        return later.Mul(self, o)

    @_operand
    def __rmul__(self, o):
        return later.Mul(o, self)

    @_operand
    def __truediv__(self, o):
        return later.Mul(self, later.Pow(o, Integer(-1)))

    @_operand
    def __rtruediv__(self, o):
        return later.Mul(o, later.Pow(self, Integer(-1)))

    @_operand
    def __floordiv__(self, o):
        return later.floor(self / o)

    @_operand
    def __rfloordiv__(self, o):
        return later.floor(o / self)

    @_operand
    def __mod__(self, o):
        return later.Mod(self, o)

    @_operand
    def __rmod__(self, o):
        return later.Mod(o, self)

    @_operand
    def __pow__(self, o):
        return later.Pow(self, o)

    @_operand
    def __rpow__(self, o):
        return later.Pow(o, self)

    def __neg__(self):
        return later.Mul(Integer(-1), self)

    def __pos__(self):
        return self

    def __abs__(self):
        return later.Abs(self)

    def __floor__(self):            # math.floor(N / 2), as a numpy user writes it
        return later.floor(self)

    def __ceil__(self):
        return later.ceiling(self)

    def _relation(name):
        def method(self, other):
            try:
                other = _sympify(other)
            except SympifyError:
                return NotImplemented
            return getattr(later, name)(self, other)
        return method

    __lt__ = _relation("StrictLessThan")
    __le__ = _relation("LessThan")
    __gt__ = _relation("StrictGreaterThan")
    __ge__ = _relation("GreaterThan")
    del _relation
    __hash__ = Basic.__hash__

    def __int__(self):
        raise TypeError(f"cannot convert {self} to an int: it holds symbols")

    def __float__(self):
        raise TypeError(f"cannot convert {self} to a float: it holds symbols")

    def as_coeff_Mul(self):
        """(number, rest) with self == number * rest."""
        return ONE, self

    def as_ordered_terms(self):
        return list(later.Add.make_args(self))

    def could_extract_minus_sign(self):
        return False

    def coeff(self, x):
        """The coefficient of x**1 in the expanded sum (terms holding x to another
        power, or x inside a function, are not counted)."""
        out = []
        for term in later.Add.make_args(self):
            factors = list(later.Mul.make_args(term))
            if x in factors:
                factors.remove(x)
                if not any(f.has(x) for f in factors):
                    out.append(later.Mul(*factors))
        return later.Add(*out)

    def expand(self):
        return later.expand(self)


class Atom(Expr):
    __slots__ = ()
    is_Atom = True
    _args = ()

    @property
    def free_symbols(self):
        return frozenset()


# ---------------------------------------------------------------- numbers
class Number(Atom):
    """A number: Integer, Rational (a fraction that is not an integer) or Float."""
    __slots__ = ("value",)
    is_Number = True

    def _hashable_content(self):
        return (self.value,)

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        if isinstance(other, Number):
            return self.value == other.value
        if isinstance(other, (int, float, Fraction, np.number)) and not isinstance(other, bool):
            return self.value == other
        return False if isinstance(other, Basic) else NotImplemented

    __ne__ = Basic.__ne__

    def _sort_key(self):
        return (0, self.value)

    def __reduce__(self):
        return (type(self), (self.value,) if not self.is_Rational or self.is_Integer
                else (self.value.numerator, self.value.denominator))

    def __bool__(self):
        return self.value != 0

    def __float__(self):
        return float(self.value)

    def __int__(self):
        return int(self.value)

    def _compare(op):
        def method(self, other):
            if isinstance(other, Number):
                return op(self.value, other.value)
            if isinstance(other, (int, float, Fraction, np.number)):
                return op(self.value, other)
            return getattr(Expr, f"__{op.__name__}__")(self, other)
        return method

    __lt__, __le__ = _compare(operator.lt), _compare(operator.le)
    __gt__, __ge__ = _compare(operator.gt), _compare(operator.ge)
    del _compare

    @property
    def is_nonnegative(self):
        return self.value >= 0

    @property
    def is_positive(self):
        return self.value > 0

    @property
    def is_negative(self):
        return self.value < 0

    @property
    def is_zero(self):
        return self.value == 0

    def could_extract_minus_sign(self):
        return self.value < 0

    def as_coeff_Mul(self):
        return self, ONE


def _number(v):
    """The Number for a Python int, Fraction or float."""
    if isinstance(v, float):
        return Float(v)
    if isinstance(v, Fraction):
        return Integer(v.numerator) if v.denominator == 1 else Rational(v.numerator, v.denominator)
    return Integer(v)


class Rational(Number):
    """p/q in lowest terms; an Integer when q divides p."""
    __slots__ = ()
    is_Rational = True
    is_integer = False

    def __new__(cls, p, q=1):
        v = Fraction(int(p), int(q))
        if v.denominator == 1:
            return Integer(v.numerator)
        obj = object.__new__(Rational)
        obj.value = v
        return obj

    @property
    def p(self):
        return self.value.numerator

    @property
    def q(self):
        return self.value.denominator


class Integer(Rational):
    __slots__ = ()
    is_Integer = True
    is_integer = True

    def __new__(cls, n):
        if isinstance(n, Integer):
            return n
        n = int(n)
        cached = _SMALL.get(n) if -2 <= n <= 16 else None
        if cached is not None:
            return cached
        obj = object.__new__(Integer)
        obj.value = n
        return obj

    def __index__(self):
        return self.value

    @property
    def p(self):
        return self.value

    @property
    def q(self):
        return 1


_SMALL = {}
for _n in range(-2, 17):
    _SMALL[_n] = _o = object.__new__(Integer)
    _o.value = _n
ZERO, ONE, NEGATIVE_ONE = _SMALL[0], _SMALL[1], _SMALL[-1]


class Float(Number):
    __slots__ = ()
    is_Float = True

    def __new__(cls, v):
        obj = object.__new__(Float)
        obj.value = float(v)
        return obj

    @property
    def is_integer(self):
        return None


class S:
    """sympy's `S.One` and friends."""
    Zero, One, NegativeOne = ZERO, ONE, NEGATIVE_ONE


# ---------------------------------------------------------------- symbols
class Symbol(Atom):
    """A named integer-valued unknown: a size (`integer, nonnegative`) or a parameter
    (`integer, positive`). Two symbols with one name, class and assumptions are one."""
    __slots__ = ("name", "_assumptions")
    is_Symbol = True

    def __new__(cls, name, **assumptions):
        obj = object.__new__(cls)
        obj.name = name
        if assumptions.get("positive"):
            assumptions["nonnegative"] = True
        obj._assumptions = tuple(sorted(assumptions.items()))
        return obj

    __xnew__ = __new__        # sympy's spelling of "not through the symbol cache"

    def _hashable_content(self):
        return (self.name, self._assumptions)

    def __reduce__(self):
        return (_make_symbol, (type(self), self.name, dict(self._assumptions)))

    @property
    def free_symbols(self):
        return frozenset((self,))

    def _assumption(self, key):
        return dict(self._assumptions).get(key)

    @property
    def is_integer(self):
        return self._assumption("integer")

    @property
    def is_nonnegative(self):
        return self._assumption("nonnegative")

    @property
    def is_positive(self):
        return self._assumption("positive")

    def _sort_key(self):
        return (1, self.name, getattr(self, "dummy_index", 0), type(self).__name__,
                self._assumptions)


def _make_symbol(cls, name, assumptions):
    return Symbol.__new__(cls, name, **assumptions)


class Dummy(Symbol):
    """A symbol unlike every other, whatever its name (`dummy_index` tells them apart)."""
    __slots__ = ("dummy_index",)
    _count = 0
    _counting = threading.Lock()    # indices made on several threads (dask's) stay apart

    def __new__(cls, name, dummy_index=None, **assumptions):
        obj = Symbol.__new__(cls, name, **assumptions)
        with Dummy._counting:
            if dummy_index is None:
                Dummy._count += 1
                dummy_index = Dummy._count
            else:       # one that arrives (unpickled): later ones here are numbered after it
                Dummy._count = max(Dummy._count, dummy_index)
        obj.dummy_index = dummy_index
        return obj

    def _hashable_content(self):
        return (self.name, self.dummy_index, self._assumptions)

    def __reduce__(self):
        return (_make_dummy, (type(self), self.name, self.dummy_index, dict(self._assumptions)))


def _make_dummy(cls, name, dummy_index, assumptions):
    return cls(name, dummy_index=dummy_index, **assumptions)

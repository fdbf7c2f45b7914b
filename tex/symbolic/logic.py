"""Conditions: relations between integer expressions, and, or, not, true and false.

A relation is decided when it is built if the difference of its sides is a number, or
`lower_bound` shows which way it goes (`M >= 0` of a size is true); otherwise it is
kept as written. And/Or keep their arguments as a set: true terms dropped, a false one
(a true one for Or) decides, duplicates merged."""
from .arith import expand
from .core import Basic, Expr, SympifyError, _sympify, later
from .functions import _at_least


class Boolean(Basic):
    __slots__ = ()
    is_Boolean = True

    def __and__(self, other):
        return And(self, other)

    __rand__ = __and__

    def __or__(self, other):
        return Or(self, other)

    __ror__ = __or__

    def __invert__(self):
        return Not(self)

    @property
    def is_number(self):
        return False


class BooleanAtom(Boolean):
    __slots__ = ("value",)
    _args = ()

    def __new__(cls, value):
        obj = object.__new__(cls)
        obj.value = value
        return obj

    def _hashable_content(self):
        return (self.value,)

    def __bool__(self):
        return self.value

    def __reduce__(self):
        return (_boolean, (self.value,))

    @property
    def free_symbols(self):
        return frozenset()

    def _sort_key(self):
        return (90, self.value)


true, false = BooleanAtom(True), BooleanAtom(False)


def _boolean(value):
    return true if value else false


class Relational(Boolean):
    """lhs (op) rhs for two integer expressions."""
    __slots__ = ()
    is_Relational = True
    rel_op = None
    _holds = None        # (from a known sign of rhs - lhs): see _decide

    def __new__(cls, lhs, rhs, evaluate=True):
        lhs, rhs = _sympify(lhs), _sympify(rhs)
        if not (isinstance(lhs, Expr) and isinstance(rhs, Expr)):
            raise TypeError(f"cannot compare {lhs} and {rhs}")
        if evaluate:
            decided = cls._decide(lhs, rhs)
            if decided is not None:
                return true if decided else false
        return cls._from_args((lhs, rhs))

    @property
    def lhs(self):
        return self._args[0]

    @property
    def rhs(self):
        return self._args[1]

    def __bool__(self):
        raise TypeError(f"cannot determine the truth value of {self}: it depends on symbols"
                        " (the min and max of sizes as an extent: tex.minimum(M, N),"
                        " tex.maximum(M, N))")

    def _sort_key(self):        # relations before and/or/not (as sympy ordered them)
        return (55, type(self).__name__, tuple(a.sort_key() for a in self._args))

    @property
    def negated(self):
        return NEGATED[type(self)](*self._args, evaluate=False)

    @classmethod
    def _decide(cls, lhs, rhs):
        gap = rhs - lhs
        if gap.is_Number:
            return cls._holds(gap.value)
        return cls._decide_symbolic(lhs, rhs, gap)

    @classmethod
    def _decide_symbolic(cls, lhs, rhs, gap):
        return None


class _Order(Relational):
    """<, <=, >, >=: decided by lower bounds of the difference of the sides."""
    __slots__ = ()
    _less = None         # (lhs is the larger side, the gap that makes it hold: 1 strict)

    @classmethod
    def _decide_symbolic(cls, lhs, rhs, gap):
        swapped, need = cls._less
        up = -gap if swapped else gap           # the larger side minus the smaller
        if _at_least(up, need):
            return True
        if _at_least(-up, 1 - need):
            return False
        return None


class StrictLessThan(_Order):
    __slots__ = ()
    rel_op = "<"
    _less = (False, 1)

    @staticmethod
    def _holds(gap):
        return gap > 0


class LessThan(_Order):
    __slots__ = ()
    rel_op = "<="
    _less = (False, 0)

    @staticmethod
    def _holds(gap):
        return gap >= 0


class StrictGreaterThan(_Order):
    __slots__ = ()
    rel_op = ">"
    _less = (True, 1)

    @staticmethod
    def _holds(gap):
        return gap < 0


class GreaterThan(_Order):
    __slots__ = ()
    rel_op = ">="
    _less = (True, 0)

    @staticmethod
    def _holds(gap):
        return gap <= 0


class Equality(Relational):
    __slots__ = ()
    rel_op = "=="

    @staticmethod
    def _holds(gap):
        return gap == 0

    @classmethod
    def _decide_symbolic(cls, lhs, rhs, gap):
        gap = expand(gap)
        if gap.is_Number:
            return gap.value == 0
        if _at_least(gap, 1) or _at_least(-gap, 1):
            return False
        return None


class Unequality(Relational):
    __slots__ = ()
    rel_op = "!="

    @staticmethod
    def _holds(gap):
        return gap != 0

    @classmethod
    def _decide_symbolic(cls, lhs, rhs, gap):
        eq = Equality._decide_symbolic(lhs, rhs, gap)
        return None if eq is None else not eq


Lt, Le, Gt, Ge, Eq, Ne = (StrictLessThan, LessThan, StrictGreaterThan, GreaterThan,
                          Equality, Unequality)
NEGATED = {Lt: Ge, Le: Gt, Gt: Le, Ge: Lt, Eq: Ne, Ne: Eq}     # a relation's opposite


class _Lattice(Boolean):
    """And / Or of conditions, kept as a set (in canonical order)."""
    __slots__ = ()

    def __new__(cls, *args, evaluate=True):
        conds = set()
        for c in map(_condition, args):
            if c is cls.zero:
                return c
            if c is not cls.identity:
                conds.update(c.args if isinstance(c, cls) else (c,))
        if len(conds) < 2:
            return conds.pop() if conds else cls.identity
        return cls._from_args(sorted(conds, key=lambda c: c.sort_key()))

    def _sort_key(self):
        return (70, type(self).__name__, tuple(a.sort_key() for a in self._args))

    @classmethod
    def make_args(cls, c):
        return c.args if isinstance(c, cls) else (_condition(c),)


class And(_Lattice):
    __slots__ = ()
    identity, zero = true, false


class Or(_Lattice):
    __slots__ = ()
    identity, zero = false, true


class Not(Boolean):
    __slots__ = ()

    def __new__(cls, arg, evaluate=True):
        arg = _condition(arg)
        if not evaluate:
            return cls._from_args((arg,))
        if isinstance(arg, BooleanAtom):
            return false if arg.value else true
        if isinstance(arg, Relational):
            return NEGATED[type(arg)](*arg.args)
        if isinstance(arg, Not):
            return arg.args[0]
        return cls._from_args((arg,))

    def _sort_key(self):        # after relations, before and/or
        return (65, type(self).__name__, tuple(a.sort_key() for a in self._args))


def _condition(c):
    c = _sympify(c)
    if not isinstance(c, Boolean):
        raise SympifyError(f"{c} is not a condition")
    return c


later.true, later.false = true, false
for _cls in (StrictLessThan, LessThan, StrictGreaterThan, GreaterThan):
    setattr(later, _cls.__name__, _cls)

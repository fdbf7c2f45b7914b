"""tex's own symbolic algebra of sizes, indices and conditions (in place of sympy,
whose import cost a notebook's first call about 300 ms): see core.py."""
from .core import (Atom, Basic, Dummy, Expr, Float, Integer, Number, Rational, S, Symbol,
                   SympifyError, ordered, preorder_traversal, sympify)
from .arith import (Add, AssocOp, Mul, Pow, expand, fraction, numer_denom, simplify,
                    together)
from .functions import Abs, CeilDiv, Function, Max, Min, Mod, ceiling, floor, lower_bound
from .logic import (NEGATED, And, Boolean, BooleanAtom, Eq, Equality, GreaterThan,
                    LessThan, Ne, Not, Or, Relational, StrictGreaterThan, StrictLessThan,
                    Unequality, false, true)
from .printer import PRECEDENCE, StrPrinter
from .parse import parse

__all__ = ["Abs", "Add", "And", "AssocOp", "Atom", "Basic", "Boolean", "BooleanAtom",
           "CeilDiv", "Dummy", "Eq", "Equality", "Expr", "Float", "Function", "GreaterThan",
           "Integer", "LessThan", "Max", "Min", "Mod", "Mul", "NEGATED", "Ne", "Not",
           "Number", "Or", "PRECEDENCE", "Pow", "parse", "Rational", "Relational", "S",
           "StrPrinter", "StrictGreaterThan", "StrictLessThan", "Symbol", "SympifyError",
           "Unequality", "ceiling", "expand", "false", "floor", "fraction", "lower_bound",
           "numer_denom", "ordered", "preorder_traversal", "simplify", "sympify",
           "together", "true"]

"""Expressions as text. `StrPrinter` is the default `str()` (sympy's spelling: `Mod`,
`Min`, `Eq(M, 1)`, `&`); tex.indices' size printer derives from it for the Python
spelling users read in messages and loop nests."""
from .arith import Add, Mul, Pow
from .core import Integer, Number, Rational, later
from .logic import And, Not, Or, Relational, Equality, Unequality

PRECEDENCE = {"Lambda": 1, "Xor": 10, "Or": 20, "And": 30, "Relational": 35, "Add": 40,
              "Mul": 50, "Pow": 60, "Func": 70, "Not": 100, "Atom": 1000}


def precedence(e):
    if isinstance(e, Add):
        return PRECEDENCE["Add"]
    if isinstance(e, Mul):
        return PRECEDENCE["Add"] if e.could_extract_minus_sign() else PRECEDENCE["Mul"]
    if isinstance(e, Pow):
        return PRECEDENCE["Pow"]
    if isinstance(e, Number):
        if e.value < 0:
            return PRECEDENCE["Add"]
        return PRECEDENCE["Mul"] if e.is_Rational and not e.is_Integer else PRECEDENCE["Atom"]
    if isinstance(e, (Equality, Unequality)):
        return PRECEDENCE["Atom"]              # printed as a call: Eq(M, 1)
    if isinstance(e, Relational):
        return PRECEDENCE["Relational"]
    if isinstance(e, And):
        return PRECEDENCE["And"]
    if isinstance(e, Or):
        return PRECEDENCE["Or"]
    if isinstance(e, Not):
        return PRECEDENCE["Not"]
    return PRECEDENCE["Atom"]


class StrPrinter:
    printmethod = "_sympystr"     # an object's own method of this name prints it

    def doprint(self, e):
        return self._print(e)

    def _print(self, e):
        own = getattr(e, self.printmethod, None)
        if own is not None and not isinstance(e, type):
            return own(self)
        for cls in type(e).__mro__:
            method = getattr(self, f"_print_{cls.__name__}", None)
            if method is not None:
                return method(e)
        return str(e)

    def parenthesize(self, item, level, strict=False):
        p = precedence(item)
        if p < level or (not strict and p <= level):
            return f"({self._print(item)})"
        return self._print(item)

    def _print_Symbol(self, e):
        return e.name

    def _print_Integer(self, e):
        return str(e.value)

    def _print_Rational(self, e):
        return f"{e.p}/{e.q}"

    def _print_Float(self, e):
        return repr(e.value)

    def _print_BooleanAtom(self, e):
        return str(e.value)

    def _print_Add(self, e, order=None):
        # terms added, then subtracted, a number last (T - R + 1), or first when nothing
        # else is added (1024 - 48*io)
        lead = all(a.is_number or a.could_extract_minus_sign() for a in e.args)
        order = {a: n for n, a in enumerate(e.args)}
        terms = sorted(e.args, key=lambda a: (not (lead and a.is_Number and a.value > 0),
                                              a.is_Number, a.could_extract_minus_sign(),
                                              order[a]))
        out = self._print(terms[0])
        for t in terms[1:]:
            if t.could_extract_minus_sign():
                out += f" - {self.parenthesize(-t, PRECEDENCE['Add'])}"
            else:
                out += f" + {self.parenthesize(t, PRECEDENCE['Add'])}"
        return out

    def _print_Mul(self, e):
        c, rest = e.as_coeff_Mul()
        if c.value < 0:
            return "-" + self._print(-e)
        num, den = [], []
        if c.is_Rational and not c.is_Integer:
            if c.p != 1:
                num.append(Integer(c.p))
            den.append(Integer(c.q))
        elif c.value != 1:
            num.append(c)
        for f in Mul.make_args(rest):
            if isinstance(f, Pow) and f.exp.is_Number and f.exp.value < 0:
                den.append(Pow(f.base, -f.exp))
            else:
                num.append(f)
        text = "*".join(self.parenthesize(f, PRECEDENCE["Mul"], strict=False)
                        if not f.is_Number else self._print(f) for f in num) or "1"
        if not den:
            return text
        dtext = "*".join(self.parenthesize(f, PRECEDENCE["Mul"]) for f in den)
        return f"{text}/{dtext}" if len(den) == 1 else f"{text}/({dtext})"

    def _print_Pow(self, e):
        if e.exp.is_Rational and e.exp.value == Rational(1, 2).value:
            return f"sqrt({self._print(e.base)})"
        if e.exp.is_Number and e.exp.value == -1:
            return f"1/{self.parenthesize(e.base, PRECEDENCE['Pow'], strict=False)}"
        return f"{self.parenthesize(e.base, PRECEDENCE['Pow'], strict=False)}**" \
               f"{self.parenthesize(e.exp, PRECEDENCE['Pow'], strict=False)}"

    def _print_Function(self, e):
        return f"{type(e).__name__}({', '.join(self._print(a) for a in e.args)})"

    ceiling_name = "ceiling"

    def _print_CeilDiv(self, e):
        a, b = e.args
        return f"{self.ceiling_name}({self.parenthesize(a, PRECEDENCE['Mul'])}/" \
               f"{self.parenthesize(b, PRECEDENCE['Mul'] + 1)})"

    def _print_Relational(self, e):
        if isinstance(e, (Equality, Unequality)):
            name = "Eq" if isinstance(e, Equality) else "Ne"
            return f"{name}({self._print(e.lhs)}, {self._print(e.rhs)})"
        level = PRECEDENCE["Relational"]
        return f"{self.parenthesize(e.lhs, level)} {e.rel_op} {self.parenthesize(e.rhs, level)}"

    def _print_And(self, e):
        return " & ".join(self.parenthesize(a, PRECEDENCE["Relational"]) for a in e.args)

    def _print_Or(self, e):
        return " | ".join(self.parenthesize(a, PRECEDENCE["Relational"]) for a in e.args)

    def _print_Not(self, e):
        return f"~{self.parenthesize(e.args[0], PRECEDENCE['Not'])}"


later.StrPrinter = StrPrinter

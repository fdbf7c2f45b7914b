"""Which of a kernel's specialized nests (codegen.choices: a stage's specializations
and its own nest, chosen by size) a call runs. A kernel is built with the nests its
calls need (runtime.compile_kernel, Signature.build_choice); a call whose nest a build
left out gets STATUS_DEFERRED, and the call's choices, one a stage, are decided here
from its sizes and parameters, by generated Python (`decider`: microseconds, where
sympy took 2.5 ms), at build time (`not_taken`) and at a call."""
import builtins
import threading

import tex.symbolic as sym

from tex.expr import CeilDiv

from . import codegen
from .irtypes import RELATIONS


def not_taken(kernel, sizes):
    """The numbers of the choices (codegen.choices) whose conditions hold at none of
    `sizes` ([{Size: value}] or one dict); a condition that a call's sizes do not decide
    (a call-time parameter) counts as taken. Through `decider`'s generated Python (a
    matmul's twelve conditions: 7.7 ms in sympy at its first compile)."""
    calls = [sizes] if isinstance(sizes, dict) else list(sizes)
    if not calls:
        return frozenset()
    at = decider(kernel)
    return frozenset.intersection(*(at(call) for call in calls))


def _not_taken_by_substitution(kernel, sizes):
    """not_taken, each condition evaluated by substituting the sizes (what `decider`
    falls back to)."""
    calls = [sizes] if isinstance(sizes, dict) else sizes
    out = set()
    for n, guard in enumerate(codegen.choices(kernel)):
        cond = sym.sympify(guard.cond)
        if all(_at(cond, call) is sym.false for call in calls):
            out.add(n)
    return frozenset(out)


def _at(cond, values):
    """cond at these values; a condition sympy cannot evaluate there (Mod(N, K) at
    K = 0) is kept, so it counts as taken."""
    try:
        return cond.xreplace({s: sym.Integer(v) for s, v in values.items()})
    except (ZeroDivisionError, TypeError, ValueError):
        return cond


def call_values(kernel, inputs, params):
    """{size or parameter: its value} at a call with these inputs and parameters."""
    values = {s: inputs[pos].shape[axis] for s, (pos, axis) in kernel.bindings.items()}
    values.update(zip(kernel.params, params))
    return values


def decider(kernel):
    """`not_taken_at(values)`: not_taken(kernel, values) for one call's `call_values`,
    as generated Python (a condition it cannot write goes to sympy)."""
    conds = tuple(sym.sympify(g.cond) for g in codegen.choices(kernel))
    with _deciders_lock:
        fast = _deciders.get(conds)
    if fast is None:
        fast = _generated_decider(conds)      # (two threads may both make it: one kept)
        with _deciders_lock:
            fast = _deciders.setdefault(conds, fast)
            while len(_deciders) > MAX_DECIDERS:
                del _deciders[next(iter(_deciders))]

    def not_taken_at(values):
        try:
            return fast(values)
        except (KeyError, TypeError, ZeroDivisionError):   # a value missing, a size of 0
            return _not_taken_by_substitution(kernel, values)   # decided, or kept
    return not_taken_at


# the generated functions by their conditions: a kernel's build and its call path ask
# for the same ones (the skeleton's conditions are the kernel's)
_deciders = {}
_deciders_lock = threading.Lock()
MAX_DECIDERS = 256


def _generated_decider(conds):
    """The Python function of `decider` for these conditions: each distinct part of them
    a local, computed once (a choice's condition holds that no earlier one did, so they
    repeat each other: a matmul's 13 as nested expressions were 9.5 KB of source,
    whose compile took 5 of the 10 ms the decider cost its first call). A part that
    divides by a size (`N % K == 0`, which K = 0 makes raise) stays inside its
    condition, written where `and`/`or` reach it only as the condition would."""
    symbols = sorted(set().union(*(c.free_symbols for c in conds)), key=str)
    names = {s: f"_v[_s{k}]" for k, s in enumerate(symbols)}
    scope = {f"_s{k}": s for k, s in enumerate(symbols)}
    lines, parts, tests = [], {}, []

    def part(c):
        if c is sym.true or c is sym.false:
            return str(bool(c))
        known = parts.get(c)
        if known is not None:
            return known
        if isinstance(c, (sym.And, sym.Or)):
            joint = " and " if isinstance(c, sym.And) else " or "
            text = "(" + joint.join(part(a) for a in c.args) + ")"
        elif isinstance(c, sym.Not):
            text = f"(not {part(c.args[0])})"
        else:
            op = RELATIONS.get(type(c))
            if op is None:
                raise NotImplementedError(f"condition {c} ({type(c).__name__})")
            text = f"({pyexpr(c.lhs, names)} {op} {pyexpr(c.rhs, names)})"
        if _divides_by_a_size(c):
            return text
        name = parts[c] = f"_p{len(parts)}"
        lines.append(f"    {name} = {text}\n")
        return name
    for n, c in enumerate(conds):
        written = len(lines), dict(parts)
        try:
            tests.append(part(c))
        except NotImplementedError:
            del lines[written[0]:]          # (its parts written so far go too)
            parts = written[1]
            scope[f"_c{n}"] = c
            tests.append(f"(_at(_c{n}, _v) is not _false)")
    scope.update(_at=_at, _false=sym.false)
    src = ("def not_taken_at(_v):\n" + "".join(lines) +
           "    return frozenset(n for n, held in enumerate((" +
           "".join(f"{t}, " for t in tests) + ")) if not held)\n")
    exec(builtins.compile(src, "<tex choices>", "exec"), scope)
    return scope["not_taken_at"]


def _divides_by_a_size(c):
    """Whether condition `c` divides by something other than a number somewhere (its
    value may raise ZeroDivisionError where the sizes make that divisor 0)."""
    for node in sym.preorder_traversal(c):
        if isinstance(node, (sym.Mod, CeilDiv)) and not sym.sympify(node.args[1]).is_number:
            return True
        if isinstance(node, (sym.floor, sym.ceiling)) and \
                not sym.numer_denom(node.args[0])[1].is_number:
            return True
    return False


def pycond(c, names):
    """A sympy condition on sizes as Python source over the variables in `names`."""
    if c is sym.true or c is sym.false:
        return str(bool(c))
    if isinstance(c, (sym.And, sym.Or)):
        joint = " and " if isinstance(c, sym.And) else " or "
        return "(" + joint.join(pycond(a, names) for a in c.args) + ")"
    if isinstance(c, sym.Not):
        return f"(not {pycond(c.args[0], names)})"
    op = RELATIONS.get(type(c))
    if op is None:
        raise NotImplementedError(f"condition {c} ({type(c).__name__})")
    return f"({pyexpr(c.lhs, names)} {op} {pyexpr(c.rhs, names)})"


def pyexpr(e, names):
    """A sympy size expression as Python source over the variables in `names`."""
    e = sym.sympify(e)
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return names[e]
    if isinstance(e, sym.Add):
        return "(" + " + ".join(pyexpr(a, names) for a in e.args) + ")"
    if isinstance(e, sym.Mul):
        num, den = sym.fraction(e)
        if den != 1:
            raise NotImplementedError(f"size expression {e} is not an integer")
        return "(" + " * ".join(pyexpr(a, names) for a in e.args) + ")"
    if isinstance(e, CeilDiv):
        return f"(-((-{pyexpr(e.args[0], names)}) // {pyexpr(e.args[1], names)}))"
    if isinstance(e, (sym.floor, sym.ceiling)):
        num, den = sym.numer_denom(e.args[0])
        n, d = pyexpr(num, names), pyexpr(den, names)
        return f"({n} // {d})" if isinstance(e, sym.floor) else f"(-((-{n}) // {d}))"
    if isinstance(e, sym.Mod):
        return f"({pyexpr(e.args[0], names)} % {pyexpr(e.args[1], names)})"
    if isinstance(e, (sym.Min, sym.Max)):
        fn = "min" if isinstance(e, sym.Min) else "max"
        return f"{fn}({', '.join(pyexpr(a, names) for a in e.args)})"
    if isinstance(e, sym.Abs):
        return f"abs({pyexpr(e.args[0], names)})"
    if isinstance(e, sym.Pow) and e.exp.is_Integer and e.exp > 0:       # N*N of a size
        return f"({pyexpr(e.base, names)} ** {int(e.exp)})"
    raise NotImplementedError(f"size expression {e} ({type(e).__name__})")

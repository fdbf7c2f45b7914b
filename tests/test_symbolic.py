"""tex.symbolic (tex's own small algebra of sizes, indices and conditions) checked
against sympy, its former implementation, by differential property-based tests.

Random expressions are built in parallel in tex.symbolic and in sympy (and read by
plain Python ints, a third opinion) and must agree in value at random points where
sizes and indices are >= 0 and the parameter is >= 1. Covered: arithmetic, //, %,
Min, Max, CeilDiv, floor, powers and `expand`; the canonical form (equal polynomials
are equal objects with equal hashes); relations, And, Or, Not, and the decisions taken
when they are built; `numer_denom`; `format_size`'s Python spelling read back by
`sympify` and by Python itself; pickling; `lower_bound` and the sign assumptions.
"""
import ast
import math
import operator
import pickle
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tex.symbolic as ts
from tex.indices import Index, Param, as_size, format_size

sympy = pytest.importorskip("sympy")

NAMES = ("M", "N", "io", "P")
TEX = (ts.Symbol("M", integer=True, nonnegative=True),
       ts.Symbol("N", integer=True, nonnegative=True),
       Index("io"),                                  # a Dummy: a loop index
       Param("P"))                                   # integer, positive
SYMPY = (sympy.Symbol("M", integer=True, nonnegative=True),
         sympy.Symbol("N", integer=True, nonnegative=True),
         sympy.Symbol("io", integer=True, nonnegative=True),
         sympy.Symbol("P", integer=True, positive=True))
LOCALS = dict(zip(NAMES, TEX))

# points: (M, N, io, P), sizes and indices >= 0, the parameter >= 1
point = st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40),
                  st.integers(1, 40))
FIXED_POINTS = [(0, 0, 0, 1), (1, 1, 1, 1), (7, 13, 2, 3), (64, 31, 5, 8), (29, 0, 41, 17)]
points = st.lists(point, min_size=1, max_size=4).map(lambda ps: ps + FIXED_POINTS)

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- expression trees
# A tree is a tuple: ("sym", i), ("int", n), (op, tree, tree) for add/sub/mul/min/max,
# (op, tree, k) for floordiv/mod/ceildiv/floor (a positive int k) and pow (k in 0..3),
# ("neg", tree). Rational trees add ("div", tree, k) (a / k), ("ceiling", tree, k)
# (ceiling(a / k)) and ("pmod", tree) (a % P). `build` makes a tree in tex or in sympy,
# `value` computes it with Python ints and Fractions.
leaves = st.one_of(st.tuples(st.just("sym"), st.integers(0, 3)),
                   st.tuples(st.just("int"), st.integers(-6, 12)))


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max"]), children, children),
        st.tuples(st.sampled_from(["floordiv", "mod", "ceildiv", "floor"]), children,
                  st.integers(1, 9)),
        st.tuples(st.just("pow"), children, st.integers(0, 3)),
        st.tuples(st.just("neg"), children))


trees = st.recursive(leaves, _extend, max_leaves=8)


def _extend_rational(children):
    return st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max"]), children, children),
        st.tuples(st.sampled_from(["div", "div", "floor", "ceiling", "mod"]), children,
                  st.integers(1, 7)),
        st.tuples(st.just("pmod"), children),
        st.tuples(st.just("pow"), children, st.integers(0, 2)))


rational_trees = st.recursive(leaves, _extend_rational, max_leaves=10)


def build(t, lib):
    tex = lib == "tex"
    kind = t[0]
    if kind == "sym":
        return (TEX if tex else SYMPY)[t[1]]
    if kind == "int":
        return ts.Integer(t[1]) if tex else sympy.Integer(t[1])
    a = build(t[1], lib)
    if kind == "neg":
        return -a
    if kind == "pmod":
        return (ts.Mod if tex else sympy.Mod)(a, (TEX if tex else SYMPY)[3])
    if kind in ("add", "sub", "mul", "min", "max"):
        b = build(t[2], lib)
        if kind == "add":
            return a + b
        if kind == "sub":
            return a - b
        if kind == "mul":
            return a * b
        if tex:
            return (ts.Min if kind == "min" else ts.Max)(a, b)
        return (sympy.Min if kind == "min" else sympy.Max)(a, b)
    k = t[2]
    if kind == "pow":
        return a ** k
    if kind == "div":
        return a / k
    if tex:
        return {"floordiv": lambda: a // k, "mod": lambda: ts.Mod(a, k),
                "ceildiv": lambda: ts.CeilDiv(a, k), "floor": lambda: ts.floor(a / k),
                "ceiling": lambda: ts.ceiling(a / k)}[kind]()
    return {"floordiv": lambda: a // k, "mod": lambda: sympy.Mod(a, k),
            "ceildiv": lambda: sympy.ceiling(a / k), "floor": lambda: sympy.floor(a / k),
            "ceiling": lambda: sympy.ceiling(a / k)}[kind]()


def value(t, at):
    """The tree's value with Python ints (Fractions below a "div"); `at` gives the
    symbols' values."""
    kind = t[0]
    if kind == "sym":
        return at[t[1]]
    if kind == "int":
        return t[1]
    a = value(t[1], at)
    if kind == "neg":
        return -a
    if kind == "pmod":
        return a % at[3]
    if kind in ("add", "sub", "mul", "min", "max"):
        b = value(t[2], at)
        return {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                "min": min, "max": max}[kind](a, b)
    k = t[2]
    return {"pow": lambda: a ** k, "floordiv": lambda: a // k, "floor": lambda: a // k,
            "mod": lambda: a % k, "ceildiv": lambda: -(-a // k),
            "ceiling": lambda: -(-a // k), "div": lambda: Fraction(a, k)}[kind]()


SYMPY_WRONG = []     # (what, sympy's value, the right value): sympy's own mistakes


def check_value(got, sympy_value, want, what):
    """tex's value `got` must be the true value `want`, which sympy's should be too.
    sympy is the oracle where it agrees with plain Python: sympy 1.14 is itself wrong
    on rare shapes (it simplifies Mod(2*Mod(M, 3), 3) to 2*Mod(M, 3), and floor(x/6)
    to x/6 for x = (-2*M - 2*io)*ceiling(N/4 + 5/4)), which go to SYMPY_WRONG."""
    if sympy_value != want:
        SYMPY_WRONG.append((what, sympy_value, want))
    assert got == want, f"{what}: tex gives {got}, sympy {sympy_value}, Python {want}"


def at_tex(e, at):
    """e with every symbol replaced by its value at the point."""
    return e.xreplace({s: ts.Integer(v) for s, v in zip(TEX, at)})


def at_sympy(e, at):
    return e.xreplace({s: sympy.Integer(v) for s, v in zip(SYMPY, at)})


def number(e, at):
    """The value of a tex expression at a point, as a Python int or Fraction."""
    v = at_tex(e, at)
    assert v.is_Number and not v.is_Float, f"{e} at {at} gave {v}, not a number"
    return v.value


class _ExactLiterals(ast.NodeTransformer):
    def visit_Constant(self, node):
        if type(node.value) is int:
            return ast.copy_location(
                ast.Call(ast.Name("Fraction", ast.Load()), [node], []), node)
        return node


def python_value(text, at):
    """`text` (format_size's Python spelling) evaluated by Python itself, names and
    integer literals read as exact Fractions (so `/` is exact, `1/3` too, and `//`,
    `%`, `ceil` are integer)."""
    tree = ast.fix_missing_locations(_ExactLiterals().visit(ast.parse(text, mode="eval")))
    env = {n: Fraction(v) for n, v in zip(NAMES, at)}
    env.update(min=min, max=max, ceil=math.ceil, floor=math.floor, Fraction=Fraction)
    return eval(compile(tree, "<format_size>", "eval"), {"__builtins__": {}}, env)


# ---------------------------------------------------------------- 1. values
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, points)
def test_values_agree_with_sympy(tree, at):
    e, s = build(tree, "tex"), build(tree, "sympy")
    assert e.free_symbols <= set(TEX)
    x = ts.expand(e)
    assert x.free_symbols <= e.free_symbols
    for p in at:
        want, where = value(tree, p), dict(zip(NAMES, p))
        sv = at_sympy(s, p)
        check_value(number(e, p), sv, want, f"{e} at {where}")
        check_value(number(x, p), sv, want, f"expand({e}) = {x} at {where}")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rational_trees, points)
def test_rational_values_agree_with_sympy(tree, at):
    """Also fractions: floor and ceiling of sums with rational coefficients (whose
    integer terms they take out), Mod of those and by a symbol, Min and Max of them;
    the assumptions and lower_bound; and format_size's text read back."""
    e, s = build(tree, "tex"), build(tree, "sympy")
    assert e.free_symbols <= set(TEX)
    x = ts.expand(e)
    low = ts.lower_bound(e)
    for p in at:
        want, where = value(tree, p), dict(zip(NAMES, p))
        sv = at_sympy(s, p)
        sv = Fraction(int(sv.p), int(sv.q))
        check_value(number(e, p), sv, want, f"{e} at {where}")
        check_value(number(x, p), sv, want, f"expand({e}) = {x} at {where}")
        if low is not None:
            assert low <= want, f"lower_bound({e}) = {low}, value {want} at {where}"
        if e.is_integer:
            assert Fraction(want).denominator == 1, (e, where)
        if e.is_nonnegative:
            assert want >= 0, (e, where)
        if e.is_positive:
            assert want > 0, (e, where)
        if e.is_negative:
            assert want < 0, (e, where)
    _read_back(e, at)


@FAST
@given(trees, points)
def test_assumptions_and_lower_bound_hold(tree, at):
    """is_integer, is_nonnegative, is_positive, is_negative and lower_bound (which
    decide Min, Max and relations when they are built) are never wrong."""
    e = build(tree, "tex")
    assert e.is_integer is True
    low = ts.lower_bound(e)
    for p in at:
        v = number(e, p)
        if e.is_nonnegative:
            assert v >= 0, e
        if e.is_positive:
            assert v > 0, e
        if e.is_negative:
            assert v < 0, e
        if low is not None:
            assert low <= v, f"lower_bound({e}) = {low}, value {v} at {p}"


@FAST
@given(trees, points, st.data())
def test_partial_substitution(tree, at, data):
    """Replacing some symbols by numbers, or by non-negative affine expressions of the
    others, and then the rest, gives the value at the combined point (rebuilding through
    the constructors simplifies soundly when arguments become partly known)."""
    e = build(tree, "tex")
    which = data.draw(st.sets(st.integers(0, 3), min_size=1, max_size=2))
    coef = data.draw(st.tuples(st.integers(0, 8), st.integers(0, 3)))
    for p in at:
        numeric = e.xreplace({TEX[i]: ts.Integer(p[i]) for i in which})
        assert number(numeric, p) == number(e, p)
    # M -> coef[0]*io + N + coef[1] (non-negative, as M is)
    M, N, io, _ = TEX
    moved = e.xreplace({M: coef[0] * io + N + coef[1]})
    for p in at:
        q = (coef[0] * p[2] + p[1] + coef[1],) + p[1:]
        assert number(moved, p) == number(e, q)


# ---------------------------------------------------------------- 2. canonical form
def _from_sympy(s, atoms, shuffle):
    """A sympy polynomial rebuilt in tex, its sums and products in a random order."""
    if s.is_Symbol:
        return atoms[s.name]
    if s.is_Integer:
        return ts.Integer(int(s))
    args = [_from_sympy(a, atoms, shuffle) for a in s.args]
    if s.is_Pow:
        return args[0] ** args[1]
    shuffle(args)
    if s.is_Add:
        return ts.Add(*args) if len(args) % 2 else sum(args, ts.Integer(0))
    if s.is_Mul:
        return ts.Mul(*args) if len(args) % 2 else math.prod(args)
    raise AssertionError(s)


# polynomial trees over the symbols and three functions of them (as opaque atoms)
OPAQUE = {"f0": lambda M, N, io, P: ts.floor(M / 2), "f1": lambda M, N, io, P: ts.Mod(N, 3),
          "f2": lambda M, N, io, P: ts.Min(io, P)}
poly_leaves = st.one_of(st.tuples(st.just("sym"), st.integers(0, 6)),
                        st.tuples(st.just("int"), st.integers(-4, 6)))
poly_trees = st.recursive(
    poly_leaves,
    lambda ch: st.one_of(st.tuples(st.sampled_from(["add", "sub", "mul"]), ch, ch),
                         st.tuples(st.just("pow"), ch, st.integers(0, 3))),
    max_leaves=7)


def build_poly(t, atoms):
    kind = t[0]
    if kind == "sym":
        return atoms[t[1]]
    if kind == "int":
        return sympy.Integer(t[1]) if isinstance(atoms[0], sympy.Basic) else ts.Integer(t[1])
    a = build_poly(t[1], atoms)
    if kind == "pow":
        return a ** t[2]
    b = build_poly(t[2], atoms)
    return {"add": operator.add, "sub": operator.sub, "mul": operator.mul}[kind](a, b)


TEX_ATOMS = list(TEX) + [f(*TEX) for f in OPAQUE.values()]
SYMPY_ATOMS = list(SYMPY) + [sympy.Symbol(n) for n in OPAQUE]
BY_NAME = dict(zip(NAMES + tuple(OPAQUE), TEX_ATOMS))


@FAST
@given(poly_trees, st.randoms(use_true_random=False))
def test_canonical_form(tree, rnd):
    """Two spellings of one polynomial (as built, and sympy's expansion rebuilt with
    its terms and factors permuted) are == with equal hashes after `expand`."""
    e = ts.expand(build_poly(tree, TEX_ATOMS))
    s = sympy.expand(build_poly(tree, SYMPY_ATOMS))
    other = ts.expand(_from_sympy(s, BY_NAME, rnd.shuffle))
    assert e == other and hash(e) == hash(other), (e, other)
    assert ts.expand(e) == e                                      # idempotent
    assert build_poly(tree, TEX_ATOMS) == build_poly(tree, TEX_ATOMS)   # deterministic
    if e.is_Number:
        assert e == int(s) and hash(e) == hash(int(s))


PLAIN_ATOMS = list(TEX) + [ts.Symbol(n, integer=True) for n in OPAQUE]


@FAST
@given(poly_trees)
def test_coeff(tree):
    """`e.coeff(x)`, the coefficient of x**1 in the expanded sum (affine_terms reads
    index expressions with it), is sympy's."""
    e = ts.expand(build_poly(tree, PLAIN_ATOMS))
    s = sympy.expand(build_poly(tree, SYMPY_ATOMS))
    atoms = dict(zip(NAMES + tuple(OPAQUE), PLAIN_ATOMS))
    for x, sx in zip(PLAIN_ATOMS, SYMPY_ATOMS):
        assert e.coeff(x) == ts.expand(_from_sympy(s.coeff(sx), atoms, lambda args: None)), \
            (e, x, e.coeff(x), s.coeff(sx))


@FAST
@given(trees, trees, trees)
def test_sums_and_products_commute(t1, t2, t3):
    """Sums and products are flat and unordered even before `expand`."""
    a, b, c = (build(t, "tex") for t in (t1, t2, t3))
    assert a + b == b + a and hash(a + b) == hash(b + a)
    assert a * b == b * a and hash(a * b) == hash(b * a)
    assert (a + b) + c == a + (b + c) == ts.Add(c, b, a)
    assert ts.expand((a * b) * c) == ts.expand(a * (b * c))
    assert a - a == 0 and (a + b) - b == a
    for f in (ts.Min, ts.Max):
        assert f(a, b) == f(b, a) and hash(f(a, b)) == hash(f(b, a))
        assert f(a, b, c) == f(c, b, a) == f(b, f(a, c)), (f(a, b, c), f(c, b, a))


def test_canonical_examples():
    M, N, io, P = TEX
    assert 2 * (M + 1) == 2 * M + 2 and hash(2 * (M + 1)) == hash(2 * M + 2)
    assert ts.expand((M + N) * P) == M * P + N * P == P * N + P * M
    assert ts.expand((M + 1) ** 2) == M ** 2 + 2 * M + 1
    assert ts.expand((M - N) * (M + N)) == M ** 2 - N ** 2
    assert M * N * 3 == 3 * N * M and M + N + 1 == 1 + N + M
    assert (M + N) - N == M and M * M == M ** 2 and M ** 2 / M == M
    assert ts.Integer(3) == 3 and 3 == ts.Integer(3) and hash(ts.Integer(3)) == hash(3)
    assert ts.Integer(-7) == -7 and hash(ts.Integer(-7)) == hash(-7)
    assert ts.Integer(12345678901) == 12345678901
    assert hash(ts.Integer(12345678901)) == hash(12345678901)
    assert {3: "x"}[ts.Integer(3)] == "x" and ts.Integer(3) in {3}
    assert ts.Rational(6, 4) == Fraction(3, 2) and hash(ts.Rational(6, 4)) == hash(Fraction(3, 2))
    assert ts.Rational(8, 4).is_Integer and ts.Rational(8, 4) == 2
    assert ts.Integer(3) != 4 and ts.Integer(3) != M


def test_same_name_different_assumptions_commute():
    # `sympify("M + 1")` without locals makes Symbol("M", integer=True), not the size
    m_int = ts.Symbol("M", integer=True)
    m_size = TEX[0]
    assert m_int + m_size == m_size + m_int
    assert m_int * m_size == m_size * m_int


# ---------------------------------------------------------------- 3. relations
# affine expressions of the symbols and of a few non-negative integer functions of them
ATOM_TREES = [("sym", 0), ("sym", 1), ("sym", 2), ("sym", 3),
              ("floordiv", ("sym", 0), 4), ("mod", ("sym", 1), 3),
              ("min", ("sym", 0), ("sym", 2)), ("ceildiv", ("sym", 1), 8),
              ("max", ("sub", ("sym", 0), ("int", 5)), ("sym", 3))]
affine_trees = st.builds(     # (d, terms): the sum of the terms over d (mostly 1)
    lambda d, terms, c: (d, (("int", c),) + tuple(("mul", ("int", k), ATOM_TREES[i])
                                                   for k, i in terms)),
    st.sampled_from([1, 1, 1, 1, 2, 3, 4]),
    st.lists(st.tuples(st.integers(-3, 3), st.integers(0, len(ATOM_TREES) - 1)),
             max_size=3),
    st.integers(-6, 6))


def build_affine(affine, lib):
    d, terms = affine
    out = build(terms[0], lib)
    for t in terms[1:]:
        out = out + build(t, lib)
    return out if d == 1 else out / d


def affine_value(affine, at):
    d, terms = affine
    return Fraction(sum(value(t, at) for t in terms), d)


RELATIONS = [(ts.StrictLessThan, sympy.StrictLessThan, operator.lt, operator.lt),
             (ts.LessThan, sympy.LessThan, operator.le, operator.le),
             (ts.StrictGreaterThan, sympy.StrictGreaterThan, operator.gt, operator.gt),
             (ts.GreaterThan, sympy.GreaterThan, operator.ge, operator.ge),
             (ts.Equality, sympy.Eq, operator.eq, None),
             (ts.Unequality, sympy.Ne, operator.ne, None)]
relation = st.tuples(st.integers(0, len(RELATIONS) - 1), affine_trees, affine_trees)


def build_relation(r, lib):
    cls, scls, _, _ = RELATIONS[r[0]]
    return (cls if lib == "tex" else scls)(build_affine(r[1], lib), build_affine(r[2], lib))


def relation_value(r, at):
    return RELATIONS[r[0]][2](affine_value(r[1], at), affine_value(r[2], at))


def truth(c, at):
    v = at_tex(c, at)
    assert v in (ts.true, ts.false), f"{c} at {at} gave {v}"
    return bool(v)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(relation, points)
def test_relations(r, at):
    """A relation decided when built (true/false) holds (fails) at every point; one
    kept holds where its sides say so, as sympy's does; Not is its negation."""
    rel, srel = build_relation(r, "tex"), build_relation(r, "sympy")
    a, b = build_affine(r[1], "tex"), build_affine(r[2], "tex")
    op = RELATIONS[r[0]][3]
    if op is not None:                         # Python's operators make the same relation
        assert op(a, b) == rel
    if rel not in (ts.true, ts.false):
        assert isinstance(rel, RELATIONS[r[0]][0]) and rel.args == (a, b)
        assert rel.free_symbols <= set(TEX)
    neg = ts.Not(rel)
    assert ts.Not(neg) == rel
    for p in at:
        want = relation_value(r, p)
        check_value(truth(rel, p), bool(at_sympy(srel, p)), want, f"{rel} at {p}")
        if rel in (ts.true, ts.false):
            assert bool(rel) == want, f"{rel} decided for {a} vs {b}, wrong at {p}"
        assert truth(neg, p) == (not want), (neg, p)


@FAST
@given(st.lists(relation, min_size=1, max_size=3), points)
def test_and_or_not(rs, at):
    rels = [build_relation(r, "tex") for r in rs]
    both, either = ts.And(*rels), ts.Or(*rels)
    assert both == ts.And(*reversed(rels)) and either == ts.Or(*reversed(rels))
    assert hash(both) == hash(ts.And(*reversed(rels)))
    for p in at:
        values = [relation_value(r, p) for r in rs]
        assert truth(both, p) == all(values)
        assert truth(either, p) == any(values)
        assert truth(ts.Not(both), p) == (not all(values))
        assert truth(ts.Not(either), p) == (not any(values))
        assert truth(rels[0] & ~either, p) == (values[0] and not any(values))


# ---------------------------------------------------------------- 4. numer_denom
# sums of rational multiples of monomials: M/8 + N/6 + 1
monomial = st.lists(st.integers(0, 3), max_size=2)
rational_sums = st.lists(st.tuples(st.integers(-20, 20), st.integers(1, 12), monomial),
                         min_size=1, max_size=4)


def build_rational_sum(terms, lib, dens=None):
    """sum of p/q * monomial (/ a symbolic denominator from `dens`, when given)."""
    syms = TEX if lib == "tex" else SYMPY
    R = ts.Rational if lib == "tex" else sympy.Rational
    out = R(0)
    for n, (p, q, mono) in enumerate(terms):
        t = R(p, q)
        for i in mono:
            t = t * syms[i]
        if dens is not None:
            t = t / dens[n % len(dens)](*syms)
        out = out + t
    return out


def _no_fractions(e):
    return all(not (n.is_Number and not n.is_Integer) for n in ts.preorder_traversal(e))


@FAST
@given(rational_sums, points)
def test_numer_denom(terms, at):
    e = build_rational_sum(terms, "tex")
    num, den = ts.numer_denom(e)
    assert den.is_Integer and den.value > 0, (e, den)
    assert _no_fractions(num), (e, num)
    assert math.lcm(1, *(Fraction(p, q).denominator for p, q, _ in terms)) % den.value == 0
    snum, sden = sympy.fraction(sympy.together(build_rational_sum(terms, "sympy")))
    for p in at:
        want = at_sympy(snum, p) / at_sympy(sden, p)
        assert Fraction(int(want.p), int(want.q)) == number(e, p)
        assert Fraction(number(num, p), den.value) == number(e, p), (e, num, den, p)


# symbolic denominators: products of distinct positive parameters, times an integer
Q = Param("Q")
MONOMIAL_DENS = [lambda P: P, lambda P: Q, lambda P: P * Q, lambda P: 2 * P,
                 lambda P: 3 * Q, lambda P: 6 * P * Q, lambda P: 1]


@FAST
@given(rational_sums, st.lists(st.sampled_from(MONOMIAL_DENS), min_size=1, max_size=3),
       points, st.integers(1, 9))
def test_numer_denom_symbolic_denominators(terms, dens, at, q):
    e = build_rational_sum(terms, "tex", [lambda M, N, io, P, d=d: d(P) for d in dens])
    num, den = ts.numer_denom(e)
    assert _no_fractions(num) and _no_fractions(den), (e, num, den)
    for p in at:
        val = {Q: ts.Integer(q)}
        n, d, v = (number(x.xreplace(val), p) for x in (num, den, e))
        assert Fraction(n, d) == v, (e, num, den, p, q)


def _numer_denom_value(e, at):
    num, den = ts.numer_denom(e)
    return Fraction(number(num, at), number(den, at))


def test_numer_denom_powers_of_one_base():
    P = TEX[3]
    for v in (1, 2, 3):
        assert _numer_denom_value(1 / P ** 2 + 1 / P, (0, 0, 0, v)) == Fraction(v + 1, v * v)


def test_numer_denom_sum_in_denominator():
    M = TEX[0]
    for v in (0, 1, 5):
        assert _numer_denom_value(1 / (M + 1) + ts.Rational(1, 2), (v, 0, 0, 1)) == \
            Fraction(v + 3, 2 * v + 2)


def test_format_size_of_floor_with_sum_denominator():
    M, N, io, P = TEX
    _read_back(ts.floor(M / 2 + 1 / (P + 1)), [(3, 0, 0, 1), (7, 0, 0, 2)])


def test_numer_denom_fractions_inside_powers():
    M = TEX[0]
    for e in ((M / 2 + 1) ** 2, 1 / (M / 2 + 1)):
        num, den = ts.numer_denom(e)
        assert _no_fractions(num) and _no_fractions(den), (e, num, den)


def test_floor_hint_of_sum_denominator():
    M = TEX[0]
    with pytest.raises(ValueError) as info:
        as_size(M / (M + 1) + ts.Rational(1, 2), "x")
    assert "M*(2*M + 2)" not in str(info.value)


def test_numer_denom_examples():
    M, N, io, P = TEX
    assert ts.numer_denom(M / 8 + N / 6 + 1) == (3 * M + 4 * N + 24, 24)
    assert ts.numer_denom(N / 8 + 1) == (N + 8, 8)
    assert ts.numer_denom(M / P) == (M, P)
    assert ts.numer_denom(ts.Rational(-3, 4)) == (-3, 4)
    assert ts.numer_denom(M + 1) == (M + 1, 1)


# ---------------------------------------------------------------- 5. format_size
def _read_back(e, at):
    text = format_size(e)
    back = ts.sympify(text, locals=LOCALS)
    assert back.free_symbols <= set(TEX), (text, back)
    for p in at:
        want = at_tex(e, p)
        assert at_tex(back, p) == want, f"{e!s} printed {text!r}, read {back!s}, at {p}"
        assert python_value(text, p) == (want.value if want.is_Number else bool(want)), \
            f"{e!s} printed {text!r}: Python reads another value at {p}"
    return text, back


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, points)
def test_format_size_round_trip(tree, at):
    e = build(tree, "tex")
    text, back = _read_back(e, at)
    if not any(isinstance(n, ts.CeilDiv) for n in ts.preorder_traversal(e)):
        # (ceil(a/b) reads back as ceiling(a/b), not CeilDiv(a, b))
        assert ts.expand(back) == ts.expand(e), (text, back)


@FAST
@given(rational_sums, points)
def test_format_size_round_trip_rational(terms, at):
    _read_back(build_rational_sum(terms, "tex"), at)


@FAST
@given(st.lists(relation, min_size=1, max_size=3), st.integers(0, 4), points)
def test_format_size_round_trip_conditions(rs, how, at):
    rels = [build_relation(r, "tex") for r in rs]
    # also relations with 0 on the right (M - N - 1 >= 0): format_size moves terms over
    rels += [type(c)(c.lhs - c.rhs, 0) for c in rels if c.is_Relational]
    c = [ts.And(*rels), ts.Or(*rels), ts.Not(ts.And(*rels)), ts.Not(ts.Or(*rels)),
         ts.Or(ts.And(*rels[:2]), *rels[2:])][how]
    _read_back(c, at)


def test_format_size_examples():
    M, N, io, P = TEX
    K = ts.Symbol("K", integer=True, nonnegative=True)
    cases = [(M - 8 * io, "M - 8*io"),
             (1024 - 48 * io, "1024 - 48*io"),
             (M - N + 1, "M - N + 1"),
             (M // 2, "M // 2"),
             (N % 4, "N % 4"),
             ((M + 1) // 8, "(M + 1) // 8"),
             ((M - 1) % 4, "(M + 3) % 4"),
             (3 * (N // 4), "3*(N // 4)"),
             (-(N // 2), "-(N // 2)"),
             (io + N // 2, "io + N // 2"),
             (ts.Min(64, N - 64 * io), "min(64, N - 64*io)"),
             (ts.Max(M, N) - 1, "max(M, N) - 1"),
             (ts.CeilDiv(N, 64), "ceil(N/64)"),
             (ts.CeilDiv(M + N, 8), "ceil((M + N)/8)"),
             (M / 8 + N / 6 + 1, "M/8 + N/6 + 1"),
             (ts.floor((M + N) / 3), "(M + N) // 3"),
             ((M // 2) // 3, "(M // 2) // 3"),
             (ts.Eq(M, 1), "M == 1"),
             (ts.Ne(M, N), "M != N"),
             (ts.And(M >= 6, N >= 32), "M >= 6 and N >= 32"),
             (ts.Not(ts.And(M >= 6, N >= 32)), "not (M >= 6 and N >= 32)"),
             (ts.Or(ts.And(M >= 6, N >= 32), ts.Eq(K, 1)), "K == 1 or (M >= 6 and N >= 32)"),
             (ts.GreaterThan(M - io - 8 * N - 1, 0), "8*N + io < M"),
             (ts.LessThan(M - N, 0), "N >= M"),
             (ts.StrictGreaterThan(P - io + 1, 0), "io <= P"),
             (ts.StrictLessThan(P, M + 1), "P < M + 1"),
             (ts.Not(P < M), "P >= M"),
             (ts.Or(M < 2, ts.And(N > 1, P > 3), ts.Eq(io, 0)),
              "io == 0 or M < 2 or (N > 1 and P > 3)"),
             (3 * M % 4, "(3*M) % 4"),
             (ts.Mod(-M, 4), "(3*M) % 4"),
             ((3 * M) // 4, "(3*M) // 4"),
             (-M // 2, "(-M) // 2"),
             (M ** 2 // 3, "M**2 // 3"),
             ((M // 2) ** 2, "(M // 2)**2"),
             (2 * M / 3, "2*M/3"),
             (-M / 2 + N, "N - M/2"),
             (M - ts.Min(M, N), "M - min(M, N)"),
             (ts.CeilDiv(M, 4) * 2, "2*ceil(M/4)"),
             (M * (N + 1), "M*(N + 1)")]
    for e, text in cases:
        assert format_size(e) == text, (e, format_size(e), text)


def test_str_is_sympy_spelling():
    M, N, io, P = TEX
    assert str(M // 2) == "floor(M/2)" and str(N % 4) == "Mod(N, 4)"
    assert str(ts.Min(64, N - 64 * io)) == "Min(64, N - 64*io)"
    assert str(ts.CeilDiv(N, 64)) == "ceiling(N/64)"
    assert str(ts.Eq(M, 1)) == "Eq(M, 1)"
    assert str(ts.And(M >= 6, N >= 32)) == "(M >= 6) & (N >= 32)"
    for e in (M // 2, N % 4, ts.Min(64, N - 64 * io), ts.Eq(M, 1), ts.And(M >= 6, N >= 32)):
        assert ts.sympify(str(e), locals=LOCALS) == e


# ---------------------------------------------------------------- 6. pickle, lower_bound
@FAST
@given(trees, relation, st.lists(relation, min_size=2, max_size=3))
def test_pickle_round_trip(tree, r, rs):
    rels = [build_relation(x, "tex") for x in rs]
    for obj in (build(tree, "tex"), ts.expand(build(tree, "tex")), build_relation(r, "tex"),
                ts.Not(build_relation(r, "tex")), ts.And(*rels), ts.Or(*rels)):
        for protocol in (2, pickle.HIGHEST_PROTOCOL):
            back = pickle.loads(pickle.dumps(obj, protocol))
            assert back == obj and hash(back) == hash(obj), (obj, back)
            assert type(back) is type(obj)


def test_pickle_symbols_and_numbers():
    for obj in TEX + (ts.Integer(7), ts.Rational(-3, 4), ts.Float(2.5), ts.true, ts.false,
                      ts.Dummy("d"), ts.Symbol("x")):
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj and type(back) is type(obj)
        if isinstance(obj, ts.Symbol):
            assert back.is_nonnegative == obj.is_nonnegative
            assert back.is_positive == obj.is_positive


@FAST
@given(affine_trees, points)
def test_lower_bound_of_affine(terms, at):
    e = build_affine(terms, "tex")
    low = ts.lower_bound(e)
    if low is not None:
        for p in at:
            assert low <= affine_value(terms, p), (e, low, p)


def test_abs_and_math_floor_ceil_of_sizes():
    """`abs`, `math.floor` and `math.ceil` of size expressions, as a numpy user writes
    them, give the integer functions (and read back from their text)."""
    M, N, io, P = TEX
    assert abs(N + 1) == N + 1 and abs(-3 - N) == N + 3 and abs(ts.Integer(-4)) == 4
    assert format_size(abs(N - M)) == "abs(N - M)"
    assert math.ceil(N / 64) == ts.ceiling(N / 64) and math.floor(N / 2) == N // 2
    for e in (abs(N - M), math.ceil(N / 64), math.floor((N + M) / 3)):
        back = ts.sympify(format_size(e), locals=LOCALS)
        for at in FIXED_POINTS:
            values = {s: ts.Integer(v) for s, v in zip(TEX, at)}
            assert back.xreplace(values) == e.xreplace(values), (e, at)
    with pytest.raises(ValueError, match="not affine"):
        i, j = Index("i"), Index("j")
        from tex.indices import affine_terms
        affine_terms(abs(i - j), "X")

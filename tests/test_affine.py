"""The cheap arithmetic of tile extents (tex/indices.py): `lower_bound`, `Min`, `less`,
`at_least` decide comparisons without an assumption system. Each must never
decide wrongly: checked against the values at random non-negative sizes and indices
(and a positive parameter), where every undecided answer must still evaluate right."""
import itertools

import tex.symbolic as sp
from hypothesis import given, settings, strategies as st

import tex
from tex.indices import CeilDiv, Index, Min, at_least, less, lower_bound

N, K = tex.sizes("N K")
io, ii = Index("io"), Index("ii")
P = tex.param("P")                                  # positive
SYMBOLS = (N, K, io, ii, P)


@st.composite
def affine(draw, depth=0):
    """An integer expression as tiles make them: sums of small multiples of sizes and
    indices, a ceiling quotient, a Min."""
    terms = [draw(st.integers(-8, 8))]
    for s in draw(st.lists(st.sampled_from(SYMBOLS), max_size=3)):
        terms.append(draw(st.integers(-3, 3)) * s)
    e = sp.Add(*terms)
    if depth < 1 and draw(st.booleans()):
        other = draw(affine(depth + 1))
        e = draw(st.sampled_from([CeilDiv(sp.Max(e, -e), draw(st.integers(1, 5))) + other,
                                  Min(e, other), draw(st.integers(1, 3)) * (e + other),
                                  # factors that may be negative: a size times a quotient
                                  # or a Min of an expression that may be
                                  draw(st.sampled_from(SYMBOLS)) * CeilDiv(
                                      e, draw(st.integers(1, 5))),
                                  draw(st.sampled_from(SYMBOLS)) * Min(e, other)]))
    return e


def assignments(*exprs, count=40):
    """Values of the symbols in `exprs` (the parameter at least 1), small ones first."""
    syms = sorted(set().union(*(sp.sympify(e).free_symbols for e in exprs)),
                  key=lambda s: s.name)
    grid = itertools.product(range(0, 4), repeat=len(syms))
    values = [dict(zip(syms, v)) for v in itertools.islice(grid, count)]
    values += [{s: 37 * (n + 1) for n, s in enumerate(syms)}]
    for v in values:
        for s in v:
            if s is P:
                v[s] = max(v[s], 1)
    return values


def value(e, at):
    return sp.sympify(e).xreplace({s: sp.Integer(v) for s, v in at.items()})


@settings(max_examples=300, deadline=None)
@given(affine())
def test_lower_bound_is_a_lower_bound(e):
    low = lower_bound(e)
    if low is not None:
        for at in assignments(e):
            assert value(e, at) >= low, (e, at, low)


@settings(max_examples=300, deadline=None)
@given(affine(), affine(), affine())
def test_min_is_the_least_of_its_arguments(a, b, c):
    m = Min(a, b, c)
    for at in assignments(a, b, c):
        assert value(m, at) == min(value(a, at), value(b, at), value(c, at)), (m, at)


@settings(max_examples=300, deadline=None)
@given(affine(), affine())
def test_relations_decide_only_what_holds_everywhere(a, b):
    for strict in (True, False):
        r = less(a, b, strict)
        for at in assignments(a, b):
            want = value(a, at) < value(b, at) if strict else value(a, at) <= value(b, at)
            assert bool(value(r, at)) == bool(want), (a, b, strict, r, at)
    r = at_least(a, b)
    for at in assignments(a, b):
        assert bool(value(r, at)) == bool(value(a, at) >= value(b, at)), (a, b, r, at)


def test_tile_extents_fold():
    """The folds the schedules rely on: numbers, a tail shorter than its tile (5 rows
    split by 8), a tile against a parameter, nested Mins, equal arguments."""
    assert Min(8, 5) == 5
    assert Min(8, 5 - 8 * io) == 5 - 8 * io
    assert Min(1, P) == 1
    assert Min(Min(8, N - 8 * io), 8) == Min(8, N - 8 * io)
    assert isinstance(Min(8, N - 8 * io), sp.Min) and len(Min(8, N - 8 * io).args) == 2
    assert Min(N, N) == N
    assert less(io, io + 1) is sp.true and less(io + 1, io) is sp.false
    assert at_least(CeilDiv(N, 4), 0) is sp.true
    assert isinstance(less(8 * io + ii, N), sp.StrictLessThan)
    # rebuilding a tail keeps the class (and so stays cheap), and substitution folds
    tail = Min(8, N - 8 * io)
    assert type(tail.xreplace({io: io + 1})) is Min
    assert tail.xreplace({N: sp.Integer(20), io: sp.Integer(2)}) == 4
    # a product is bounded only when no factor's bound is negative (the review's cases)
    assert lower_bound(K * CeilDiv(N - 5, 2)) is None
    assert less(K * CeilDiv(N - 5, 2), 0) not in (sp.true, sp.false)
    assert at_least(ii * Min(3, N - 1), 0) not in (sp.true, sp.false)
    assert lower_bound(3 * CeilDiv(N - 5, 2)) == -6      # one factor: c times its bound

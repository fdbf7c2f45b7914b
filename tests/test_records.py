"""tex.records.record behaves as dataclass(frozen=True): each test builds the same class
both ways and compares what a caller sees."""
import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from tex.records import record


def both(body, **options):
    """The class `body` made by dataclass(frozen=True, **options) and by record(**options)."""
    made = []
    for decorate in (lambda c: dataclass(frozen=True, **options)(c),
                     lambda c: record(**options)(c)):
        namespace = {}
        exec(body, {"field": field, "decorate": decorate}, namespace)   # noqa: S102
        made.append(namespace["Point"])
    return made


POINT = '''
@decorate
class Point:
    x: int
    y: int = 2
    tags: list = field(default_factory=list)
    note: str = field(default="n", compare=False)
'''


@pytest.mark.parametrize("eq", [True, False])
def test_a_record_is_made_called_and_compared_as_a_frozen_dataclass(eq):
    reference, fast = both(POINT, eq=eq)
    for cls in (reference, fast):
        assert dataclasses.is_dataclass(cls)
        assert [f.name for f in dataclasses.fields(cls)] == ["x", "y", "tags", "note"]
    for args, kwargs in [((1,), {}), ((1, 5), {}), ((1,), {"tags": [3]}), ((), {"x": 0, "note": "m"})]:
        a, b = reference(*args, **kwargs), fast(*args, **kwargs)
        assert repr(a).replace("Point", "P") == repr(b).replace("Point", "P")
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        twin_a, twin_b = reference(*args, **kwargs), fast(*args, **kwargs)
        assert (a == twin_a) == (b == twin_b) == eq
        assert (a == 1) is (b == 1) is False
    assert fast(1).tags is not fast(1).tags         # a new list for each record
    # the note is not compared: equal with a different note
    assert (fast(1, note="a") == fast(1, note="b")) is eq
    with pytest.raises(TypeError):
        fast()                                      # x has no default
    with pytest.raises(TypeError):
        fast(1, 2, [], "n", 5)


def test_hashes_follow_the_compared_fields_and_eq_false_keeps_identity():
    _, fast = both("@decorate\nclass Point:\n    x: int\n    y: tuple = ()\n")
    assert hash(fast(1, (2,))) == hash(fast(1, (2,)))
    assert len({fast(1), fast(1), fast(2)}) == 2
    _, by_identity = both("@decorate\nclass Point:\n    x: int\n", eq=False)
    a, b = by_identity(1), by_identity(1)
    assert a != b and a == a and len({a, b}) == 2


def test_fields_cannot_be_assigned_or_deleted_and_replace_makes_a_new_record():
    _, fast = both(POINT)
    p = fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.other = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x
    q = dataclasses.replace(p, y=7)
    assert (q.x, q.y, p.y) == (1, 7, 2)
    assert copy.deepcopy(q) == q
    assert pickle.loads(pickle.dumps(Pickled(4, (5,)))) == Pickled(4, (5,))


@record
class Pickled:
    n: int
    rest: tuple = ()


def test_a_subclass_adds_fields_and_methods_the_body_defines_are_kept():
    @record(eq=False)
    class Base:
        a: int

        def __repr__(self):
            return f"Base<{self.a}>"

    @record(eq=False)
    class Child(Base):
        b: str = "x"

    c = Child(1)
    # as dataclass does: the class's own __repr__ is kept, a subclass gets a generated one
    assert (c.a, c.b) == (1, "x") and repr(Base(1)) == "Base<1>"
    assert repr(c).endswith("Child(a=1, b='x')")
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "b"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.b = "y"

    @record
    class Checked:
        n: int

        def __post_init__(self):
            if self.n < 0:
                raise ValueError("negative")
    assert Checked(1).n == 1
    with pytest.raises(ValueError):
        Checked(-1)
    assert Checked.__doc__ == "Checked(n)"


def test_a_mutable_default_is_refused_as_dataclass_refuses_it():
    with pytest.raises(ValueError):
        @record
        class Bad:
            items: list = []


def test_what_record_does_not_support_is_refused_by_name():
    from dataclasses import InitVar, KW_ONLY
    from typing import ClassVar
    with pytest.raises(TypeError, match="InitVar fields \\(scale\\)"):
        @record
        class WithInitVar:
            n: int
            scale: InitVar[int] = 1
    with pytest.raises(TypeError, match="keyword-only field 'b'"):
        @record
        class KeywordOnly:
            a: int
            _: KW_ONLY
            b: int = 2
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument 'a'"):
        @record
        class Misordered:
            a: int = 1
            b: int

    @record
    class WithClassVar:                 # a class constant is not a field, as in dataclass
        limit: ClassVar[int] = 8
        n: int
    assert WithClassVar(3).n == 3 and WithClassVar.limit == 8
    assert [f.name for f in dataclasses.fields(WithClassVar)] == ["n"]

    @record
    class Unhashable:                   # the class's own `__hash__ = None` stays
        n: int
        __hash__ = None
    with pytest.raises(TypeError):
        hash(Unhashable(1))

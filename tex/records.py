"""Frozen records: `@record` is `@dataclass(frozen=True)` at a fifth of its import cost.

dataclasses compiles each frozen class's __init__, __repr__, __eq__, __hash__,
__setattr__ and __delattr__ from source text when the class is made: about 0.9 ms a
class, 38 of the ~130 ms of imports a first compile needs (40 classes: the loop-nest IR,
the schedule's steps, the vector plans). `record` compiles only __init__ (IR nodes are
made by the thousand, so it stays the generated straight-line code) and gives the class
shared methods over its fields' attrgetter for the rest. The class is a dataclass all
the same: dataclasses.fields, replace, asdict and astuple work on it, and every method
the class body defines itself is kept, as dataclass keeps it.

Differences a caller could see: `__dataclass_params__` describes the class as dataclass
made it (no generated methods, not frozen), so a record is subclassed by records only
(dataclass would make a subclass it cannot initialize); __repr__ has no guard against a
record that contains itself (an immutable record cannot); the signature and __doc__ name
the fields without their annotations. Keyword-only fields and InitVar are refused."""
import dataclasses
import operator

__all__ = ["record"]

_FACTORY = object()     # the default of a parameter whose field has a default_factory


def record(cls=None, /, *, eq=True):
    """`@record` or `@record(eq=False)`: a frozen dataclass (identity equality and hash
    with eq=False, as dataclass(frozen=True, eq=False))."""
    def make(cls):
        return _make(cls, eq)
    return make if cls is None else make(cls)


def _make(cls, eq):
    undocumented = not cls.__dict__.get("__doc__")
    if undocumented:
        cls.__doc__ = "-"       # else dataclass asks inspect.signature for one (slow)
    explicit_hash = "__hash__" in cls.__dict__ and "__eq__" not in cls.__dict__
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    _check_fields(cls, fields)
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    own = cls.__dict__
    if "__init__" not in own:
        cls.__init__ = _init(cls, fields)
    if "__repr__" not in own:
        cls.__repr__ = _repr([f.name for f in fields if f.repr])
    for name, method in _frozen(cls, names).items():
        if name in own:
            raise TypeError(f"cannot overwrite attribute {name} in frozen record "
                            f"{cls.__name__}")
        setattr(cls, name, method)
    if eq:
        compared = _values([f.name for f in fields if f.compare])
        if "__eq__" not in own:
            cls.__eq__ = _eq(compared)
        # a class that defines __eq__ alone gets __hash__ = None from Python: not its own
        # (a `__hash__ = None` of the class's own stays: unhashable, as dataclass leaves it)
        if own.get("__hash__") is None and not explicit_hash:
            hashed = _values([f.name for f in fields
                              if (f.compare if f.hash is None else f.hash)])
            cls.__hash__ = lambda self: hash(hashed(self))
    return cls


def _check_fields(cls, fields):
    """What dataclass would refuse, and what `record` does not support, refused by name."""
    initvar = getattr(dataclasses, "_FIELD_INITVAR", None)     # (dataclass's own marker)
    initvars = [name for name, f in cls.__dataclass_fields__.items()
                if initvar is not None and getattr(f, "_field_type", None) is initvar]
    if initvars:
        raise TypeError(f"record {cls.__name__}: InitVar fields ({', '.join(initvars)}) "
                        "are not supported; use a dataclass")
    defaulted = None
    for f in fields:
        if f.kw_only:
            raise TypeError(f"record {cls.__name__}: keyword-only field {f.name!r} is not "
                            "supported; use a dataclass")
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING or \
                f.default_factory is not dataclasses.MISSING:
            defaulted = f.name
        elif defaulted is not None:
            raise TypeError(f"non-default argument {f.name!r} follows default argument "
                            f"{defaulted!r} in record {cls.__name__}")


def _values(names):
    """self -> the tuple of these fields' values."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


def _init(cls, fields):
    """__init__ compiled from text, as dataclass makes it for a frozen class."""
    params, body, env = [], [], {"__setattr": object.__setattr__, "__FACTORY": _FACTORY}
    for f in fields:
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            env[f"__default_{f.name}"] = f.default
            params.append(f"{f.name}=__default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"__factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=__FACTORY")
            body.append(f"  if {f.name} is __FACTORY: {f.name} = __factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"  __setattr(self, {f.name!r}, {f.name})")
    for f in fields:
        if not f.init and f.default_factory is not dataclasses.MISSING:
            env[f"__factory_{f.name}"] = f.default_factory
            body.append(f"  __setattr(self, {f.name!r}, __factory_{f.name}())")
        elif not f.init and f.default is not dataclasses.MISSING:
            env[f"__default_{f.name}"] = f.default
            body.append(f"  __setattr(self, {f.name!r}, __default_{f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    text = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["  pass"])
    namespace = {}
    exec(text, env, namespace)          # noqa: S102 -- our own text, from field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _repr(names):
    def __repr__(self):
        return (f"{type(self).__qualname__}("
                + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")")
    return __repr__


def _eq(values):
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented
    return __eq__


def _frozen(cls, names):
    """__setattr__ and __delattr__ that refuse the fields (and any attribute of the
    record class itself), as a frozen dataclass's do."""
    fields = frozenset(names)

    def __setattr__(self, name, value):
        if type(self) is cls or name in fields:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in fields:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return {"__setattr__": __setattr__, "__delattr__": __delattr__}

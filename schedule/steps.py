"""A schedule's history: frozen step records, one per primitive applied, serialised to
JSON and replayed by name (Schedule.replay). `repr(step)` is valid Python."""
import json
from dataclasses import asdict, dataclass

from tex.expr import AutoParts, Param


@dataclass(frozen=True)
class Split:
    stage: str
    loop: str
    factor: int
    tail: str = "peel"


@dataclass(frozen=True)
class Reorder:
    stage: str
    loops: tuple


@dataclass(frozen=True)
class SplitK:
    stage: str
    loop: str
    parts: object             # an int, "param:NAME" for a call-time tex.param, or
    #                           "auto:NAME|rows|length[|rule|block]" for the auto schedule's
    #                           AutoParts


@dataclass(frozen=True)
class SplitParts:
    stage: str
    loop: str
    parts: object             # as SplitK's


@dataclass(frozen=True)
class Privatize:
    stage: str
    loop: str


@dataclass(frozen=True)
class Pack:
    stage: str
    tensor: str
    at: str
    layout: str = "box"


@dataclass(frozen=True)
class ComputeAt:
    stage: str              # the producer
    consumer: str
    at: str


@dataclass(frozen=True)
class Fuse:
    stage: str              # the consumer
    into: str               # the producer whose epilogue runs it


@dataclass(frozen=True)
class Unfuse:
    stage: str


@dataclass(frozen=True)
class NotFused:
    """A fusion s.auto() considered and did not make, with the reason (kept in the
    history so that a replayed schedule prints the same plan)."""
    stage: str
    into: str
    why: str


@dataclass(frozen=True)
class Rewrite:
    """The program rewrites of schedule/rewrite.py (common definitions, distributed sums),
    applied to the whole program before any other step."""
    stage: str = ""


@dataclass(frozen=True)
class SetKind:
    stage: str
    loop: str
    kind: str
    tail: str = "peel"


@dataclass(frozen=True)
class Specialize:
    stage: str
    condition: str          # a relation of sizes and params, as sympy prints it


STEPS = {cls.__name__: cls for cls in (Split, Reorder, SplitK, SplitParts, Privatize, Pack,
                                         ComputeAt, Fuse, Unfuse, NotFused, Rewrite, SetKind,
                                         Specialize)}


def recorded_parts(parts):
    """A split_k or split_parts part count as a step records it (an int, or a string
    naming the param)."""
    if isinstance(parts, AutoParts):
        rule = "" if parts.rule == "split_k" else f"|{parts.rule}|{parts.block}"
        return f"auto:{parts}|{parts.rows}|{parts.length}{rule}"
    return f"param:{parts}" if isinstance(parts, Param) else parts


def to_json(steps):
    return json.dumps([{"step": type(s).__name__, **asdict(s)} for s in steps])


def from_json(text):
    return [STEPS[d.pop("step")](**d) for d in json.loads(text)]

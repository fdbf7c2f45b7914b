"""A schedule's history: frozen step records, one per primitive applied, serialised to
JSON and replayed by name (Schedule.replay). `repr(step)` is valid Python."""
import dataclasses
import json
from dataclasses import asdict

from tex.errors import ScheduleError
from tex.expr import AutoParts, Param
from tex.records import record


@record
class Split:
    stage: str
    loop: str
    factor: int
    tail: str = "peel"


@record
class Reorder:
    stage: str
    loops: tuple


@record
class SplitK:
    stage: str
    loop: str
    parts: object             # an int, "param:NAME" for a call-time tex.param, or
    #                           "auto:NAME|rows|length[|rule|block]" for the auto schedule's
    #                           AutoParts


@record
class SplitParts:
    stage: str
    loop: str
    parts: object             # as SplitK's


@record
class Privatize:
    stage: str
    loop: str


@record
class Pack:
    stage: str
    tensor: str
    at: str
    layout: str = "box"


@record
class ComputeAt:
    stage: str              # the producer
    consumer: str
    at: str


@record
class Fuse:
    stage: str              # the consumer
    into: str               # the producer whose epilogue runs it


@record
class Unfuse:
    stage: str


@record
class NotFused:
    """A fusion s.auto() considered and did not make, with the reason (kept in the
    history so that a replayed schedule prints the same plan)."""
    stage: str
    into: str
    why: str


@record
class Rewrite:
    """The program rewrites of schedule/rewrite.py (common definitions, distributed sums),
    applied to the whole program before any other step."""
    stage: str = ""


@record
class SetKind:
    stage: str
    loop: str
    kind: str
    tail: str = "peel"


@record
class Specialize:
    stage: str
    condition: str          # a relation of sizes and params, as print(s) shows it


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


_LOOKS_LIKE = ('a record looks like {"step": "Split", "stage": "C", "loop": "i", "factor": '
               '32, "tail": "peel"} (what s.history_json() writes)')


def as_steps(steps):
    """Step records from s.history (a list of them), s.history_json()'s text or a list of
    its dicts, or a ScheduleError that says which record is wrong and how."""
    if isinstance(steps, str):
        try:
            steps = json.loads(steps)
        except json.JSONDecodeError as err:
            raise ScheduleError(f"replay: the text is not JSON ({err}); it takes s.history "
                                "or s.history_json()") from None
    if not isinstance(steps, (list, tuple)):
        raise ScheduleError(f"replay takes s.history (a list of steps) or "
                            f"s.history_json(), not {type(steps).__name__}")
    return [_as_step(n, st) for n, st in enumerate(steps)]


def _as_step(n, record):
    if isinstance(record, tuple(STEPS.values())):
        return record
    if not isinstance(record, dict) or record.get("step") not in STEPS:
        what = record.get("step") if isinstance(record, dict) else record
        raise ScheduleError(f"replay: step {n} ({what!r}) is not a step record; "
                            f"{_LOOKS_LIKE}; the steps are {', '.join(STEPS)}")
    cls, fields = STEPS[record["step"]], {k: v for k, v in record.items() if k != "step"}
    try:
        return cls(**fields)
    except TypeError as err:
        names = ", ".join(f.name for f in dataclasses.fields(cls))
        raise ScheduleError(f"replay: step {n} ({record['step']}): {err}; its fields are "
                            f"{names}") from None

"""Schedules (placeholder)."""


class Schedule:
    pass


def schedule(out):
    raise NotImplementedError

"""Locks that a forked child gets unlocked.

A thread that holds a lock when another thread forks the process is not copied into
the child, so the child's copy of the lock stays held for ever: a process that forks
(multiprocessing's default start method on Linux, dask's process pools) while a tex
thread compiles got a child whose first compile waited for ever. The work that lock
guarded is not the child's either (its compile ran on the missing thread), so every
lock made here is made new (unlocked) in the child; the state it guarded is left as
the parent's other threads had it, which each lock's owner must tolerate (a cache
entry half made is made again).
"""
import os
import threading
import weakref

_locks = weakref.WeakSet()


def lock():
    """A threading.Lock that a forked child gets unlocked."""
    made = threading.Lock()
    _locks.add(made)
    return made


def rlock():
    """A threading.RLock that a forked child gets unlocked."""
    made = threading.RLock()
    _locks.add(made)
    return made


def _reinit_in_child():
    for held in list(_locks):
        # (an RLock the forking thread holds itself stays so: that thread, the child's
        # only one, releases it as it would have)
        if not (hasattr(held, "_is_owned") and held._is_owned()):
            held._at_fork_reinit()


os.register_at_fork(after_in_child=_reinit_in_child)

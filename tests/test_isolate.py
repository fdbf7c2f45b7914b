"""tests/isolate.py: a body that crashes fails its test with the signal's name and the
next call gets a new child; exceptions come back (as text when they do not pickle); under
hypothesis a crash shrinks to the smallest crashing example."""
import ctypes
import os
import signal

import pytest
from hypothesis import given, settings, strategies as st

import isolate
from isolate import in_child


@pytest.fixture(autouse=True)
def in_a_child(monkeypatch):
    monkeypatch.delenv("TEX_TEST_IN_PROCESS", raising=False)   # these tests crash on purpose


@in_child
def crash_if(n, limit):
    if n >= limit:
        ctypes.string_at(0)                   # reads address 0: SIGSEGV
    return os.getpid(), n


@in_child
def fail_with(kind):
    if kind == "assert":
        raise AssertionError("wrong answer 41")
    if kind == "raises":
        with pytest.raises(ValueError):
            pass                                # pytest's Failed (a BaseException)
    raise KeyError(kind)


@in_child
def die(sig):
    os.kill(os.getpid(), sig)


def test_a_crash_fails_the_call_and_the_next_call_gets_a_new_child():
    pid, n = crash_if(1, 5)
    assert pid != os.getpid() and n == 1
    assert crash_if(2, 5)[0] == pid            # one long-lived child
    with pytest.raises(isolate.ChildCrashed, match="crash_if died with SIGSEGV"):
        crash_if(7, 5)
    again, _ = crash_if(3, 5)
    assert again not in (pid, os.getpid())
    with pytest.raises(isolate.ChildCrashed, match="died with SIGABRT"):
        die(signal.SIGABRT)


def test_exceptions_come_back_with_the_childs_traceback():
    with pytest.raises(AssertionError, match="wrong answer 41") as info:
        fail_with("assert")
    assert "in the child process" in str(getattr(info.value, "__notes__", [""])[0] or
                                         info.value.__cause__)
    with pytest.raises(AssertionError, match="Failed: DID NOT RAISE"):    # as text
        fail_with("raises")
    with pytest.raises(KeyError):
        fail_with("other")


def test_hypothesis_shrinks_a_crash_to_the_smallest_example():
    seen = []

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.integers(0, 10**6))
    def prop(n):
        seen.append(n)
        crash_if(n, 1000)

    with pytest.raises(isolate.ChildCrashed, match="SIGSEGV"):
        prop()
    assert seen[-1] == 1000                     # the last (shrunk) example reported

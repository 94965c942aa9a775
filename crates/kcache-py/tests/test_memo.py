"""MemoTable: memo-cache's single-flight table over Python values, keyed by KeyBuilder over
plain data."""

import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import kcache


def test_get_computes_once_and_fetch_says_hit():
    calls = []
    with kcache.MemoTable(tag="pytest/v1") as memo:
        assert memo.get(("k", 1), lambda: calls.append(1) or "v") == "v"
        assert memo.get(["k", 1], lambda: calls.append(2) or "w") == "v"  # a list keys as a tuple
        assert memo.fetch(("k", 2), lambda: 7) == (7, False)
        assert memo.fetch(("k", 2), lambda: 8) == (7, True)
        assert calls == [1]
        assert memo.stats() == {"entries": 2, "hits": 2, "misses": 2, "waits": 0, "failures": 0}
        assert len(memo) == 2
        obj = object()
        assert memo.get({"any": "value"}, lambda: obj) is obj
    assert memo.closed
    with pytest.raises(kcache.Error, match="closed"):
        memo.get(1, lambda: 1)


def test_keys_are_memo_caches():
    m = kcache.MemoTable(tag="t")
    assert m.key({"b": 1, "a": [1.0, None, True]}) == kcache.memo_key({"a": [1.0, None, True], "b": 1}, tag="t")
    assert m.key(1) != m.key(1.0) != m.key(True)
    assert m.key(1) != kcache.memo_key(1, tag="other")
    assert len(m.key("x")) == 64


def test_a_raising_compute_stores_nothing():
    memo = kcache.MemoTable()
    with pytest.raises(ZeroDivisionError):
        memo.get("k", lambda: 1 / 0)
    assert memo.get("k", lambda: 3) == 3
    assert memo.stats()["failures"] == 1


@pytest.mark.parametrize("bad,exc", [
    (object(), TypeError), ({1: 2}, TypeError), (2**80, ValueError), (b"bytes", TypeError),
])
def test_keys_that_are_not_plain_data_raise(bad, exc):
    with pytest.raises(exc):
        kcache.MemoTable().get(bad, lambda: 1)


def test_deep_keys_raise_rather_than_overflow():
    deep = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(ValueError):
        kcache.memo_key(deep)


def test_concurrent_callers_of_one_key_compute_once():
    memo = kcache.MemoTable()
    computed = []

    def slow():
        computed.append(1)
        time.sleep(0.2)
        return 42

    results = []
    ts = [threading.Thread(target=lambda: results.append(memo.get("same", slow))) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [42] * 6 and computed == [1]
    stats = memo.stats()
    assert stats["misses"] == 1 and stats["hits"] + stats["waits"] >= 5


def test_a_compute_may_use_the_table_for_other_keys():
    memo = kcache.MemoTable()
    assert memo.get("outer", lambda: memo.get("inner", lambda: 1) + 1) == 2
    assert memo.fetch("inner", lambda: 9) == (1, True)


def test_a_compute_is_released_when_its_call_returns():
    # Hit or miss, the table holds no reference to `compute` once `get` has returned, so
    # what it captured is freed with the caller's last reference. (A table dropping it
    # after its reply loses a race with the caller: many calls, so that loss shows.)
    class Captured:
        pass

    memo = kcache.MemoTable()
    for key in ["k"] + [("other", i // 2) for i in range(40)]:  # misses, then hits
        obj = Captured()
        ref = weakref.ref(obj)
        memo.get(key, lambda obj=obj: 1)
        del obj
        assert ref() is None, key
        obj = Captured()
        ref = weakref.ref(obj)
        memo.fetch(key, lambda obj=obj: 1)
        del obj
        assert ref() is None, key


# ---- re-entrancy: a compute that asks for a key in flight on its own call chain ----------
#
# Each case runs in a child interpreter with a timeout, so a regression (a compute waiting for
# itself) fails the test instead of hanging the suite. The timeout guards against a hang; it
# asserts no time.

HANG_GUARD_SECONDS = 120


def run_isolated(code: str, env: dict[str, str] | None = None) -> str:
    """Runs `code` in a fresh interpreter (this venv's, so this kcache) with `env` added to
    the environment; fails if it hangs, dies or raises, and returns its stdout."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True, text=True, timeout=HANG_GUARD_SECONDS,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no answer in {HANG_GUARD_SECONDS} s (a compute waiting for itself?)")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_compute_asking_for_its_own_key_computes_without_storing():
    out = run_isolated("""
        import kcache
        calls = []
        with kcache.MemoTable(tag="pytest/reentrant") as memo:
            def outer():
                calls.append("outer")
                return memo.get(("k", 1), lambda: calls.append("inner") or 1) + 1
            assert memo.fetch(("k", 1), outer) == (2, False)
            assert calls == ["outer", "inner"], calls
            # The outer value is the one stored; the inner one was not.
            assert memo.fetch(("k", 1), lambda: 99) == (2, True)
            s = memo.stats()
            assert (s["entries"], s["misses"], s["hits"], s["failures"]) == (1, 2, 1, 0), s
        print("ok")
    """)
    assert out == "ok\n"


def test_a_chain_a_b_a_computes_the_inner_a_without_storing():
    out = run_isolated("""
        import kcache
        calls = []
        with kcache.MemoTable(tag="pytest/reentrant") as memo:
            def a():
                calls.append("A")
                return memo.get("B", b) + 1
            def b():
                calls.append("B")
                return memo.get("A", lambda: calls.append("inner A") or 10) * 2
            assert memo.get("A", a) == 21
            assert calls == ["A", "B", "inner A"], calls
            assert memo.fetch("B", lambda: -1) == (20, True)
            assert memo.fetch("A", lambda: -1) == (21, True)
            s = memo.stats()
            assert (s["entries"], s["misses"], s["hits"]) == (2, 3, 2), s
        print("ok")
    """)
    assert out == "ok\n"


def test_a_chain_through_another_table_is_seen_too():
    out = run_isolated("""
        import kcache
        x, y = kcache.MemoTable(tag="pytest/x"), kcache.MemoTable(tag="pytest/x")
        # Same tag, same key: still two tables, so y's "k" is not x's "k" in flight.
        v = x.get("k", lambda: y.get("k", lambda: x.get("k", lambda: 1) + 1) + 1)
        assert v == 3, v
        assert (len(x), len(y)) == (1, 1)
        assert y.get("k", lambda: -1) == 2 and x.get("k", lambda: -1) == 3
        print("ok")
    """)
    assert out == "ok\n"


def test_a_raising_inner_compute_stores_nothing_and_reaches_the_outer_one():
    out = run_isolated("""
        import kcache
        memo = kcache.MemoTable()
        def outer():
            try:
                memo.get("k", lambda: 1 / 0)
            except ZeroDivisionError:
                return "caught"
        assert memo.get("k", outer) == "caught"
        s = memo.stats()
        assert (s["entries"], s["misses"], s["failures"]) == (1, 1, 1), s
        try:
            memo.get("j", lambda: memo.get("j", lambda: 1 / 0))
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("no exception")
        assert memo.get("j", lambda: 5) == 5
        s = memo.stats()
        assert (s["entries"], s["failures"]) == (2, 3), s
        print("ok")
    """)
    assert out == "ok\n"


def test_deep_reentrancy_on_one_key_terminates():
    out = run_isolated("""
        import kcache
        memo = kcache.MemoTable()
        def down(n):
            return lambda: 0 if n == 0 else memo.get("same", down(n - 1)) + 1
        assert memo.get("same", down(40)) == 40
        assert len(memo) == 1
        print("ok")
    """)
    assert out == "ok\n"


def test_a_compute_that_always_asks_for_its_own_key_raises_recursion_error():
    out = run_isolated("""
        import kcache
        memo = kcache.MemoTable()
        def forever():
            return memo.get("k", forever)
        try:
            memo.get("k", forever)
        except RecursionError as e:
            print("RecursionError")
        assert len(memo) == 0
        assert memo.get("k", lambda: 1) == 1
    """)
    assert out == "RecursionError\n"


def test_an_unbounded_chain_of_new_keys_raises_recursion_error():
    out = run_isolated("""
        import kcache
        memo = kcache.MemoTable()
        def ask(n):
            return memo.get(("n", n), lambda: ask(n + 1))
        try:
            ask(0)
        except RecursionError:
            print("RecursionError")
        assert len(memo) == 0, len(memo)
        # A deep chain under the limit still computes, each key once.
        def fib(n):
            return n if n < 2 else memo.get(("fib", n), lambda: fib(n - 1) + fib(n - 2))
        assert fib(300) == 222232244629420445529739893461909967206666939096499764990979600
        assert len(memo) == 299
    """)
    assert out == "RecursionError\n"


def test_a_stored_key_is_answered_past_the_chain_limit():
    # The request for "stored" is made 1000 links deep: answered, since a hit starts no
    # thread; a new key there is refused.
    out = run_isolated("""
        import kcache
        memo = kcache.MemoTable()
        memo.get("stored", lambda: 1)
        def deepest():
            v = memo.get("stored", None)
            try:
                memo.get("new", lambda: 0)
            except RecursionError:
                return v + 100
            return -1
        def ask(n):
            return memo.get(("n", n), deepest if n == 999 else lambda: ask(n + 1))
        assert ask(0) == 101
        s = memo.stats()
        assert (s["entries"], s["hits"], s["misses"]) == (1001, 1, 1001), s
        print("ok")
    """)
    assert out == "ok\n"


def test_a_request_thread_that_cannot_start_raises_and_the_table_stays_open():
    # The address space is capped just above what the process uses, so a chain of requests
    # (a thread each, 2 MiB of stack) runs out of threads long before its 900 links; one
    # malloc arena keeps glibc's per-thread arenas from using the room first.
    out = run_isolated("""
        import re, resource
        import kcache
        memo = kcache.MemoTable()
        vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 256 * 2**20, resource.RLIM_INFINITY))
        def ask(n):
            return memo.get(("n", n), lambda: 0 if n == 900 else ask(n + 1))
        try:
            ask(0)
        except kcache.Error as e:
            assert "could not start a thread" in str(e), e
        else:
            raise AssertionError("900 threads started under the cap: the test proves nothing")
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert not memo.closed and len(memo) == 0
        assert memo.get("x", lambda: 5) == 5
        print("ok")
    """, env={"MALLOC_ARENA_MAX": "1"})
    assert out == "ok\n"


# ---- a hit starts no thread ---------------------------------------------------------------


def test_a_hit_starts_no_thread():
    # As above, the address space is capped; then blocked Python threads with a request
    # thread's stack (2 MiB) take every cached stack and the room left, so no thread can
    # start (a miss shows it). Hits are still answered: they start none.
    out = run_isolated("""
        import re, resource, threading
        import kcache
        memo = kcache.MemoTable()
        assert memo.get("k", lambda: 1) == 1
        for i in range(10):
            memo.get(("warm", i), lambda: 0)
            memo.get("k", None)
        vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 32 * 2**20, resource.RLIM_INFINITY))
        threading.stack_size(2 * 2**20)
        release, blocked = threading.Event(), []
        try:
            while len(blocked) < 1000:
                t = threading.Thread(target=release.wait)
                t.start()
                blocked.append(t)
        except RuntimeError:
            pass
        try:
            try:
                memo.get("miss", lambda: 2)
            except kcache.Error as e:
                assert "could not start a thread" in str(e), e
            else:
                raise AssertionError("a thread started under the cap: the test proves nothing")
            got = [memo.fetch("k", None) for _ in range(1000)]
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            release.set()
            for t in blocked:
                t.join()
        assert got == [(1, True)] * 1000
        s = memo.stats()
        assert (s["hits"], s["misses"], s["entries"]) == (1010, 11, 11), s
        assert memo.get("miss", lambda: 2) == 2
        print("ok")
    """, env={"MALLOC_ARENA_MAX": "1"})
    assert out == "ok\n"


def test_hits_are_answered_while_a_key_is_in_flight():
    # One thread computes "slow" (held until the end), another waits for it; hits on the
    # table, from this thread and from inside a compute, are answered meanwhile (the hang
    # guard catches a table that serves requests only after the computation).
    out = run_isolated("""
        import threading
        import kcache
        memo = kcache.MemoTable()
        memo.get("stored", lambda: "v")
        started, release = threading.Event(), threading.Event()
        def slow():
            started.set()
            release.wait()
            return 42
        results = []
        ts = [threading.Thread(target=lambda: results.append(memo.get("slow", slow))) for _ in range(2)]
        for t in ts:
            t.start()
        started.wait()
        assert [memo.fetch("stored", None) for _ in range(100)] == [("v", True)] * 100
        assert memo.get("other", lambda: memo.get("stored", None) + "w") == "vw"
        release.set()
        for t in ts:
            t.join()
        assert results == [42, 42], results
        s = memo.stats()
        assert (s["entries"], s["misses"], s["hits"], s["failures"]) == (3, 3, 102, 0), s
        print("ok")
    """)
    assert out == "ok\n"

"""MemoTable: memo-cache's single-flight table over Python values, keyed by KeyBuilder over
plain data."""

import threading
import time

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

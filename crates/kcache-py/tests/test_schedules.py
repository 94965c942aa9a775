"""ScheduleCache from Python: code and schedules as plain data; lookup (hits replayed under
the looked-up code's names, misses that say why), store keep-faster, seeds, another process
served from the directory, bad input raising."""

import subprocess
import sys
import textwrap
import threading

import pytest

import kcache


def code(i="i", n="n", size=64, op="mul"):
    """`scale(int64 n): for i in 0..size: out[i] = i * 2.0` as plain data."""
    return ["kernel", ["param", "i64"], {"local": n},
            ["for", {"loop": i}, ["extent", size],
             ["set", {"node": "out", "dims": [size], "dtype": "f32"}, [op, {"sym": i}, 2.0]]]]


OPS = [{"op": "unroll", "loop": {"sym": "i"}, "by": 4}, ("tile", 8), None, True, 1.5]


def test_store_then_lookup_replays_under_the_looked_up_names(tmp_path):
    with kcache.ScheduleCache(tmp_path, "pytest", options=["-O2"]) as sc:
        assert sc.key(code()) == sc.key(code("j", "m"))
        assert sc.key(code()) != sc.key(code(op="add"))
        miss = sc.lookup(code())
        assert not miss and miss.kind == "not_found" and miss.miss
        stored = sc.store(code(), OPS, [2e-5, 1.9e-5], baseline_time=5e-5)
        assert stored["outcome"] == "stored" and stored["key"] == sc.key(code())
        hit = sc.lookup(code("j", "m"))
        assert hit and hit.kind == "hit" and hit.miss is None
        assert hit.ops == [{"op": "unroll", "loop": {"sym": "j"}, "by": 4}, ["tile", 8], None, True, 1.5]
        assert hit.times == [2e-5, 1.9e-5] and hit.baseline_time == 5e-5


def test_keep_faster_keeps_the_faster_winner(tmp_path):
    sc = kcache.ScheduleCache(tmp_path, "pytest")
    assert sc.store(code(), [("fast",)], [1e-5])["outcome"] == "stored"
    slower = sc.store(code(), [("slow",)], [3e-5])
    assert slower["outcome"] == "kept_existing" and "not faster" in slower["why"]
    assert sc.lookup(code()).ops == [["fast"]]
    assert sc.store(code(), [("faster",)], [0.5e-5])["outcome"] == "stored"
    assert sc.lookup(code()).ops == [["faster"]]
    last = kcache.ScheduleCache(tmp_path, "pytest", keep_faster=False)
    assert last.store(code(), [("slowest",)], [9e-5])["outcome"] == "stored"


def test_a_miss_says_which_component_changed(tmp_path):
    kcache.ScheduleCache(tmp_path, "pytest", compiler="cc", options=["-O2"]).store(code(), [1], [1e-5])
    miss = kcache.ScheduleCache(tmp_path, "pytest", compiler="cc", options=["-O3"]).lookup(code())
    assert not miss and miss.differing == ["codegen"]
    assert miss.changes == [("codegen", "options -O2 → -O3")]
    assert "-O2 → -O3" in miss.miss
    other_device = kcache.ScheduleCache(tmp_path, "pytest", compiler="cc", options=["-O2"], device="another cpu")
    assert other_device.lookup(code()).kind == "not_found"


def test_seeds_offer_other_sizes_and_other_components(tmp_path):
    sc = kcache.ScheduleCache(tmp_path, "pytest", options=["-O2"])
    sc.store(code(size=64), OPS, [2e-5])
    [near] = sc.seeds(code("k", "m", size=128))
    assert near["near"] and near["ops"][0] == {"op": "unroll", "loop": {"sym": "k"}, "by": 4}
    assert near["best_time"] == 2e-5
    [same] = kcache.ScheduleCache(tmp_path, "pytest", options=["-O3"]).seeds(code())
    assert not same["near"] and same["ops"][1] == ["tile", 8]
    assert sc.seeds(code()) == []  # the own key is a lookup's, never a seed


LOOKUP = textwrap.dedent("""
    import sys, kcache
    code = ["kernel", ["for", {"loop": "z"}, ["extent", 8], ["op", {"sym": "z"}]]]
    hit = kcache.ScheduleCache(sys.argv[1], "pytest").lookup(code)
    print(hit.kind, hit.ops)
""")


def test_another_process_is_served_from_the_directory(tmp_path):
    kcache.ScheduleCache(tmp_path, "pytest").store(
        ["kernel", ["for", {"loop": "a"}, ["extent", 8], ["op", {"sym": "a"}]]],
        [{"split": {"sym": "a"}}], [1e-6])
    out = subprocess.run([sys.executable, "-c", LOOKUP, str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert out == "hit [{'split': {'sym': 'z'}}]\n"


@pytest.mark.parametrize("bad,exc", [
    (None, ValueError), ([], ValueError), ([1, 2], TypeError), (object(), TypeError),
    ({"x": 1}, ValueError), (["k", {"loop": 3}], TypeError), (["k", 2**70], ValueError),
])
def test_code_that_is_not_plain_data_raises(tmp_path, bad, exc):
    sc = kcache.ScheduleCache(tmp_path, "pytest")
    if bad is None:
        # None is a word: a code of its own, keyed.
        assert sc.key(bad)
        return
    with pytest.raises(exc):
        sc.lookup(bad)


def test_bad_ops_and_unkeyable_code_raise(tmp_path):
    sc = kcache.ScheduleCache(tmp_path, "pytest")
    with pytest.raises(kcache.ScheduleError, match="names symbol"):
        sc.store(code(), [{"sym": "nope"}], [1e-5])
    with pytest.raises(TypeError):
        sc.store(code(), [object()], [1e-5])
    with pytest.raises(TypeError):
        sc.store(code(), 5, [1e-5])
    with pytest.raises(kcache.ScheduleError):
        sc.lookup(["k", {"opaque": "a closure"}])
    with pytest.raises(kcache.ScheduleError):
        sc.lookup(["k", {"sym": "unbound"}])
    deep = ["k"]
    for _ in range(1000):
        deep = ["k", deep]
    with pytest.raises(ValueError):
        sc.key(deep)


def test_closed_and_threads(tmp_path):
    sc = kcache.ScheduleCache(tmp_path, "pytest")
    errors = []

    def work(t):
        try:
            for s in range(5):
                sc.store(code(size=8 * (t + 1)), [t, s], [1e-5 * (5 - s)])
                assert sc.lookup(code(size=8 * (t + 1)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert sc.lookup(code(size=8)).ops == [0, 4]
    sc.close()
    with pytest.raises(kcache.Error, match="closed"):
        sc.lookup(code())

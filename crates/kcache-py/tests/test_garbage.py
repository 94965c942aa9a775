"""Garbage into every entry point: each call returns or raises a Python exception, never
crashes the interpreter (a crash would end this test process). Seeded, so a failure
reproduces."""

import math
import random

import numpy as np
import pytest

import kcache


def garbage(rng, depth=0):
    choices = [
        lambda: None, lambda: rng.choice([True, False]), lambda: rng.randint(-2**70, 2**70),
        lambda: rng.choice([0, -1, 2**63 - 1, 2**63, -2**63 - 1]),
        lambda: rng.choice([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
        lambda: "".join(chr(rng.randint(1, 0xD7FF)) for _ in range(rng.randint(0, 40))),
        lambda: bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 40))),
        lambda: object(), lambda: rng.choice(["void k(void) {}", "for", "i", "", "f32", "n"]),
        lambda: np.arange(rng.randint(0, 5), dtype=rng.choice([np.float32, np.int8, np.complex64])),
    ]
    if depth < 4:
        choices += [
            lambda: [garbage(rng, depth + 1) for _ in range(rng.randint(0, 4))],
            lambda: tuple(garbage(rng, depth + 1) for _ in range(rng.randint(0, 4))),
            lambda: {rng.choice(["loop", "sym", "node", "local", "opaque", "dims", "dtype", 1]):
                     garbage(rng, depth + 1) for _ in range(rng.randint(0, 3))},
        ]
    return rng.choice(choices)()


def call(f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except (kcache.Error, TypeError, ValueError, OverflowError, UnicodeEncodeError):
        pass


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("seed", range(4))
def test_garbage_into_every_entry_point(tmp_path, seed):
    rng = random.Random(seed)
    kc = kcache.KernelCache(tmp_path / "k")
    sig = kcache.Signature().buffer_mut("y", "f32", "n").buffer("x", "f32", "n").scalar("n", "i64")
    kernel = kc.compile_one(kcache.Source(
        "k", "void k(float *y, const float *x, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }", sig))
    sc = kcache.ScheduleCache(tmp_path / "s", "garbage")
    memo = kcache.MemoTable()
    for _ in range(150):
        g = lambda: garbage(rng)  # noqa: E731
        call(kcache.canonical_key, g(), g())
        call(kcache.kernel_key, g(), g(), options=g())
        call(kcache.Names, bound=g(), derivations=g())
        call(kcache.Signature().buffer, g(), g(), g())
        call(kcache.Source, g(), g(), g())
        call(kc.compile, g())
        call(kernel, g(), g(), g())
        call(kernel, np.zeros(4, np.float32), np.zeros(4, np.float32), g())
        call(sc.key, g())
        call(sc.lookup, ["k", g(), {"loop": "i"}, g()])
        call(sc.store, ["k", {"loop": "i"}, ["x", {"sym": "i"}]], g(), g())
        call(memo.get, g(), lambda: 1)
        call(kcache.memo_key, g(), tag=g())
    y = np.zeros(3, np.float32)
    kernel(y, np.ones(3, np.float32), 3)
    assert y.tolist() == [1, 1, 1]

"""The kernel cache from Python: compile/load/call round trips over numpy arrays and other
buffers, per-kernel outcomes, a second process served from the kernel store (compiles 0),
calls that do not match the signature (exceptions, never a crash), threads compiling at
once."""

import array
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import kcache

AXPY = """void axpy(double *y, const double *x, double alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}"""


def axpy_sig():
    return (kcache.Signature().buffer_mut("y", "f64", "n").buffer("x", "f64", "n")
            .scalar("alpha", "f64").scalar("n", "i64"))


def scale_source(symbol, factor, elem="f32", ctype="float"):
    sig = kcache.Signature().buffer_mut("out", elem, "n").buffer("x", elem, "n").scalar("n", "i64")
    text = (f"void {symbol}({ctype} *out, const {ctype} *x, int64_t n) "
            f"{{ for (int64_t i = 0; i < n; ++i) out[i] = x[i] * {factor}; }}")
    return kcache.Source(symbol, text, sig)


def test_compile_load_call_round_trip(tmp_path):
    with kcache.KernelCache(tmp_path) as cache:
        [axpy] = cache.compile([kcache.Source("axpy", AXPY, axpy_sig())])
        assert isinstance(axpy, kcache.Kernel) and axpy.symbol == "axpy"
        y, x = np.ones(5), np.arange(5, dtype=np.float64)
        axpy(y, x, 2.0, 5)
        np.testing.assert_array_equal(y, 1 + 2 * np.arange(5))
        # A shorter n touches a prefix only; a Python int is a valid f64 scalar.
        axpy(y, x, 1, 2)
        np.testing.assert_array_equal(y, [1, 4, 5, 7, 9])
        assert axpy.signature == axpy_sig()
        assert axpy.program_path and axpy.address > 0
        stats = cache.stats()
        assert stats["census"]["kernels_compiled"] == 1
        assert stats["store"]["entries"] >= 1
    assert cache.closed
    with pytest.raises(kcache.Error):
        cache.compile([kcache.Source("axpy", AXPY, axpy_sig())])
    # A kernel outlives its closed cache.
    axpy(y, x, 0.0, 5)


@pytest.mark.parametrize("elem,ctype,dtype", [
    ("f32", "float", np.float32), ("f64", "double", np.float64), ("i32", "int32_t", np.int32),
    ("i64", "int64_t", np.int64), ("u8", "uint8_t", np.uint8),
])
def test_every_element_type_round_trips(tmp_path, elem, ctype, dtype):
    cache = kcache.KernelCache(tmp_path)
    k = cache.compile_one(scale_source(f"s_{elem}", 3, elem, ctype))
    x = np.arange(7, dtype=dtype)
    out = np.zeros(7, dtype=dtype)
    k(out, x, 7)
    np.testing.assert_array_equal(out, x * 3)


def test_other_buffers_than_numpy(tmp_path):
    k = kcache.KernelCache(tmp_path).compile_one(scale_source("s", 2))
    x = array.array("f", [1, 2, 3])
    out = array.array("f", [0, 0, 0])
    k(out, x, 3)
    assert list(out) == [2, 4, 6]
    # A strided (non-contiguous) view is read and written through correctly.
    big = np.zeros(6, dtype=np.float32)
    k(big[::2], np.array([1, 2, 3], dtype=np.float32), 3)
    np.testing.assert_array_equal(big, [2, 0, 4, 0, 6, 0])


def test_a_failing_kernel_fails_alone(tmp_path):
    cache = kcache.KernelCache(tmp_path)
    bad = kcache.Source("bad", "void bad(float *out, const float *x, int64_t n) { nope; }",
                        scale_source("s", 1).signature)
    good, failed, twin = cache.compile([scale_source("good", 2), bad, scale_source("good2", 2)])
    assert isinstance(good, kcache.Kernel) and isinstance(twin, kcache.Kernel)
    assert isinstance(failed, kcache.CompileError) and isinstance(failed, kcache.Error)
    assert failed.symbols == ["bad"] and "nope" in str(failed)
    with pytest.raises(kcache.CompileError, match="nope"):
        cache.compile_one(bad)


def test_renamed_twins_compile_once(tmp_path):
    cache = kcache.KernelCache(tmp_path)
    a = kcache.Source("E_4_1", "void E_4_1(float *o, const float *x, int64_t n) { for (int64_t i1 = 0; i1 < n; ++i1) o[i1] = x[i1] + 1; }", scale_source("s", 1).signature)
    b = kcache.Source("E_4_2", "void E_4_2(float *o, const float *x, int64_t n) { for (int64_t j9 = 0; j9 < n; ++j9) o[j9] = x[j9] + 1; }", scale_source("s", 1).signature)
    (ka,), census_a = cache.compile_census([a])
    (kb,), census_b = cache.compile_census([b])
    assert census_a["kernels_compiled"] == 1
    assert census_b["kernels_compiled"] == 0 and census_b["kernels_reused"] == 1
    assert cache.key(a) == cache.key(b)
    out = np.zeros(3, dtype=np.float32)
    kb(out, np.ones(3, dtype=np.float32), 3)
    np.testing.assert_array_equal(out, [2, 2, 2])


SECOND_PROCESS = textwrap.dedent("""
    import sys, numpy as np, kcache
    sig = (kcache.Signature().buffer_mut("y", "f64", "n").buffer("x", "f64", "n")
           .scalar("alpha", "f64").scalar("n", "i64"))
    cache = kcache.KernelCache(sys.argv[1])
    (k,), census = cache.compile_census([kcache.Source("axpy", sys.argv[2], sig)])
    y = np.zeros(3); k(y, np.array([1., 2., 3.]), 10.0, 3)
    print(census["kernels_compiled"], census["kernels_loaded"], y.tolist())
""")


def test_a_second_process_is_served_from_the_kernel_store(tmp_path):
    runs = [subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(tmp_path), AXPY],
                           capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
            for _ in range(2)]
    assert runs[0][:2] == ["1", "0"], runs[0]
    assert runs[1][:2] == ["0", "1"], runs[1]
    assert runs[0][2] == runs[1][2] == "[10.0, 20.0, 30.0]\n"


@pytest.mark.parametrize("args,match", [
    ((), "takes 4 arguments"),
    ((np.ones(3), np.ones(3), 1.0), "takes 4 arguments"),
    ((np.ones(3), np.ones(3), 1.0, 4), "at least 4"),
    ((np.ones(3, dtype=np.float32), np.ones(3), 1.0, 3), "f64"),
    ((np.ones(3), np.ones(3, dtype=np.int64), 1.0, 3), "f64"),
    ((None, np.ones(3), 1.0, 3), "buffer"),
    (("abc", np.ones(3), 1.0, 3), "buffer"),
    ((b"\x00" * 24, np.ones(3), 1.0, 3), "buffer"),
    ((np.ones(3), np.ones(3), "2", 3), "scalar"),
    ((np.ones(3), np.ones(3), 1.0, 3.5), "scalar"),
    ((np.ones(3), np.ones(3), 1.0, 2**70), "scalar"),
    ((np.ones(3), np.ones(3), 1.0, -1), "n"),
    ((np.ones(3), np.ones(3), 1.0, True), "bool"),
])
def test_a_call_that_does_not_match_the_signature_raises(tmp_path, args, match):
    k = kcache.KernelCache(tmp_path).compile_one(kcache.Source("axpy", AXPY, axpy_sig()))
    with pytest.raises(kcache.SignatureError, match=match):
        k(*args)


def test_a_read_only_buffer_for_a_written_parameter_raises(tmp_path):
    k = kcache.KernelCache(tmp_path).compile_one(kcache.Source("axpy", AXPY, axpy_sig()))
    y = np.ones(3)
    y.flags.writeable = False
    with pytest.raises(kcache.SignatureError, match="read-only"):
        k(y, np.ones(3), 1.0, 3)
    # A read buffer may be read-only (bytes are).
    k(np.zeros(3), np.frombuffer(np.ones(3).tobytes()), 1.0, 3)


def test_bad_signatures_and_sources_raise():
    with pytest.raises(kcache.SignatureError, match="element type"):
        kcache.Signature().buffer("x", "complex128", 4)
    with pytest.raises(kcache.SignatureError):
        kcache.Signature().buffer("x", "f32", "m").check()  # m is not a parameter
    with pytest.raises(TypeError):
        kcache.Signature().buffer("x", "f32", 1.5)
    with pytest.raises(TypeError):
        kcache.Source("k", None, kcache.Signature())
    with pytest.raises(TypeError):
        kcache.Source("k", "void k(void) {}", "not a signature")
    sig = kcache.Signature().buffer("a", "f32", ("m", "k")).buffer_mut("b", "f32", (4, "m")) \
        .scalar("m", "i64").scalar("k", "i64")
    assert [p[0] for p in sig.params] == ["a", "b", "m", "k"] and len(sig) == 4


def test_a_bad_batch_raises_or_answers_per_kernel(tmp_path):
    cache = kcache.KernelCache(tmp_path)
    with pytest.raises(TypeError):
        cache.compile([1, 2])
    with pytest.raises(TypeError):
        cache.compile(None)
    # Two different kernels under one symbol: the batch as a whole is refused.
    with pytest.raises(kcache.Error, match="one symbol"):
        cache.compile([scale_source("s", 2), scale_source("s", 3)])
    # A symbol that is no C identifier is that kernel's own failure.
    [odd] = cache.compile([kcache.Source("not an identifier", "void x(void) {}", kcache.Signature())])
    assert isinstance(odd, kcache.CompileError)
    # Garbage text: a compile error, not a crash.
    [junk] = cache.compile([kcache.Source("junk", "\x00\x01}{" * 1000, kcache.Signature())])
    assert isinstance(junk, kcache.CompileError)


def test_a_missing_compiler_or_an_unusable_directory_raises(tmp_path):
    with pytest.raises(kcache.BackendError):
        kcache.KernelCache(compiler="/nonexistent/cc")
    f = tmp_path / "file"
    f.write_text("not a directory")
    with pytest.raises(kcache.StoreError):
        kcache.KernelCache(f)


def test_threads_compile_through_one_cache_at_once(tmp_path):
    cache = kcache.KernelCache(tmp_path)
    results, errors = {}, []

    def work(t):
        try:
            sources = [scale_source(f"k{t}_{j}", t * 10 + j) for j in range(3)]
            kernels = cache.compile(sources)
            for j, k in enumerate(kernels):
                out = np.zeros(4, dtype=np.float32)
                k(out, np.ones(4, dtype=np.float32), 4)
                results[(t, j)] = out[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {(t, j): t * 10 + j for t in range(1, 5) for j in range(3)}
    # And calls of one kernel from many threads at once.
    k = cache.compile_one(scale_source("shared", 5))
    outs = [np.zeros(1000, dtype=np.float32) for _ in range(8)]
    ts = [threading.Thread(target=k, args=(o, np.ones(1000, dtype=np.float32), 1000)) for o in outs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all((o == 5).all() for o in outs)


def test_the_gil_is_released_while_compiling(tmp_path):
    """Another Python thread makes progress while a compile runs (with the GIL held through
    the compile it could not run at all between the two reads)."""
    cache = kcache.KernelCache(tmp_path)
    ticks = [0]
    done = threading.Event()

    def spin():
        while not done.is_set():
            ticks[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        before = ticks[0]
        cache.compile([scale_source(f"g{j}", j) for j in range(4)])
        during = ticks[0] - before
    finally:
        done.set()
        spinner.join()
    assert during > 0


def test_half_precision_buffers_pass_as_their_bits(tmp_path):
    sig = kcache.Signature().buffer_mut("out", "f16", "n").buffer("x", "f16", "n").scalar("n", "i64")
    text = "void neg(uint16_t *out, const uint16_t *x, int64_t n) { for (int64_t i = 0; i < n; ++i) out[i] = x[i] ^ 0x8000; }"
    k = kcache.KernelCache(tmp_path).compile_one(kcache.Source("neg", text, sig))
    x = np.array([1.5, -2.0, 0.25], dtype=np.float16)
    out = np.zeros(3, dtype=np.float16)
    k(out, x, 3)
    np.testing.assert_array_equal(out, -x)
    bits = np.zeros(3, dtype=np.uint16)
    k(bits, x.view(np.uint16), 3)
    np.testing.assert_array_equal(bits.view(np.float16), -x)
    with pytest.raises(kcache.SignatureError):
        k(np.zeros(3, dtype=np.float32), x, 3)


def test_two_processes_compiling_into_one_store_at_once(tmp_path):
    """Both get correct kernels; the store ends up holding them, so a third compiles 0."""
    procs = [subprocess.Popen([sys.executable, "-c", SECOND_PROCESS, str(tmp_path), AXPY],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = [o.split(maxsplit=2) for o, _ in outs]
    assert all(r[2] == "[10.0, 20.0, 30.0]\n" for r in runs), runs
    assert 1 <= sum(int(r[0]) for r in runs) <= 2, runs
    third = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(tmp_path), AXPY],
                           capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    assert third[:2] == ["0", "1"], third

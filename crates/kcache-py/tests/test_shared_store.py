"""One kernel store shared by a Rust process and a Python process: what one compiled, the
other loads (compiles nothing), under the same key, and both compute the same result. The
Rust process is tests/examples/kernel_store_peer.rs (CachedBackend<CcBackend> over Layout(DIR))."""

import subprocess

import numpy as np

import kcache

TEXT = "void twice(float *out, const float *x, int64_t n) { for (int64_t i = 0; i < n; ++i) out[i] = 2 * x[i]; }"
SIG = kcache.Signature().buffer_mut("out", "f32", "n").buffer("x", "f32", "n").scalar("n", "i64")


def run_peer(peer, directory, kernel_file):
    out = subprocess.run([str(peer), str(directory), "twice", str(kernel_file), "5"],
                         capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=", 1) for f in out.split())
    return int(fields["compiled"]), int(fields["loaded"]), fields["key"], fields["out"]


def python_side(directory):
    cache = kcache.KernelCache(directory)
    source = kcache.Source("twice", TEXT, SIG)
    (k,), census = cache.compile_census([source])
    out = np.zeros(5, dtype=np.float32)
    k(out, np.arange(5, dtype=np.float32), 5)
    return census["kernels_compiled"], census["kernels_loaded"], cache.key(source), out


def test_python_loads_what_rust_compiled(peer, tmp_path):
    f = tmp_path / "twice.c"
    f.write_text(TEXT)
    d = tmp_path / "cache"
    compiled, loaded, key, rust_out = run_peer(peer, d, f)
    assert (compiled, loaded) == (1, 0)
    py_compiled, py_loaded, py_key, out = python_side(d)
    assert (py_compiled, py_loaded) == (0, 1)
    assert py_key == key
    assert ",".join(str(int(v)) for v in out) == rust_out == "0,2,4,6,8"


def test_rust_loads_what_python_compiled(peer, tmp_path):
    f = tmp_path / "twice.c"
    f.write_text(TEXT)
    d = tmp_path / "cache"
    py_compiled, py_loaded, py_key, _ = python_side(d)
    assert (py_compiled, py_loaded) == (1, 0)
    compiled, loaded, key, rust_out = run_peer(peer, d, f)
    assert (compiled, loaded) == (0, 1)
    assert key == py_key and rust_out == "0,2,4,6,8"


def test_the_kcache_command_reads_the_store_python_wrote(kcache_cli, tmp_path):
    python_side(tmp_path)
    out = subprocess.run([str(kcache_cli), "verify", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    stats = subprocess.run([str(kcache_cli), "stats", str(tmp_path)], capture_output=True, text=True)
    assert stats.returncode == 0, stats.stderr
    assert "kernel" in stats.stdout

"""kcache.ObjectCompiler on its own (no tinygrad): C text in, an ELF relocatable object out;
renamed twins compiled once and answered with the first name's object; a second compiler
(as another process would be) over the same store compiles nothing; errors raise the right
exceptions with the compiler's message, never crash."""

import os
import shutil
import subprocess
import sys

import pytest

import kcache

ARGV = ["clang", "-c", "-x", "c", "-O2", "-fPIC", "-ffreestanding", "-fno-math-errno", "-nostdlib",
        "-fno-ident", "--target=x86_64-none-unknown-elf"]


def kernel(name: str, c: str = "1.0f") -> str:
    return (f"void {name}(float* restrict data0_4, float* restrict data1_4) {{\n"
            f"  for (int Lidx0 = 0; Lidx0 < 4; Lidx0++) *(data0_4+Lidx0) = (*(data1_4+Lidx0))+{c};\n}}\n")


@pytest.fixture
def argv():
    if shutil.which("clang") is None:
        pytest.fail("clang is not on the PATH")
    return ARGV


def test_twins_compile_once_and_a_second_compiler_loads_them(argv, tmp_path):
    oc = kcache.ObjectCompiler(tmp_path, argv)
    first = oc.compile(kernel("E_4"))
    assert first[:4] == b"\x7fELF"
    assert oc.compile(kernel("E_4n1")) == first  # the twin gets E_4's object, unchanged
    assert oc.key(kernel("E_4")) == oc.key(kernel("E_4n1"))
    other = oc.compile(kernel("E_4n2", "2.0f"))  # another meaning: its own object
    assert other != first and oc.key(kernel("E_4n2", "2.0f")) != oc.key(kernel("E_4"))
    assert oc.stats == {"compiled": 2, "from_store": 0, "from_memory": 1}
    assert oc.store_dir.endswith("kernels")
    # Another process over the same store: loads, compiles nothing, the same bytes.
    code = (f"import kcache, sys; oc = kcache.ObjectCompiler({str(tmp_path)!r}, {argv!r}); "
            f"sys.stdout.write(oc.compile({kernel('E_4n9')!r}).hex()); "
            "sys.stderr.write(repr(oc.stats))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert bytes.fromhex(p.stdout) == first
    assert p.stderr == repr({"compiled": 0, "from_store": 1, "from_memory": 0})


def test_errors_raise_with_the_compilers_message(argv, tmp_path):
    oc = kcache.ObjectCompiler(None, argv)
    with pytest.raises(kcache.CompileError, match="undeclared identifier 'nope'"):
        oc.compile("void bad(float *d) { d[0] = nope; }")
    with pytest.raises(ValueError, match="defines no function"):
        oc.compile("int x;")
    # A text whose name is given but not defined.
    with pytest.raises(kcache.CompileError):
        oc.compile(kernel("E_4"), name="E_5")
    for bad in (argv + ["-", "-o", "-"], argv + ["-MMD"], argv + ["@opts"], []):
        with pytest.raises(ValueError):
            kcache.ObjectCompiler(None, bad)
    with pytest.raises(kcache.BackendError):
        kcache.ObjectCompiler(None, ["/nonexistent/kcache-cc", "-c"])
    with pytest.raises(TypeError):
        kcache.ObjectCompiler(None, "clang -c")


def _corpus_kernels():
    """tinygrad's rendered kernels of the shared corpus ($KCACHE_CORPUS or ../shared/corpus):
    (name, text) each; `None` when the corpus is absent."""
    import gzip
    import json
    import os
    import pathlib

    root = os.environ.get("KCACHE_CORPUS") or str(pathlib.Path(__file__).resolve().parents[5] / "shared/corpus")
    d = pathlib.Path(root) / "tinygrad"
    if not d.is_dir():
        return None
    out = []
    for f in sorted(d.glob("*.jsonl.gz")):
        with gzip.open(f, "rt") as lines:
            for line in lines:
                r = json.loads(line)
                out.append((r["name"], r["src"]))
    return out


def _violations(kernels, key):
    """Groups of kernels with equal keys (by `key`) whose texts, each compiled alone with its
    own name replaced by one fixed name, do not compile to identical object bytes."""
    import re

    groups = {}
    for name, text in kernels:
        groups.setdefault(key(name, text), []).append((name, text))
    bad = []
    for members in groups.values():
        objects = set()
        for name, text in members:
            fresh = kcache.ObjectCompiler(None, ARGV)  # alone: no cache shared
            objects.add(fresh.compile(re.sub(rf"\b{name}\b", "kernel_0", text), name="kernel_0"))
        if len(objects) > 1:
            bad.append([n for n, _ in members])
    return bad


def test_equal_keys_over_tinygrads_corpus_compile_alike_and_a_naive_key_is_caught(argv):
    kernels = _corpus_kernels()
    if kernels is None:
        if os.environ.get("CI"):
            pytest.fail("the corpus (../shared/corpus or $KCACHE_CORPUS) is missing")
        pytest.skip("the corpus (../shared/corpus or $KCACHE_CORPUS) is absent")
    # The corpus's kernels, and each again under a minted twin's name.
    twins = [(f"{n}n7", text.replace(n, f"{n}n7")) for n, text in kernels if "_" in n and any(c.isdigit() for c in n)]
    everything = kernels + twins[:40]
    oc = kcache.ObjectCompiler(None, argv)
    real = _violations(everything, lambda n, t: oc.key(t, n))
    assert real == []
    keys = {oc.key(t, n) for n, t in everything}
    assert len(keys) < len(everything), "the twins share their kernels' keys"
    # A naive key blind to digits joins kernels of other sizes and constants: caught.
    import re

    naive = _violations(everything, lambda n, t: oc.key(re.sub(r"\d", "0", t), re.sub(r"\d", "0", n)))
    assert naive, "the oracle must catch a digit-blind key"

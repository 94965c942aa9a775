"""Keys from Python equal the Rust crates' keys for the same inputs, over the real kernel
corpus (tinygrad, TVM, OCANNL): the Rust side is the `kcache` command (`kcache canon` is
canonical-text's `canonical_kernel(..).key(parts)`, `kcache key` is kernel-cache's
`kernel_key`), run on the same text written to a file."""

import gzip
import json
import pathlib
import re
import subprocess

import pytest

import kcache


def corpus_kernels(corpus: pathlib.Path):
    """(label, name or None, text, declared names) of every corpus kernel, as the Rust corpus
    tests read them (tinygrad: params, locals and ranges; OCANNL: its node arrays)."""
    out = []
    for path in sorted((corpus / "tinygrad").iterdir()):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                declared = [n for k in ("params", "locals", "ranges") for n in r.get(k) or []]
                out.append((f"{path.name} {r['name']}", r["name"], r["src"], declared))
    for path in sorted((corpus / "tvm").iterdir()):
        out.append((path.name, None, path.read_text(), []))
    for path in sorted((corpus / "ocannl").iterdir()):
        text = path.read_text()
        nodes = sorted(set(re.findall(r"\bn\d+(?:_\w+)?\b", text)))
        out.append((path.name, None, text, nodes))
    return out


def cli(kcache_cli, *args) -> str:
    done = subprocess.run([str(kcache_cli), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_corpus_keys_equal_the_rust_keys(corpus, kcache_cli, tmp_path):
    kernels = corpus_kernels(corpus)
    assert len(kernels) > 150, len(kernels)
    checked = 0
    for i, (label, name, text, declared) in enumerate(kernels):
        f = tmp_path / f"k{i}.c"
        f.write_bytes(text.encode())
        named = ["--name", name] if name else []
        # Default names (names read from the text), with an extra part.
        py = kcache.canonical_key(text, name, extra_parts=["-O2"])
        rust = cli(kcache_cli, "canon", str(f), *named, "--part=-O2", "--key-only")
        assert py == rust, label
        # The renderer's declared names as bound.
        if declared:
            names = kcache.Names(bound=declared)
            py = kcache.canonical_key(text, name, names)
            rust = cli(kcache_cli, "canon", str(f), *named, "--bound", ",".join(declared), "--key-only")
            assert py == rust, label
        # kernel-cache's key, own name kept as spelled.
        if name:
            names = kcache.Names(kernel_name_by_role=False)
            py = kcache.kernel_key(text, name, names, options=["-O2", "-fPIC"], identity=b"cc 12")
            rust = cli(
                kcache_cli, "key", str(f), "--symbol", name, "--spelled-kernel-name",
                "--option=-O2", "--option=-fPIC", "--identity", "cc 12",
            )
            assert py == rust, label
        checked += 1
    assert checked == len(kernels)


def test_renamed_twins_share_a_key_and_a_changed_kernel_does_not():
    a = "void k(float *out) { for (int i3 = 0; i3 < 4; ++i3) out[i3] = 1.0f; }"
    b = "void k(float *out) { for (int j7 = 0; j7 < 4; ++j7) out[j7] = 1.0f; }"
    c = "void k(float *out) { for (int i3 = 0; i3 < 5; ++i3) out[i3] = 1.0f; }"
    assert kcache.canonical_key(a, "k") == kcache.canonical_key(b, "k")
    assert kcache.canonical_key(a, "k") != kcache.canonical_key(c, "k")
    # Names listing nothing, and not reading the text: the spellings matter again.
    listed_only = kcache.Names(text_names=False, minted_shapes=False)
    assert kcache.canonical_key(a, "k", listed_only) != kcache.canonical_key(b, "k", listed_only)


def test_minted_kernel_names_and_role():
    a = "void E_4_12(float *out) { out[0] = 1.0f; }"
    b = "void E_4_97(float *out) { out[0] = 1.0f; }"
    assert kcache.canonical_key(a, "E_4_12") == kcache.canonical_key(b, "E_4_97")
    spelled = kcache.Names(kernel_name_by_role=False)
    assert kcache.canonical_key(a, "E_4_12", spelled) != kcache.canonical_key(b, "E_4_97", spelled)
    minted = kcache.Names(kernel_name_by_role=False, minted_kernel_separator="_")
    assert minted.minted_kernel_separator == "_"


def test_canonicalize_explains_the_key():
    text = 'void k(float *out) { float acc0 = 0; out[0] = acc0; printf("%s", __func__); }'
    c = kcache.canonicalize(text, "k")
    assert c.key() == kcache.canonical_key(text, "k")
    assert c.refusals, "an observed spelling refuses renaming"
    assert c.kept_names
    plain = kcache.canonicalize("void k(float *out) { float acc0 = 0; out[0] = acc0; }", "k")
    assert "acc0" in plain.renamed and "kc" in plain.text
    assert plain.key([b"x"]) != plain.key()


def test_names_round_trip_their_options():
    n = kcache.Names(bound=["b", "a"], free=["f"], keep=["exp2"], observers=["LOG"],
                     derivations=[("d_", "_x")], minted_shapes=False)
    assert n.bound == ["a", "b"] and n.free == ["f"] and n.keep == ["exp2"]
    assert "LOG" in n.observers and "assert" in n.observers
    assert n.derivations == [("d_", "_x")] and n.minted_shapes is False
    assert "Names(" in repr(n)


@pytest.mark.parametrize("bad", [None, 3, b"void k(){}", ["a"], object()])
def test_a_key_of_something_not_text_raises_type_error(bad):
    with pytest.raises(TypeError):
        kcache.canonical_key(bad)


def test_garbage_and_huge_text_are_keyed_without_a_crash():
    for text in ["", "\x00\x01\x02", "}}}}{{{{", "é" * 1000, "/*", "#define X(", "\ud7ff" * 3]:
        assert len(kcache.canonical_key(text)) == 64
    huge = "void k(float *o) {" + " o[0] += 1.0f;" * 400_000 + "}"
    assert len(huge) > 5_000_000
    assert len(kcache.canonical_key(huge, "k")) == 64
    with pytest.raises(UnicodeEncodeError):
        kcache.canonical_key("\ud800")  # a lone surrogate is not UTF-8

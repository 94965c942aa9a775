"""tinygrad's own `test/test_tiny.py` (from its source distribution) on the CPU device, run
with tinygrad's compiler and with kcache's (`python -m kcache.tinygrad -m pytest`): the same
tests pass both ways, none fails, and a second run over the same store compiles nothing (its
compile workers included)."""

import xml.etree.ElementTree as ET

from tinygrad_support import outcomes


def _results(xml_path):
    """{test name: "passed" | "skipped" | "failed"} from a junit XML report."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        state = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        out[case.get("name")] = state
    return out


def test_test_tiny_passes_with_the_kcache_compiler_as_with_tinygrads(runner, tinygrad_test_dir, tmp_path):
    tiny = tinygrad_test_dir / "test_tiny.py"
    common = ["-m", "pytest", str(tiny), "-q", "-p", "no:cacheprovider"]
    own_xml, k1_xml, k2_xml = tmp_path / "own.xml", tmp_path / "k1.xml", tmp_path / "k2.xml"
    runner.run(common + [f"--junitxml={own_xml}"], cachedb=tmp_path / "own.db",
               cwd=tinygrad_test_dir.parent)
    store, log1, log2 = tmp_path / "store", tmp_path / "log1", tmp_path / "log2"
    runner.run(common + [f"--junitxml={k1_xml}"], store=store, log=log1,
               cachedb=tmp_path / "k1.db", cwd=tinygrad_test_dir.parent)
    runner.run(common + [f"--junitxml={k2_xml}"], store=store, log=log2,
               cachedb=tmp_path / "k2.db", cwd=tinygrad_test_dir.parent)
    own, k1, k2 = _results(own_xml), _results(k1_xml), _results(k2_xml)
    assert "failed" not in own.values(), own
    assert k1 == own, (k1, own)
    assert k2 == own, (k2, own)
    passed = sorted(n for n, s in own.items() if s == "passed")
    # tinygrad 0.14.0's file: 21 tests, the two image tests skip off the CL device.
    assert len(passed) >= 19, passed
    first, second = outcomes(log1), outcomes(log2)
    assert first["compiled"] > 0, first
    # A second process (and its workers) over the same store compiles nothing.
    assert second["compiled"] == 0, second
    assert second["from_store"] > 0, second
    print(f"test_tiny.py: {len(passed)} passed both ways: {passed}; kcache first run {first}, second {second}")

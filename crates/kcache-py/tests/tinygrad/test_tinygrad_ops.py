"""tinygrad's CPU device compiling through kcache: ops over several shapes and dtypes are
right (checked against numpy) and bit for bit what tinygrad's own compiler gives; a renamed
twin is answered with the object compiled under the first name, which tinygrad's loader runs
correctly under the new one; two tinygrad processes share one store at once, and a third
compiles nothing."""

import numpy as np

from tinygrad_support import SCRIPTS, outcomes, read_log


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_ops_are_right_and_identical_to_tinygrads_own_compiler(runner, tmp_path):
    own, via = tmp_path / "own.npz", tmp_path / "kcache.npz"
    runner.run([SCRIPTS / "ops.py", own], cachedb=tmp_path / "own.db")
    log = tmp_path / "log"
    runner.run([SCRIPTS / "ops.py", via], store=tmp_path / "store", log=log, cachedb=tmp_path / "k.db")
    a, b = _load(own), _load(via)
    assert a.keys() == b.keys() and len(a) > 80
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k
    assert outcomes(log)["compiled"] > 0


def test_a_renamed_twin_is_answered_from_the_store_and_runs_under_its_new_name(runner, tmp_path):
    store = tmp_path / "store"
    serial = {"PARALLEL": "0"}  # every compile in this process, where the renaming is
    first_log, twin_log = tmp_path / "first", tmp_path / "twin"
    first = runner.run([SCRIPTS / "twin.py"], store=store, log=first_log, extra=serial,
                       cachedb=tmp_path / "a.db")
    twin = runner.run([SCRIPTS / "twin.py", "n1"], store=store, log=twin_log, extra=serial,
                      cachedb=tmp_path / "b.db")
    result = [line for line in first.splitlines() if line.startswith("result")]
    assert result and result == [line for line in twin.splitlines() if line.startswith("result")]
    # The computation's kernels (minted names: `E_16_4` -> `E_16_4n1`) are answered with the
    # objects stored under their first names; tinygrad's device programs (`signal_prog`,
    # not minted names: canonical-text keys them as spelled) are compiled under the new name.
    renamed = [r for r in read_log(twin_log) if r[2].endswith("n1") and any(c.isdigit() for c in r[2][:-2])]
    assert renamed, read_log(twin_log)
    assert all(r[1] == "from_store" for r in renamed), renamed
    first_keys = {r[3] for r in read_log(first_log)}
    assert {r[3] for r in renamed} <= first_keys
    spelled = [r for r in read_log(twin_log) if r[2] == "signal_progn1"]
    assert spelled and spelled[0][1] == "compiled", spelled


def test_two_processes_share_one_store_at_once_and_a_third_compiles_nothing(runner, tmp_path):
    store = tmp_path / "store"
    logs = [tmp_path / f"log{i}" for i in range(3)]
    procs = [runner.start([SCRIPTS / "ops.py", tmp_path / f"out{i}.npz"], store=store, log=logs[i],
                          cachedb=tmp_path / f"c{i}.db") for i in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=900)
        assert p.returncode == 0, out[-4000:]
    runner.run([SCRIPTS / "ops.py", tmp_path / "out2.npz"], store=store, log=logs[2],
               cachedb=tmp_path / "c2.db")
    results = [_load(tmp_path / f"out{i}.npz") for i in range(3)]
    for k in results[0]:
        assert results[0][k].tobytes() == results[1][k].tobytes() == results[2][k].tobytes(), k
    both = [outcomes(l) for l in logs[:2]]
    assert sum(o["compiled"] for o in both) > 0, both
    third = outcomes(logs[2])
    assert third["compiled"] == 0 and third["from_store"] > 0, third

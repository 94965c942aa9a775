"""Ops over several shapes and dtypes on tinygrad's CPU device: writes every result to the
.npz file named by argv[1] and checks each against numpy (exits 1 on a mismatch). With
$KCACHE_TINYGRAD set it is run through `python -m kcache.tinygrad`."""
import sys

import numpy as np
from tinygrad import Tensor, dtypes

rng = np.random.default_rng(0)
out, bad = {}, []
for dt, npdt, tol in [(dtypes.float32, np.float32, 1e-5), (dtypes.int32, np.int32, 0),
                      (dtypes.float16, np.float16, 1e-2)]:
  for shape in [(1,), (7,), (16, 16), (3, 5, 7)]:
    a = (rng.standard_normal(shape) * 4).astype(npdt)
    b = (rng.standard_normal(shape) * 4).astype(npdt)
    ta, tb = Tensor(a), Tensor(b)
    cases = {
      "add": (ta + tb, a + b), "mul": (ta * tb, a * b), "sub": (ta - tb, a - b),
      "max": (ta.maximum(tb), np.maximum(a, b)), "relu": (ta.relu(), np.maximum(a, 0)),
      "where": ((ta > tb).where(ta, tb), np.where(a > b, a, b)),
      "sum": (ta.sum(axis=-1), a.sum(axis=-1, dtype=npdt)), "amax": (ta.max(axis=0), a.max(axis=0)),
    }
    if dt != dtypes.int32:
      cases["exp"] = ((ta / 8).exp(), np.exp(a / npdt(8)))
      cases["sqrt"] = (ta.abs().sqrt(), np.sqrt(np.abs(a)))
    if len(shape) == 2:
      cases["matmul"] = (ta @ tb, (a.astype(np.float64) @ b.astype(np.float64)).astype(npdt))
    for name, (t, ref) in cases.items():
      got = t.numpy()
      out[f"{dt.name}-{'x'.join(map(str, shape))}-{name}"] = got
      rtol = tol * (8 if name in ("matmul", "sum") else 1)
      if got.shape != ref.shape or not np.allclose(got.astype(np.float64), ref.astype(np.float64),
                                                     rtol=rtol, atol=rtol * 4):
        bad.append(f"{dt.name} {shape} {name}")
np.savez(sys.argv[1], **out)
print(f"{len(out)} results, {len(bad)} wrong")
if bad:
  print("\n".join(bad))
  sys.exit(1)

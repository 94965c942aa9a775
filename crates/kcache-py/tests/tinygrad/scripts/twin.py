"""A renamed twin through tinygrad's own loader: computes `(a * 3 + 1)` over 64 floats on the
CPU device (with tinygrad's rounding: checked against numpy to 1e-6) with every kernel's text renamed (its name given the suffix argv[1], as a renderer
counting repeats would: `E_16_4` -> `E_16_4n1`) before kcache compiles it, so kcache answers it
from the store with the object compiled under the first name; checks the result against numpy
and prints it (exits 1 on a mismatch)."""
import re
import sys

import numpy as np

import kcache.tinygrad as kt

suffix = sys.argv[1] if len(sys.argv) > 1 else ""
if suffix:
  compile_via_kcache = kt.KcacheClangCompiler.compile

  def renamed(self, src):
    names = re.findall(r"\bvoid\s+(\w+)\s*\(", src)
    if names:
      src = re.sub(rf"\b{names[-1]}\b", names[-1] + suffix, src)
    return compile_via_kcache(self, src)

  kt.KcacheClangCompiler.compile = renamed
kt.install()

from tinygrad import Tensor  # noqa: E402

a = np.arange(64, dtype=np.float32) / 7
got = (Tensor(a) * 3 + 1).numpy()
ok = np.allclose(got, a * 3 + 1, rtol=1e-6)
print("result", got.tobytes().hex())
sys.exit(0 if ok else 1)

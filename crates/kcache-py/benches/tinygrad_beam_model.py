"""One process's BEAM search over a small model on tinygrad's CPU device (two convolutions, a
matmul layer and its reductions): prints `seconds <s>` (the search and run, from the model's
construction to its realized output, without Python's and tinygrad's start-up) and
`output <hex>` (the result's bytes). The caller chooses kcache or tinygrad's own compiler
(`python -m kcache.tinygrad` with $KCACHE_TINYGRAD, or plain python), the model
($MODEL_SIZE: the images' side, default 16; MODEL_LAYERS=small: one convolution and one
matmul layer; tiny: one matmul layer), the cache database
($CACHEDB), the BEAM width ($BEAM) and IGNORE_BEAM_CACHE=1 (tinygrad's BEAM result cache
ignored, so every process searches and compiles its candidates again), all in the environment:
tinygrad reads them when it is imported, which `python -m kcache.tinygrad` does before this
script runs."""
import os
import time

from tinygrad import Tensor, nn  # noqa: E402

size = int(os.environ.get("MODEL_SIZE", "16"))
Tensor.manual_seed(0)
start = time.perf_counter()
if os.environ.get("MODEL_LAYERS") == "tiny":  # one matmul layer
  layers = [lambda x: x.flatten(1), nn.Linear(size * size, 10)]
elif os.environ.get("MODEL_LAYERS") == "small":  # one convolution, one matmul layer
  layers = [nn.Conv2d(1, 4, 3), Tensor.relu, lambda x: x.flatten(1), nn.Linear(4 * (size - 2) ** 2, 10)]
else:
  layers = [nn.Conv2d(1, 8, 3), Tensor.relu, nn.Conv2d(8, 8, 3), Tensor.relu,
            lambda x: x.flatten(1), nn.Linear(8 * (size - 4) ** 2, 32), Tensor.relu, nn.Linear(32, 10)]
x = Tensor.rand(4, 1, size, size)
out = x.sequential(layers).softmax().numpy()
print(f"seconds {time.perf_counter() - start:.4f}")
print(f"output {out.tobytes().hex()}")

"""kcache: caches for ML compiler backends, from Python.

- ``canonical_key`` / ``canonicalize`` / ``kernel_key`` with ``Names``: the identity of a
  kernel's text up to the names it owns (two renders of one kernel share a key);
- ``KernelCache``: compile C kernels in batches through the system compiler, kept in memory
  and in a persistent kernel store on disk, and call them through a checked ``Signature``;
- ``ScheduleCache``: the winning schedule of a loop nest, on disk, replayable by another
  process, with misses that say why;
- ``MemoTable``: one search's memo table.

Every error kcache raises is a ``kcache.Error`` (see its subclasses).
"""

from kcache._kcache import *  # noqa: F401,F403
from kcache._kcache import __version__  # noqa: F401
from kcache import _kcache as _native

__all__ = [name for name in dir(_native) if not name.startswith("_")]

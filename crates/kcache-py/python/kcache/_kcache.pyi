"""Type stubs of the native module kcache._kcache (re-exported by `kcache`)."""

from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from typing import Any, Literal, Optional, Union

__version__: str

# ---- errors -----------------------------------------------------------------------------

class Error(Exception):
    """The base class of every exception kcache raises; its message is the Rust error's."""

class CompileError(Error):
    """A kernel, or the program it was compiled in, did not compile: the compiler's message.

    As a per-kernel outcome of `KernelCache.compile` it carries `symbols` (the kernels it
    names), `remembered` (the store remembered the failure rather than compiling) and `alone`
    (the kernel's own unit failed, not its whole program)."""

    symbols: list[str]
    remembered: bool
    alone: bool

class SignatureError(Error):
    """A kernel signature is invalid, or a call's arguments do not match it: nothing ran."""

class StoreError(Error):
    """A store's directory, lock or file could not be used."""

class ScheduleError(Error):
    """The schedule cache refused an operation."""

class BackendError(Error):
    """The compiler could not be run or identified."""

# ---- canonical keys ---------------------------------------------------------------------

Part = Union[bytes, str]

class Names:
    """Which names a key may rename: canonical-text's `Names`, option for option."""

    def __init__(
        self,
        *,
        bound: Sequence[str] = ...,
        free: Sequence[str] = ...,
        keep: Sequence[str] = ...,
        observers: Sequence[str] = ...,
        derivations: Sequence[tuple[str, str]] = ...,
        minted_kernel_separator: Optional[str] = None,
        minted_shapes: bool = True,
        text_names: bool = True,
        kernel_name_by_role: bool = True,
        included_macros_known: bool = False,
    ) -> None: ...
    @property
    def bound(self) -> list[str]: ...
    @property
    def free(self) -> list[str]: ...
    @property
    def keep(self) -> list[str]: ...
    @property
    def observers(self) -> list[str]: ...
    @property
    def derivations(self) -> list[tuple[str, str]]: ...
    @property
    def minted_kernel_separator(self) -> Optional[str]: ...
    @property
    def minted_shapes(self) -> bool: ...
    @property
    def text_names(self) -> bool: ...
    @property
    def kernel_name_by_role(self) -> bool: ...
    @property
    def included_macros_known(self) -> bool: ...

class Canonical:
    """A kernel's canonical form: its key and what the key saw."""

    def key(self, extra_parts: Sequence[Part] = ...) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def renamed(self) -> list[str]: ...
    @property
    def pinned(self) -> list[str]: ...
    @property
    def refusals(self) -> list[str]: ...
    @property
    def kept_names(self) -> list[str]: ...
    @property
    def kernel_name_by_role(self) -> bool: ...
    @property
    def kernel_name_kept(self) -> Optional[str]: ...

def canonical_key(
    text: str,
    kernel_name: Optional[str] = None,
    names: Optional[Names] = None,
    extra_parts: Sequence[Part] = ...,
) -> str: ...
def canonicalize(
    text: str, kernel_name: Optional[str] = None, names: Optional[Names] = None
) -> Canonical: ...
def kernel_key(
    text: str,
    symbol: str,
    names: Optional[Names] = None,
    options: Sequence[str] = ...,
    identity: Part = b"",
) -> str: ...

# ---- kernels ----------------------------------------------------------------------------

Elem = Literal[
    "f32", "float32", "float", "f64", "float64", "double", "i32", "int32", "int32_t", "int",
    "i64", "int64", "int64_t", "u8", "uint8", "uint8_t", "f16", "float16", "half",
]
ExtentLike = Union[int, str, Sequence[Union[int, str]]]

class Signature:
    """A kernel's C signature; immutable (each builder method returns a new one)."""

    def __init__(self) -> None: ...
    def buffer(self, name: str, elem: Elem, extent: ExtentLike) -> Signature: ...
    def buffer_mut(self, name: str, elem: Elem, extent: ExtentLike) -> Signature: ...
    def scalar(self, name: str, elem: Elem) -> Signature: ...
    def check(self) -> None: ...
    @property
    def params(self) -> list[tuple[str, str, str, Optional[str]]]: ...
    def __len__(self) -> int: ...

class Source:
    """A kernel to compile: C text defining `symbol` with `signature`, after `prelude`."""

    def __init__(
        self, symbol: str, text: str, signature: Signature, prelude: Optional[str] = None
    ) -> None: ...
    @property
    def symbol(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def prelude(self) -> str: ...
    @property
    def signature(self) -> Signature: ...

class Kernel:
    """A compiled kernel; call it with one argument per parameter (checked)."""

    def __call__(self, *args: Any) -> None: ...
    @property
    def symbol(self) -> str: ...
    @property
    def signature(self) -> Signature: ...
    @property
    def program_path(self) -> str: ...
    @property
    def address(self) -> int: ...

class KernelCache:
    """C kernels compiled in batches, cached in memory and in the kernel store at dir/kernels."""

    def __init__(
        self,
        dir: Union[str, PathLike[str], None] = None,
        *,
        capacity_bytes: int = ...,
        compiler: Optional[str] = None,
        work_dir: Union[str, PathLike[str], None] = None,
    ) -> None: ...
    def compile(
        self, sources: Iterable[Source], *, options: Sequence[str] = ..., names: Optional[Names] = None
    ) -> list[Union[Kernel, CompileError]]: ...
    def compile_census(
        self, sources: Iterable[Source], *, options: Sequence[str] = ..., names: Optional[Names] = None
    ) -> tuple[list[Union[Kernel, CompileError]], dict[str, int]]: ...
    def compile_one(
        self, source: Source, *, options: Sequence[str] = ..., names: Optional[Names] = None
    ) -> Kernel: ...
    def key(
        self, source: Source, *, options: Sequence[str] = ..., names: Optional[Names] = None
    ) -> str: ...
    @property
    def compiler_identity(self) -> str: ...
    @property
    def store_dir(self) -> Optional[str]: ...
    def stats(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> KernelCache: ...
    def __exit__(self, *exc: object) -> bool: ...

# ---- schedules --------------------------------------------------------------------------

class Lookup:
    """What a lookup answered: a hit or a miss that says why. True exactly on a hit."""

    hit: bool
    ops: Optional[list[Any]]
    times: list[float]
    baseline_time: Optional[float]
    key: Optional[str]
    miss: Optional[str]
    kind: str
    differing: list[str]
    changes: list[tuple[str, str]]
    def __bool__(self) -> bool: ...

class ScheduleCache:
    """Schedules of loop code on disk: lookup, store (keep-faster), seeds; plain data."""

    def __init__(
        self,
        dir: Union[str, PathLike[str]],
        backend: str,
        *,
        device: Optional[str] = None,
        compiler: Optional[str] = None,
        options: Sequence[str] = ...,
        prelude: Optional[str] = None,
        schedule_format: str = "",
        keep_faster: bool = True,
    ) -> None: ...
    def key(self, code: Any) -> Optional[str]: ...
    def lookup(self, code: Any) -> Lookup: ...
    def store(
        self, code: Any, ops: Iterable[Any], times: Sequence[float], baseline_time: Optional[float] = None
    ) -> dict[str, Optional[str]]: ...
    def seeds(self, code: Any) -> list[dict[str, Any]]: ...
    @property
    def dir(self) -> str: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> ScheduleCache: ...
    def __exit__(self, *exc: object) -> bool: ...

# ---- memo -------------------------------------------------------------------------------

class MemoTable:
    """A single-flight memo table for one search, keyed by plain data.

    A `compute` that asks (through `get`/`fetch`) for a key in flight on its own call chain
    (its own key, or A -> B -> A through other keys or tables) gets that key computed again
    without storing, never a wait for itself; more than 64 such computations nested, or a
    chain of more than 1000 requests (for a key not stored), raise `RecursionError`. Cycles across threads (a
    compute waiting for a thread that asks for its key, two threads each computing the
    other's key) are not detected and wait forever: a caller error."""

    def __init__(self, tag: str = "kcache-py/memo") -> None: ...
    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        """The value stored for `key`, else `compute()`'s (stored; computed without storing
        when `key` is in flight on the calling compute's own chain)."""
    def fetch(self, key: Any, compute: Callable[[], Any]) -> tuple[Any, bool]: ...
    def key(self, key: Any) -> str: ...
    @property
    def tag(self) -> str: ...
    def stats(self) -> dict[str, int]: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> MemoTable: ...
    def __exit__(self, *exc: object) -> bool: ...

def memo_key(key: Any, tag: str = "kcache-py/memo") -> str: ...

# ---- object -----------------------------------------------------------------------------

class ObjectCompiler:
    """C kernels compiled to ELF relocatable objects with a caller-given command, keyed
    canonically, cached in memory and in the kernel store at store_dir/kernels."""

    def __init__(
        self,
        store_dir: Union[str, PathLike[str], None],
        argv: Sequence[str],
        *,
        capacity_bytes: int = ...,
        work_dir: Union[str, PathLike[str], None] = None,
    ) -> None: ...
    def compile(self, src: str, name: Optional[str] = None) -> bytes: ...
    def key(self, src: str, name: Optional[str] = None) -> str: ...
    @property
    def stats(self) -> dict[str, int]: ...
    @property
    def identity(self) -> str: ...
    @property
    def argv(self) -> list[str]: ...
    @property
    def store_dir(self) -> Optional[str]: ...

"""Compiled programs kept across processes: no tracing, no lowering, on the second run.

The persistent compile cache (`jaxcache`) saves XLA's compilation, but every process still
traces the Python function and lowers it to find the program's cache key: for the fitting
engine's round program about 0.3-0.4 s of a command line's CPU time per precision (a fit loads
two). `compiled(fn, args, key, name)` keys the program by what the caller says identifies `fn`
(`key`: its code and every constant it closes over), the shapes and dtypes of `args`, the JAX
configuration that changes tracing, and the platform (JAX and jaxlib versions, the backend, the
devices, XLA_FLAGS, the host CPU), and keeps the compiled executable
(`jax.experimental.serialize_executable`) in `<compile cache>/scalelab-programs/`. A later process
with the same key loads it (~0.1 s, what the compile cache's own load costs) and calls it.

It is on only where the persistent compile cache is (`jaxcache.enable_compile_cache()`: the
CLI, the run loops); elsewhere `compiled` returns None and the caller runs its own `jax.jit`.
The same key must mean the same function: a caller that cannot say so (a user's closure) passes
no key. The folder keeps the `MAX_KEPT` most recently used programs.

Two guards. An executable loaded from the compile cache does not serialise whole in this jaxlib
(its copy fails to run: "Function ... not found"), so a program is compiled under a name of its
own (`name`, the key's digest and a random suffix per compile): the compile cache cannot hold
it before this module compiles it, not even after an earlier compile of the same key. And
every executable runs once (`check(prog)`, the caller's smallest call) before it is written or
used: one that fails is dropped, and the caller's jit runs instead.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import pickle
import platform
import threading
import uuid
from functools import lru_cache
from typing import Any, Callable

FORMAT = 2  # bump when what a stored program holds changes
SUBDIR = "scalelab-programs"
MAX_KEPT = 64  # programs kept (~0.6 MB each for the fitting engine's), the most recently used
# JAX settings that change what a traced function becomes (dtypes, promotion, precision, checks).
CONFIG_NAMES = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
    "jax_enable_checks",
    "jax_debug_nans",
    "jax_debug_infs",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_default_device",
)

_loaded: dict[str, Callable] = {}  # full key -> program, this process
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def directory() -> pathlib.Path | None:
    """Where programs are kept: beside the persistent compile cache when this process has it on
    (`jaxcache.enable_compile_cache`), else None."""
    # JAX loads with the command that needs it (a fast --help elsewhere)
    import jax

    root = jax.config.jax_compilation_cache_dir
    if not root or not jax.config.jax_enable_compilation_cache:
        return None
    return pathlib.Path(root) / SUBDIR


def compiled(
    fn: Callable, args: tuple, key: str, name: str, check: Callable[[Callable], Any] | None = None
) -> Callable | None:
    """`jax.jit(fn)` compiled for `args` (a tuple of pytrees of arrays and Python scalars), loaded
    from or kept in `directory()`; call it as `prog(*args)` with arguments of the same shapes and
    dtypes. `key` identifies `fn` (code and constants); `check(prog)` runs it once (its result is
    waited for) before it is trusted. None: the cache is off, JIT is disabled, or compiling
    failed; the caller jits `fn` itself (and meets the error, if there is one)."""
    # JAX loads with the command that needs it (a fast --help elsewhere)
    import jax

    folder = directory()
    if folder is None or jax.config.jax_disable_jit:
        return None
    full = "\n".join((f"format {FORMAT}", key, _avals(args), _config(), _platform()))
    if full in _loaded:
        return _loaded[full]
    with _locks_guard:
        lock = _locks.setdefault(full, threading.Lock())
    with lock:  # one thread loads or compiles it; another waiting for the same program reuses it
        if full not in _loaded:
            digest = hashlib.sha256(full.encode()).hexdigest()[:32]
            path = folder / f"{name}-{digest}.xla"
            prog = _load(path, full, check)
            if prog is None:
                # a fresh name per compile: an earlier compile of this key (this process, or one
                # whose stored file was since pruned) sits in JAX's cache, and a copy of that
                # cannot be kept
                jit_name = f"{name}_{digest[:16]}_{uuid.uuid4().hex[:8]}"
                prog = _compile(fn, args, jit_name, path, full, check)
            if prog is None:
                return None
            _loaded[full] = prog
    return _loaded[full]


def _load(path: pathlib.Path, full: str, check: Callable | None) -> Callable | None:
    """The program stored at `path` for exactly this key, run once by `check`; None if there is
    none, or it is not this key's, or it fails (then the file is removed)."""
    # jaxlib's executable serialisation: loaded with the command that needs it (see `compiled`)
    from jax.experimental import serialize_executable

    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        fmt, stored_key, payload, in_tree, out_tree, device_ids = pickle.loads(blob)
        if fmt != FORMAT or stored_key != full:
            raise ValueError("another program under this name")
        prog = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=_devices(device_ids)
        )
        if check is not None:
            check(prog)
        os.utime(path)  # used now: `_prune` keeps the most recently used
        return prog
    except Exception:  # noqa: BLE001 - a truncated, foreign or failing file: compile anew
        path.unlink(missing_ok=True)
        return None


def _compile(
    fn: Callable, args: tuple, jit_name: str, path: pathlib.Path, full: str, check: Callable | None
) -> Callable | None:
    """Compile `fn` for `args` under a name of its own and keep it at `path` once a copy read
    back from its serialised form has passed `check` (None if compiling fails)."""
    # JAX loads with the command that needs it (see `compiled`)
    import jax
    from jax.experimental import serialize_executable

    def program(*a):
        return fn(*a)

    program.__name__ = program.__qualname__ = jit_name
    try:
        prog = jax.jit(program).lower(*args).compile()
    except Exception:  # noqa: BLE001 - the caller's own jit reports a real error
        return None
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(prog)
        device_ids = tuple(d.id for d in prog.runtime_executable().local_devices())
        copy = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=_devices(device_ids)
        )
        if check is not None:
            check(copy)
        blob = pickle.dumps((FORMAT, full, payload, in_tree, out_tree, device_ids))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        _prune(path.parent)
    except Exception:  # noqa: BLE001 - not kept: this process still runs the program it compiled
        pass
    return prog


def _prune(folder: pathlib.Path) -> None:
    """Keep the `MAX_KEPT` most recently used programs (every edit of the code they come from
    keys new ones; the old ones are never loaded again)."""
    kept = sorted(folder.glob("*.xla"), key=lambda f: f.stat().st_mtime, reverse=True)
    for old in kept[MAX_KEPT:]:
        old.unlink(missing_ok=True)


def _devices(ids: tuple[int, ...]) -> list:
    """The devices a program runs on, by id (a one-device program on a host with several)."""
    # JAX loads with the command that needs it (see `compiled`)
    import jax

    by_id = {d.id: d for d in jax.devices()}
    return [by_id[i] for i in ids]


def _avals(args: tuple) -> str:
    """The call's signature: the pytree structure, then each leaf's shape and dtype (a Python
    scalar by its type: JAX traces it weakly typed)."""
    # JAX loads with the command that needs it (see `compiled`)
    import jax
    import numpy as np

    leaves, tree = jax.tree.flatten(args)
    parts = [str(tree)]
    for v in leaves:
        if isinstance(v, (bool, int, float, complex)):
            parts.append(f"python {type(v).__name__}")
        else:
            weak = " weak" if getattr(v, "weak_type", False) else ""
            parts.append(f"{tuple(np.shape(v))} {np.dtype(v.dtype)}{weak}")
    return " | ".join(parts)


def _config() -> str:
    """The JAX settings (`CONFIG_NAMES`) in force in this thread."""
    # JAX loads with the command that needs it (see `compiled`)
    import jax

    return " ".join(f"{n}={getattr(jax.config, n, None)!r}" for n in CONFIG_NAMES)


@lru_cache(maxsize=None)
def _platform() -> str:
    """What a compiled executable is tied to: JAX and jaxlib, the backend and its devices, XLA_FLAGS
    and the host CPU (an executable uses the instructions of the CPU it was compiled on)."""
    # JAX loads with the command that needs it (see `compiled`)
    import jax
    import jaxlib

    devices = jax.devices()
    backend = devices[0].client
    return " | ".join(
        (
            f"jax {jax.__version__} jaxlib {jaxlib.__version__}",
            f"{backend.platform} {backend.platform_version}",
            f"{len(devices)} x {devices[0].device_kind}",
            f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}",
            _cpu(),
        )
    )


def _cpu() -> str:
    """The host CPU: model and instruction-set flags where Linux lists them, else `platform`'s names."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    wanted = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
    seen: dict[str, str] = {}
    for line in lines:
        field, _, value = line.partition(":")
        field = field.strip()
        if field in wanted and field not in seen:
            seen[field] = value.strip()
    described = "; ".join(f"{k}: {v}" for k, v in seen.items())
    return f"{platform.machine()} {platform.processor()} {described}"

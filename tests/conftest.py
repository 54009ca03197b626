"""Test-wide set-up: 8 simulated CPU devices (must happen before jax is imported anywhere), and
the `shared_data` fixture for the public datasets in ../shared/data."""

import functools
import os
import pathlib
import re
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One fresh persistent XLA cache per test session, shared by every subprocess the tests start
# (CLI fits, training runs, sweeps): the suite compiles each program once, and never reads a
# cache left by an older checkout.
os.environ.setdefault("SCALELAB_JAX_CACHE", tempfile.mkdtemp(prefix="scalelab-jaxcache-"))

import pytest  # noqa: E402

from models.base.jaxcache import enable_compile_cache  # noqa: E402

# The tests' own processes use that cache too (the CLI and the run loops turn it on for
# themselves): a fit's programs, compiled in one test or on one xdist worker, load in the next.
enable_compile_cache()

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Overrides the data location (and lets a test point it somewhere wrong on purpose).
SHARED_DATA_ENV = "SCALELAB_SHARED_DATA"


def shared_data_dir(env: dict | None = None) -> pathlib.Path:
    """Where the public test data should be: $SCALELAB_SHARED_DATA, else ../shared/data."""
    env = os.environ if env is None else env
    return pathlib.Path(env.get(SHARED_DATA_ENV) or SHARED_DATA)


def shared_data_missing(path: pathlib.Path, env: dict | None = None) -> str | None:
    """What a test that needs `path` does: None (the data is there, run it), "fail" under
    CI=true — a broken data path must not turn the accuracy tests into green skips — or "skip"
    on a checkout without the data (a laptop)."""
    env = os.environ if env is None else env
    if path.is_dir():
        return None
    return "fail" if env.get("CI", "").strip().lower() in ("true", "1", "yes") else "skip"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """`../shared/data` beside the checkout (public datasets for tests): fails under CI=true when
    absent, skips otherwise."""
    path = shared_data_dir()
    action = shared_data_missing(path)
    message = (
        f"{path} not found: the public test data must lie beside the checkout "
        f"(../shared/data) or at ${SHARED_DATA_ENV}"
    )
    if action == "fail":
        pytest.fail(message + " (CI=true: a missing data set fails the run)", pytrace=False)
    if action == "skip":
        pytest.skip(message)
    return path


# Tests that need the whole machine run in a second, serial pass (README's test command: the rest
# runs on 2 xdist workers first): real clusters, two-process jax.distributed, launchers that pin or
# fill every core, and checks with wall-clock deadlines.
SERIAL_MODULES = frozenset(
    {
        "test_cluster_ray",
        "test_cluster_slurm",
        "test_multihost",
        "test_preemption",
        "test_launchers",
        "test_pack_sweeps",
        "test_sweep_e2e",
        "test_portable",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in SERIAL_MODULES or item.get_closest_marker("cluster") is not None:
            item.add_marker(pytest.mark.serial)


@functools.lru_cache(maxsize=None)
def _shares_module_fixture(path: str) -> bool:
    """Whether a test file defines a module-scoped fixture (a fitted table, a trained sweep)."""
    try:
        return re.search(r"""scope\s*=\s*["']module["']""", pathlib.Path(path).read_text()) is not None
    except OSError:
        return False


def pytest_xdist_make_scheduler(config, log):
    """README's `-n 2`: tests are handed out one by one (xdist's `load`), except that the tests of
    a file with a module-scoped fixture go to one worker together, so that the fixture is built
    once, not once per worker. (`--dist loadgroup` would do it with marks, but with pytest 9.2 and
    xdist 3.8 it does not group.) Another `--dist` keeps xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFixtureScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return file if _shares_module_fixture(str(REPO / file)) else nodeid

    return ByFixtureScope(config, log)

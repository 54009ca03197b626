"""Test-wide set-up: 8 simulated CPU devices (must happen before jax is imported anywhere)."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """`../shared/data` beside the checkout (public datasets for tests); skip if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (public test data lives beside the checkout)")
    return SHARED_DATA

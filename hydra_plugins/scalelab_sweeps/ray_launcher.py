"""`RayClusterLauncher`: hydra-ray-launcher's Ray launcher, able to join a running cluster on Ray 2.x.

Why not the plugin's `RayLauncher` as it is: its `launch` always passes
`ray.init(object_store_memory=75 MiB)` (a workaround for small CI machines starting a local
instance), and Ray 2 refuses that when it joins an existing cluster ("When connecting to an
existing cluster, object_store_memory must not be provided"), so `ray.init.address=auto` never
worked (measured with hydra-ray-launcher 1.2.2 and ray 2.60). This launcher initialises Ray itself
first when an address is given, then hands over to the plugin, which finds Ray running and only
submits: each run is one Ray task (`ray.remote` options from `hydra.launcher.ray.remote`; a task
whose worker dies is retried up to `max_retries` times, and the retried run resumes from its
checkpoint like any relaunch).

Kept import-light (Hydra imports every module under `hydra_plugins` at start-up): Ray and the
plugin load in `launch`.
"""

from __future__ import annotations

import socket
from typing import Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

CONNECT_TIMEOUT_S = 5.0  # a head node on a reachable network answers a TCP connect in milliseconds


def _check_reachable(address: str | None) -> None:
    """Raise ConnectionError at once when a `host:port` address takes no TCP connection: `ray.init`
    itself retries an unreachable GCS for minutes before it fails."""
    if not address or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        raise ConnectionError(f"no Ray cluster answers at {address} ({e})") from None


class RayClusterLauncher(Launcher):
    def __init__(self, ray: DictConfig) -> None:
        self.ray_cfg = ray
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.config: Optional[DictConfig] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # optional dependency: the ray extra (Ray and hydra-ray-launcher), loaded only to launch
        import ray

        from hydra_plugins.hydra_ray_launcher import _core

        init = OmegaConf.to_container(self.ray_cfg.init, resolve=True) or {}
        _check_reachable(init.get("address"))
        if init.get("address") and not ray.is_initialized():
            ray.init(**{k: v for k, v in init.items() if k != "object_store_memory"})
        return _core.launch(launcher=self, job_overrides=job_overrides, initial_job_idx=initial_job_idx)

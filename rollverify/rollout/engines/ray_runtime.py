"""Ray for the sidecars: a private local Ray on loopback (or an existing cluster), and the
actor class.

A local Ray (no address) is always a new one (`address="local"`: a bare ray.init() would join
any `ray start` cluster of this machine). It listens on loopback only: on Linux, Ray turns a
loopback node address into the machine's external one and its servers then listen on every
interface; its single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, Ray's default on
macOS and Windows) keeps 127.0.0.1, and every server of every process it starts binds to it.
Its token authentication stays on, with a token of its own passed to its processes in their
environment (readable by this user alone) instead of a file: Ray writes ~/.ray/auth_token
with the umask's mode, 0644 by default, readable by every user of the machine. A cluster given
by address keeps its own token handling (docs/clusters.md).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
from contextlib import contextmanager
from typing import Any

_STARTED_HERE = False


def ensure_ray(address: str | None = None, field: str = "vllm.ray_address") -> None:
    """Connect to `address` (given as `field`, named if it cannot be reached), or start a
    private local Ray once per process."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    check_reachable(address, field)
    with sigterm_kept():
        try:
            _init(address)
        except ConnectionError as error:  # (after Ray's own retries)
            raise _no_cluster(field, address, str(error).splitlines()[0]) from None


def check_reachable(address: str | None, field: str) -> None:
    """Something listens at a host:port `address`, found in seconds (for a dead address,
    ray.init retries for minutes). 'auto', ray:// and no address are left to Ray."""
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise _no_cluster(field, address, error.strerror or type(error).__name__) from None


def _no_cluster(field: str, address: str, why: str) -> ValueError:
    return ValueError(
        f"{field}: no Ray cluster answers at {address} ({why}); start one (ray start --head) "
        "or check the address; for a cluster with token authentication set RAY_AUTH_MODE=token "
        "here (docs/clusters.md)"
    )


def _init(address: str | None) -> None:
    global _STARTED_HERE
    import ray

    if address:
        _leave_private_mode()
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        _enter_private_mode()
        # Ray says token authentication is on, each start: it is, with our token (above).
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
            logging.ERROR
        )
        ray.init(
            address="local",
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            configure_logging=False,
        )
    _STARTED_HERE = True  # (joined a cluster: stop_ray leaves it)


SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's single-machine mode
_OWN_TOKEN: str | None = None  # this process's token for the local Rays it starts
_AUTH_MODE = "RAY_AUTH_MODE"  # ray.init() of a new local Ray sets it to "token", for good
_AUTH_MODE_OURS = False  # it was unset when this process started its local Ray


def _enter_private_mode() -> None:
    """Loopback and a private token for a local Ray (see the module docstring)."""
    global _OWN_TOKEN, _AUTH_MODE_OURS
    import ray._private.ray_constants as constants

    _AUTH_MODE_OURS = _AUTH_MODE not in os.environ
    os.environ[SINGLE_MACHINE] = "0"  # for the processes Ray starts
    constants.ENABLE_RAY_CLUSTER = False  # this process read it when it imported Ray
    # Token authentication is Ray's default for a new local Ray (RAY_AUTH_MODE unset); the
    # token is ours, unless the user gave one: one per process, in the environment only while
    # a local Ray runs (its processes inherit it; what this process starts later does not).
    if not {"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ):
        _OWN_TOKEN = _OWN_TOKEN or secrets.token_hex(32)
        _set_token(_OWN_TOKEN)


def _leave_private_mode() -> None:
    """Undo it, so what this process starts or joins later (a `ray start`, a CLI, a cluster
    after a local Ray of its own) gets Ray's usual mode and the cluster's own token."""
    import ray._private.ray_constants as constants

    if os.environ.get(SINGLE_MACHINE) == "0":
        del os.environ[SINGLE_MACHINE]
        constants.ENABLE_RAY_CLUSTER = not constants.IS_WINDOWS_OR_OSX
    if _OWN_TOKEN is not None and os.environ.get("RAY_AUTH_TOKEN") == _OWN_TOKEN:
        _set_token(None)
    if _AUTH_MODE_OURS and os.environ.pop(_AUTH_MODE, None) is not None:
        # Without it, a `ray start` this process runs would demand a token file, and a
        # cluster joined by address would be asked for one it may not use.
        from ray._raylet import Config

        Config.initialize("")  # as Ray refreshes it when it sets the mode


def _set_token(token: str | None) -> None:
    from ray._raylet import AuthenticationTokenLoader

    if token is None:
        os.environ.pop("RAY_AUTH_TOKEN", None)
    else:
        os.environ["RAY_AUTH_TOKEN"] = token
    AuthenticationTokenLoader.instance().reset_cache()  # Ray caches the token it read


@contextmanager
def sigterm_kept():
    """Ray's core worker installs a crash handler for SIGTERM that aborts the process (exit
    134, sidecars and shared memory left behind); keep the caller's handler instead, which
    for rvctl raises KeyboardInterrupt so everything unwinds (rvctl/app.py)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, handler)


def stop_ray() -> None:
    """Shut down the local Ray this process started, or leave the cluster it joined; nothing
    where ensure_ray found Ray running (a Ray worker: a sweep trial, a compare pair)."""
    global _STARTED_HERE
    import ray

    if _STARTED_HERE and ray.is_initialized():
        ray.shutdown()
        _leave_private_mode()
    _STARTED_HERE = False


NODE_MARK = 0.001  # of vllm.node_resource per engine: it marks a node, it does not count engines


def engine_bundle(settings: Any, anywhere: bool = False) -> dict[str, float]:
    """What one engine holds: its tensor-parallel GPUs (one node's), or a CPU; and a sliver of
    vllm.node_resource, which puts it on a node that has it (unless `anywhere`)."""
    gpus = settings.tensor_parallel_size if _has_gpu() else 0
    bundle: dict[str, float] = {"GPU": gpus} if gpus else {"CPU": 1}
    if settings.node_resource and not anywhere:
        bundle[settings.node_resource] = NODE_MARK
    return bundle


def engine_placement(settings: Any, timeout: float) -> Any:
    """One placement group for the engines, a bundle each (a bundle lives on one node, so an
    engine's tensor-parallel GPUs do): packed on few nodes or spread over many
    (vllm.placement). Waits until Ray has reserved them; says what is missing if it cannot."""
    import ray

    bundles = [engine_bundle(settings)] * settings.engines
    strategy = {"pack": "PACK", "spread": "SPREAD"}[settings.placement]
    group = reserved(bundles, strategy, timeout)
    if group is None:
        raise RuntimeError(
            f"vllm.engines: Ray could not reserve {settings.engines} x {bundles[0]} in "
            f"{timeout:.0f} s (cluster resources: {ray.available_resources()}); use fewer "
            "engines or a smaller tensor_parallel_size, or add nodes"
        )
    return group


def reserved(bundles: list[dict[str, float]], strategy: str, timeout: float) -> Any:
    """A placement group of `bundles`, once Ray has reserved them; None (the group given back)
    if it cannot within `timeout` seconds."""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if ready:
        return group
    ray.util.remove_placement_group(group)
    return None


def sidecar_class(settings: Any, group: Any = None, bundle: int = 0, body: Any = None):
    """The VLLMSidecar (or `body`, a class with its methods: tests' deterministic engine) as a
    Ray actor, with the resources one engine needs, in `bundle` of the engines' placement
    group (its vLLM workers too)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rollverify.rollout.engines.vllm_sidecar import VLLMSidecar

    needs = engine_bundle(settings)
    actor = ray.remote(
        num_cpus=needs.get("CPU", 0),
        num_gpus=needs.get("GPU", 0),
        max_restarts=0,
        max_concurrency=64,
    )(body or VLLMSidecar)
    if group is None:
        return actor
    strategy = PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=True
    )
    return actor.options(scheduling_strategy=strategy)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@contextmanager
def running_engine(engine: Any, address: str | None = None):
    """Start Ray (if needed) and the engine's sidecars; stop both on the way out, Ctrl-C too."""
    ensure_ray(address)
    try:
        engine.start()
        yield engine
    finally:
        with signals_held():  # a second Ctrl-C must not leave sidecars half stopped
            engine.shutdown()
            stop_ray()


@contextmanager
def signals_held():
    """Ignore SIGINT/SIGTERM for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)

"""Running a job's shards on a Ray cluster: the `ray` executor of `core.execution.sharding`.

The only module that imports Ray, and only when a job asks for it (`pip install
'dl-testing-workbench[distributed]'`). A plan's `shared` objects (model, generator, fitted criteria,
data) go to the object store once per job; each shard is one Ray task that receives them by
reference. The cluster's nodes need the workbench installed, at this version: it is checked on
connecting, with a task that reports the versions a worker imports.

- **Progress** comes from a small actor that the tasks report to (throttled) and the job reads.
- **Partial results**: each finished shard's part is merged with the others finished so far.
- **Cancelling** cancels every task still pending or running, forcing their workers to stop, so a
  cancelled job stops on the cluster within a second or two.
- **A worker that dies** has its shard retried once on another worker (Ray's task retry); a second
  death fails the job with `ShardFailed`, naming the shard and keeping the parts finished.
- **A shard that raises** (a `WorkbenchError` of the job itself) fails the job at once with that error:
  it would fail again anywhere.
- **Starting or connecting fails** (a local instance whose processes time out, a cluster that refuses): the
  user is told which, with Ray's words under details, and what to do instead.
- **What the cluster tells the driver** (a worker that died, a task retried) goes to stderr, never into a
  command's output.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import FILE_MODULE_PREFIX, JobContext
from workbench.core.execution.shard_plan import ShardFailed, ShardPlan, ShardProgress, stopped

INSTALL_HINT = ("Install it with pip install 'dl-testing-workbench[distributed]' (or pip install 'ray[client]'), "
                "or run with --executor local.")
CONNECT_TIMEOUT_S = 3.0
POLL_S = 0.2  # how often the job looks at finished shards, progress and its cancel flag
REPORT_S = 0.25  # how often a task reports its progress to the board
TASK_RETRIES = 1  # a shard whose worker died runs once more
KEPT = "What the finished shards found was shown as it came, and is kept with this error."


def import_ray():
    """The `ray` module, or a WorkbenchError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise WorkbenchError("Ray is not installed, so jobs cannot run on a Ray cluster.", INSTALL_HINT) from exc
    return ray


def _package_version() -> str:
    try:
        return version("dl-testing-workbench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _versions() -> dict:
    import torch

    return {"workbench": _package_version(), "torch": torch.__version__.split("+")[0]}


def reachable(address: str) -> None:
    """Refuse, within seconds, an address nothing answers at (Ray itself would wait minutes)."""
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    host, port = parts.hostname, parts.port
    if not host or not port:
        raise WorkbenchError(f"The Ray address {address!r} is not HOST:PORT or ray://HOST:PORT.",
                             "Give the head node's address, e.g. ray://10.0.0.5:10001, or auto.")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise WorkbenchError(f"Nothing answers at the Ray address {address!r} ({exc.strerror or exc}).",
                             "Check that the cluster is running and the address and port are right, "
                             "or run with --executor local.") from exc


HERE_INSTEAD = "run the job on this machine (This machine under Jobs → Run long jobs on…, or --executor local)"


def start_failed(address: str | None, exc: BaseException) -> WorkbenchError:
    """What `ray.init` raising means to the user: a local instance that did not start, or a cluster that did not
    take the connection; what to do instead; Ray's own words, whole, under details."""
    lines = str(exc).strip().splitlines()
    said = (lines[0][:300].rstrip(".") if lines else type(exc).__name__) + "."
    details = f"{type(exc).__name__}: {exc}"
    if address in (None, "", "local"):
        return WorkbenchError(f"The local Ray instance did not start: {said}",
                              "Ray processes left over from an earlier run can keep a new instance from starting: "
                              "`ray status` lists them and `ray stop` ends them; then try again. Or give the address "
                              f"of a running cluster (Address, or --address), or {HERE_INSTEAD}.", details)
    return WorkbenchError(f"Could not connect to the Ray cluster at {address!r}: {said}",
                          "Check that the cluster is running (`ray status` on its head node) and that the address is "
                          f"right, or {HERE_INSTEAD}.", details)


def driver_messages_to_stderr() -> None:
    """Send what the cluster tells this driver ("(raylet) A worker died…", "Task … will be retried") to stderr.

    Ray's driver prints those messages to stdout whatever `log_to_driver` says, in the middle of a command's
    --json document. Ray offers no option for it, so its printer is wrapped to mark every message as an error
    stream's; a Ray without that printer keeps its own way (the CLI's --json keeps stdout clean anyway)."""
    try:
        import ray._private.worker as driver  # the driver's printer: Ray's own, not a public API
    except ImportError:
        return
    printer = getattr(driver, "print_to_stdstream", None)
    if printer is None or getattr(printer, "workbench_to_stderr", False):
        return

    def to_stderr(data, *args, **kwargs):
        return printer({**data, "is_err": True}, *args, **kwargs)

    to_stderr.workbench_to_stderr = True
    driver.print_to_stdstream = to_stderr


_connected: list = [None]  # the address this process connected to


def _init_in_lasting_thread(ray, **options) -> None:
    """`ray.init(**options)` from a thread that lives as long as the process. A local instance's processes
    end when the thread that started them ends (Linux's parent-death signal is a thread's), and a job's
    worker thread may end once idle."""
    if threading.current_thread() is threading.main_thread():
        ray.init(**options)
        return
    outcome: list = []

    def own() -> None:
        try:
            ray.init(**options)
        except BaseException as exc:  # handed to the caller
            outcome.append(exc)
            return
        outcome.append(None)
        threading.Event().wait()  # holds the instance's processes for the life of the process

    thread = threading.Thread(target=own, name="ray-owner", daemon=True)
    thread.start()
    while not outcome and thread.is_alive():
        time.sleep(0.05)
    if outcome and outcome[0] is not None:
        raise outcome[0]


class RayShards:
    """The `ray` executor: `run(ctx, plan)` as `LocalShards.run`, with the shards as Ray tasks."""

    def __init__(self, address: str | None = None):
        ray = self.ray = import_ray()
        self.address = address
        remote = address not in (None, "", "auto", "local")
        if remote:
            reachable(address)
        if ray.is_initialized():  # one connection per process: the one made first (a test's, another job's)
            if remote and _connected[0] not in (None, address):
                raise WorkbenchError(f"This process is connected to the Ray cluster at {_connected[0]!r} already, "
                                     f"so it cannot connect to {address!r} as well.",
                                     "Restart the workbench to use another cluster.")
        else:
            try:
                if address in (None, "", "local"):  # a local instance with this machine's cores
                    _init_in_lasting_thread(ray, num_cpus=os.cpu_count(), include_dashboard=False,
                                            log_to_driver=False, configure_logging=False)
                else:
                    _init_in_lasting_thread(ray, address=address, log_to_driver=False, configure_logging=False)
            except Exception as exc:  # Ray raises a bare Exception for a node that timed out during startup
                raise start_failed(address, exc) from exc
            _connected[0] = address
        driver_messages_to_stderr()
        self._remote_run = ray.remote(max_retries=TASK_RETRIES, retry_exceptions=False)(_run_shard)
        self._board_class = ray.remote(num_cpus=0)(_Board)
        self._check_versions()

    @property
    def workers(self) -> int:
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    @property
    def gpus(self) -> int:
        return int(self.ray.cluster_resources().get("GPU", 0))

    def _check_versions(self) -> None:
        here = _versions()
        there = self.ray.get(self.ray.remote(_versions).remote())
        if there != here:
            raise WorkbenchError(f"The cluster's workers run workbench {there['workbench']} with torch "
                                 f"{there['torch']}; this machine runs {here['workbench']} with torch {here['torch']}.",
                                 "Install the same versions on the cluster's nodes.")

    def run(self, ctx: JobContext, plan: ShardPlan):
        ray = self.ray
        for name, module in list(sys.modules.items()):  # a plugin's classes travel with the job: not installed there
            if name.startswith(FILE_MODULE_PREFIX) and module is not None:
                ray.cloudpickle.register_pickle_by_value(module)
        try:
            shared = ray.put(plan.shared)
        except Exception as exc:  # what the object's own reducer raises: a TorchScript module, a lock, …
            raise WorkbenchError(f"What the job {plan.name!r} works on cannot be sent to the cluster "
                                 f"({type(exc).__name__}: {str(exc)[:200]}).",
                                 "Save the model as a plain state_dict or full module, or run with --executor local.") \
                from exc
        board = self._board_class.remote()
        progress = ShardProgress(ctx, plan)
        gpus = 1 if self.gpus and ctx.device_name not in ("cpu",) else 0
        task = self._remote_run.options(num_gpus=gpus)
        pending = {task.remote(plan.run, shared, piece, index, board, ctx.device_name if gpus else "cpu"): index
                   for index, piece in enumerate(plan.pieces)}
        parts: dict[int, Any] = {}
        ctx.progress(0, plan.total, f"{plan.name}: {len(plan.pieces)} shards on Ray")
        try:
            while pending:
                if ctx.cancelled:
                    break
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
                for ref in ready:
                    index = pending.pop(ref)
                    parts[index] = self._part(ref, index, plan, parts)
                    progress.report(index, plan.sizes[index])
                    for result in plan.partial(dict(parts)) if plan.partial is not None else ():
                        ctx.partial(result)
                if pending:
                    for index, (done, total) in ray.get(board.snapshot.remote()).items():
                        if index not in parts:
                            progress.report(index, done, total)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)  # stops the workers now: a cancelled or failed job leaves nothing running
            ray.kill(board)
        if ctx.cancelled:
            return stopped(ctx, plan, parts)
        return plan.merge([parts[i] for i in range(len(plan.pieces))])

    def _part(self, ref, index: int, plan: ShardPlan, parts: dict):
        ray = self.ray
        from ray.exceptions import RayTaskError, TaskCancelledError

        name = f"shard {index + 1} of {len(plan.pieces)} ({plan.describe(plan.pieces[index])})"
        try:
            return ray.get(ref)
        except TaskCancelledError as exc:
            raise Cancelled() from exc
        except RayTaskError as exc:  # the shard's own error: it would fail again anywhere
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
            if isinstance(cause, WorkbenchError):
                raise ShardFailed(f"{cause.message} ({name})", cause.hint, dict(parts)) from exc
            raise ShardFailed(f"The {name} of {plan.name!r} failed on the cluster: {str(cause or exc)[:300]}",
                              f"{KEPT} See the error above.", dict(parts)) from exc
        except ray.exceptions.RayError as exc:  # the worker died (killed, out of memory) on both tries
            raise ShardFailed(f"The {name} of {plan.name!r} failed twice: the worker running it stopped "
                              f"({type(exc).__name__}).",
                              f"{len(parts)} of {len(plan.pieces)} shards had finished. {KEPT} The worker may have "
                              "run out of memory: try more shards (--shards) or fewer inputs.", dict(parts)) from exc


class _Board:
    """An actor that holds how far each running shard is: (done, total) of its last report."""

    def __init__(self):
        self.done: dict[int, tuple[int, int]] = {}

    def report(self, index: int, done: int, total: int) -> None:
        self.done[index] = (done, total)

    def snapshot(self) -> dict[int, tuple[int, int]]:
        return dict(self.done)


def _run_shard(run, shared, piece, index: int, board, device: str):
    """One shard in a Ray worker: its own job context, reporting to the board, at most every REPORT_S."""
    last = [0.0]

    def progress(done, total, message):
        now = time.monotonic()
        if now - last[0] >= REPORT_S:
            last[0] = now
            board.report.remote(index, done, total)

    return run(JobContext(device, on_progress=progress), shared, piece)

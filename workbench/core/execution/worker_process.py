"""Running jobs in a worker process, behind the same call as running them on the calling thread.

A training loop on a small model spends most of its time in Python (forward, backward, the
optimiser's step), so on a worker *thread* it holds the interpreter lock most of the time and the
window it shares the interpreter with stutters. `ProcessExecutor.run` has the signature of
`InlineExecutor.run` (`core.execution.jobs`), but the job runs in a child process with its own interpreter:
the calling thread only waits on a pipe and passes on what the child reports.

- **What goes over.** The job function, its arguments and its result are pickled (functions by
  their module and name). These are the workbench's own objects travelling between its own two
  processes, never a file a user gave; user files are read by the job itself, inside the child.
  Datasets, splits and loaded models are sent once and kept by the child for as long as the caller
  holds them, so a second job on the training split does not send its images again; one that comes
  back in a result is the caller's own object again.
- **Progress, partial results, cancellation.** The child reports progress (at most 20 times a
  second) and partial results as messages; cancelling sets an event the child's job context checks
  at every progress report, so the job stops within a batch, as on a thread.
- **Saving.** A job given a project opens the same folder in the child and saves through its own
  staged save (`core.project.staging.run_staged`); the project is one of several writers, so the caller's
  `Project` reads the settings again once the child has committed, before the result arrives.
- **Failures.** A job's exception comes back as itself (a `WorkbenchError` with its hint) with the
  child's traceback; a child that dies (killed, out of memory) is reported as such and a new one
  starts for the next job.
- **What cannot go over** (a model compiled with TorchScript, a lazily read HDF5 split, a function
  defined inside another) runs on the calling thread instead, as before; `last_placement` says so.
- **A script without an `if __name__ == "__main__":` guard.** A child started with 'spawn' runs the main
  script again before its own code; a script that opens the workbench at its top level would open it again
  in every child, and multiprocessing's bootstrapping error would kill each one with a traceback. The child
  notices where the workbench starts (`leave_if_starting_worker`) and leaves at once, quietly, with
  `UNGUARDED_MAIN_EXIT`; the parent reads that exit as `WorkersCannotStart`, says so once
  (`on_unavailable`) and runs this job and every later one on the calling thread.

One job at a time: a lane has one thread, so one child serves it.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import struct
import sys
import threading
import time
import traceback
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable

import numpy

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import InlineExecutor, JobContext, SentOnce

PROGRESS_INTERVAL_S = 0.05
WORKER_NAME = "workbench-worker"  # the child's process name, set before it runs the main script again
UNGUARDED_MAIN_EXIT = 87  # the child's exit status when it found itself re-running an unguarded main script
POLL_S = 0.05  # how often the waiting thread looks at the cancel flag
STOP_TIMEOUT_S = 5.0
IN_WORKER, IN_THREAD = "worker process", "this process"


class WorkersCannotStart(WorkbenchError):
    """Worker processes cannot start in this program: its main script opens the workbench at its top level."""


def cannot_start_error() -> WorkersCannotStart:
    """What the user is told when a child exits with UNGUARDED_MAIN_EXIT, naming the script."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    script = os.path.basename(script) if script else "the script that opened the workbench"
    guard = 'if __name__ == "__main__":'
    return WorkersCannotStart(
        f"Worker processes cannot start: each one runs {script} again, which opens the workbench again (the lines "
        f"that open it are not under `{guard}`). Long jobs run in threads of this process instead; the window may "
        "respond more slowly while they run.",
        f"Put those lines of {script} under `{guard}`, or start the workbench with the `workbench` command.")


_serving = [False]  # set once this process, a worker, runs its own code (`serve`) after the main script


def starting_worker() -> bool:
    """Whether this process is a worker process still being started: 'spawn' runs the main script again (as
    `__mp_main__`) before the worker's own code, so whatever that script does at its top level runs here too.
    The process has its name by then (multiprocessing sets it first); `parent_process()` comes only after."""
    return not _serving[0] and multiprocessing.current_process().name == WORKER_NAME


def leave_if_starting_worker() -> None:
    """Called where the workbench starts (the GUI's start, a worker process's start): in a worker being
    started, the main script has no `__main__` guard and opens the workbench again; leave now, without a
    traceback, with the exit status the parent reads as the reason."""
    if starting_worker():
        raise SystemExit(UNGUARDED_MAIN_EXIT)


class _Pickler(pickle.Pickler):
    """Pickles a job, replacing each shared object by a token (`share` sends it first when it is new).

    Large numpy arrays travel out of band (pickle protocol 5): their memory is written to the pipe as
    it is, with the interpreter lock released, instead of being copied into the pickle while holding it.
    (Torch tensors, a model's weights, pickle in band.)
    """

    def __init__(self, file, share: Callable[[Any], Any], root: Any = None, buffers: list | None = None):
        super().__init__(file, protocol=5, buffer_callback=None if buffers is None else buffers.append)
        self.share, self.root = share, root

    def persistent_id(self, obj):
        if obj is self.root or not isinstance(obj, SentOnce):
            return None
        return self.share(obj)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, lookup: Callable[[Any], Any], buffers=()):
        super().__init__(file, buffers=buffers)
        self.lookup = lookup

    def persistent_load(self, pid):
        return self.lookup(pid)


def _dumps(obj, share, root=None) -> tuple[bytes, list]:
    """The pickle and its out-of-band buffers."""
    buffer, buffers = io.BytesIO(), []
    _Pickler(buffer, share, root, buffers).dump(obj)
    return buffer.getvalue(), buffers


def _loads(data: bytes, lookup, buffers=()):
    return _Unpickler(io.BytesIO(data), lookup, buffers).load()


def _send_pickled(conn, kind: str, *head, pickled: tuple[bytes, list]) -> None:
    """A message whose last part is a pickle: its buffers follow it on the pipe, each as it is."""
    data, buffers = pickled
    views = [part.raw() for part in buffers]
    conn.send((kind, *head, data, [view.nbytes for view in views]))
    for view in views:
        conn.send_bytes(view)


def _receive_buffers(conn, sizes: list[int]) -> list:
    """The buffers that follow a pickle, read into writable memory (the arrays they become may be
    changed in place, as the caller's could).

    `Connection.recv_bytes_into` reads a message into a growing `BytesIO` and copies it twice more,
    all with the interpreter lock held: for a 100 MB candidate pool that froze the window's thread
    for 60–100 ms. Where the pipe is a file descriptor, each buffer is read straight into memory
    that nothing has touched yet, so its pages are first written by the read itself, with the lock
    released."""
    buffers = []
    for size in sizes:
        buffer = numpy.empty(size, dtype=numpy.uint8)
        if _READS_RAW and isinstance(conn, Connection):
            _read_frame_into(conn.fileno(), memoryview(buffer))
        else:
            conn.recv_bytes_into(buffer)
        buffers.append(buffer)
    return buffers


_READS_RAW = hasattr(os, "readv")  # POSIX; elsewhere the pipe is read through the connection


def _read_frame_into(fd: int, view: memoryview) -> None:
    """Read one `send_bytes` message of exactly `len(view)` bytes: its length header (4 bytes, or
    -1 and 8 more for 2 GiB and over, as `Connection` frames it) and then its bytes, into `view`."""
    header = memoryview(bytearray(4))
    _read_exactly(fd, header)
    (size,) = struct.unpack("!i", header)
    if size == -1:
        header = memoryview(bytearray(8))
        _read_exactly(fd, header)
        (size,) = struct.unpack("!Q", header)
    if size != len(view):
        raise OSError(f"the worker's pipe carried {size} bytes where {len(view)} were announced")
    _read_exactly(fd, view)


def _read_exactly(fd: int, view: memoryview) -> None:
    while len(view):
        count = os.readv(fd, [view])
        if count == 0:
            raise EOFError("the worker's pipe closed in the middle of a message")
        view = view[count:]


class ProcessExecutor:
    """Runs jobs in one child process, started on first use and again after it died."""

    def __init__(self, threads: int | None = None,
                 on_unavailable: Callable[[WorkersCannotStart], None] | None = None,
                 child_setup: Callable[[], Any] | None = None):
        """`on_unavailable(error)` is called once, on the calling thread, when children cannot start at all
        (`WorkersCannotStart`); the jobs then run on the calling thread."""
        self.threads = threads  # torch threads in the child; None: shared as `core.execution.jobs.share_cores` says
        self.on_unavailable = on_unavailable
        #: Called once in each child before its first job, e.g. the application's `load_plugins`, so a plugin's
        #: model, criterion or rule is known there too (a module-level function: the child imports it by name).
        self.child_setup = child_setup
        self.unavailable: WorkersCannotStart | None = None  # why no child can start here, once known
        self.last_placement = ""  # where the last job ran: IN_WORKER or IN_THREAD (and why)
        self.sent_objects = 0  # shared objects sent so far (each once while it lives)
        self._context = multiprocessing.get_context("spawn")  # fork would copy Qt's threads' locks
        self._process = None
        self._conn = None
        self._cancel = None
        self._tokens: dict[int, tuple[int, weakref.ref]] = {}  # id(obj) → (token, ref)
        self._objects: dict[int, weakref.ref] = {}  # token → ref, to map the child's references back
        self._forgotten: list[tuple[int, int]] = []  # (token, id) of objects that died; told before the next job
        self._next_token = 1
        self._lock = threading.Lock()  # one job at a time
        self._inline = InlineExecutor()

    # --- the child ---------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def start(self) -> None:
        """Start the child now (it imports PyTorch in the background), so the first job need not wait."""
        with self._lock:
            try:
                if self.unavailable is None:
                    self._ensure_started()
            except WorkersCannotStart:  # the next job runs on the calling thread and says why
                pass

    def _ensure_started(self) -> None:
        leave_if_starting_worker()  # a child of ours would start children of its own only from an unguarded script
        if self.alive:
            return
        if self._process is not None and self._process.exitcode == UNGUARDED_MAIN_EXIT:
            raise self._cannot_start()  # the script is the same: another child would fail alike
        self._reset()
        parent, child = self._context.Pipe()
        self._cancel = self._context.Event()
        self._process = self._context.Process(target=serve, args=(child, self._cancel, self.threads, self.child_setup),
                                              name=WORKER_NAME, daemon=True)
        self._process.start()
        child.close()
        self._conn = parent

    def _reset(self) -> None:
        """Forget what a dead child held."""
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None
        self._tokens.clear()
        self._objects.clear()
        self._forgotten.clear()

    def close(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the child: asked first, then terminated if it does not leave within `timeout` seconds.
        A job still running after `timeout` is not waited for: its child is terminated (the waiting
        thread then sees the pipe close)."""
        if not self._lock.acquire(timeout=timeout):
            process = self._process
            if process is not None and process.is_alive():
                process.terminate()
            return
        try:
            if self._process is None:
                return
            try:
                self._conn.send(("stop",))
            except (OSError, ValueError):
                pass
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout)
            self._reset()
        finally:
            self._lock.release()

    # --- sharing -----------------------------------------------------------------------------------

    def _share(self, obj) -> int:
        known = self._tokens.get(id(obj))
        if known is not None and known[1]() is obj:
            return known[0]
        token, self._next_token = self._next_token, self._next_token + 1
        pickled = _dumps(obj, self._share, root=obj)  # what it holds that is shared goes first
        _send_pickled(self._conn, "store", token, pickled=pickled)
        self.sent_objects += 1
        self._tokens[id(obj)] = (token, weakref.ref(obj))
        self._objects[token] = weakref.ref(obj)
        weakref.finalize(obj, self._forgotten.append, (token, id(obj)))
        return token

    def _own(self, token: int):
        obj = self._objects.get(token)
        obj = obj() if obj is not None else None
        if obj is None:
            raise WorkbenchError("The worker process returned an object this process no longer holds.",
                                 "Run the job again.")
        return obj

    # --- running -----------------------------------------------------------------------------------

    def run(self, ctx: JobContext, fn: Callable, args: tuple = (), kwargs: dict | None = None, *,
            project=None, reuse: bool = True, on_commit: Callable[[list, list], None] | None = None,
            on_device: Callable[[str], None] | None = None):
        """Run `fn(ctx, *args, **kwargs)` in the child and return its result (see `InlineExecutor.run`)."""
        kwargs = kwargs or {}
        with self._lock:
            if self.unavailable is None:
                try:
                    return self._run_in_child(ctx, fn, args, kwargs, project, reuse, on_commit, on_device)
                except _Unsendable as unsendable:
                    self.last_placement = f"{IN_THREAD} (the worker process cannot rebuild its inputs: {unsendable})"
                except WorkersCannotStart:  # the child never got to the job: it runs here, whole
                    pass
            if self.unavailable is not None:
                self.last_placement = f"{IN_THREAD} (worker processes cannot start: the main script has no " \
                                      "__main__ guard)"
        return self._inline.run(ctx, fn, args, kwargs, project=project, reuse=reuse, on_commit=on_commit,
                                on_device=on_device)

    def _run_in_child(self, ctx, fn, args, kwargs, project, reuse, on_commit, on_device):
        self._ensure_started()
        while self._forgotten:
            token, key = self._forgotten.pop()
            self._objects.pop(token, None)
            if self._tokens.get(key, (None,))[0] == token:  # the id may name a newer object already
                del self._tokens[key]
            self._send(("forget", token))
        folder = None if project is None else str(project.folder)
        try:
            call = _dumps((fn, args, kwargs, ctx.device_name, folder, reuse, ctx.distribution), self._share)
        except (BrokenPipeError, ConnectionResetError) as exc:  # sending a shared object found the child gone
            raise self._died() from exc
        except Exception as exc:  # pickle raises what the object's own reducer raises
            self.last_placement = f"{IN_THREAD} (its inputs cannot be sent to a worker process: {exc})"
            return self._inline.run(ctx, fn, args, kwargs, project=project, reuse=reuse,
                                    on_commit=on_commit, on_device=on_device)
        self.last_placement = IN_WORKER
        self._cancel.clear()
        try:
            _send_pickled(self._conn, "run", pickled=call)
        except (OSError, ValueError) as exc:
            raise self._died() from exc
        try:
            return self._wait(ctx, project, on_commit, on_device)
        except _JobFailed as failed:
            raise failed.error from None

    def _send(self, message) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise self._died() from exc

    def _died(self) -> WorkbenchError:
        process = self._process
        process.join(1.0)
        if process.is_alive():  # the pipe broke but the child lives on: it serves nobody now
            process.terminate()
            process.join(STOP_TIMEOUT_S)
        code = process.exitcode
        self._reset()
        if code == UNGUARDED_MAIN_EXIT:
            return self._cannot_start()
        how = f"with exit code {code}" if code is not None and code >= 0 else \
            f"by signal {-code}" if code is not None else "without a word"
        return WorkbenchError(f"The worker process for long jobs stopped {how} while running the job.",
                              "It may have run out of memory. The job was not saved; run it again "
                              "(a new worker process starts), perhaps on fewer inputs.")

    def _cannot_start(self) -> WorkersCannotStart:
        """No child can start in this program (see the module docstring): said once, through `on_unavailable`."""
        self._reset()
        if self.unavailable is None:
            self.unavailable = cannot_start_error()
            if self.on_unavailable is not None:
                self.on_unavailable(self.unavailable)
        return self.unavailable

    def _wait(self, ctx, project, on_commit, on_device):
        """Pass on the child's messages until the job's last one. Anything unexpected on this side
        stops the child, so the next job never reads this one's leftover messages."""
        try:
            return self._follow(ctx, project, on_commit, on_device)
        except (_ChildCancelled, _JobFailed, _Unsendable):  # the job's last message: the child is free
            raise
        except BaseException:  # anything else here leaves the child mid-job: stop it
            self._abandon()
            raise

    def _follow(self, ctx, project, on_commit, on_device):
        conn, cancelling = self._conn, False
        while True:
            if ctx.cancelled and not cancelling:
                self._cancel.set()
                cancelling = True
            try:
                if not conn.poll(POLL_S):
                    continue
                message = conn.recv()
            except (EOFError, OSError) as exc:
                raise self._died() from exc
            kind = message[0]
            if kind == "progress":
                try:
                    ctx.progress(*message[1:])
                except Cancelled:  # the child stops at its own next report and says so
                    pass
            elif kind == "partial":
                ctx.partial(_loads(message[1], self._own, _receive_buffers(conn, message[2])))
            elif kind == "notice":
                ctx.notice(message[1])
            elif kind == "shards":
                ctx.runs_shards(message[1])
            elif kind == "device":
                if on_device is not None:
                    on_device(message[1])
            elif kind == "saved":
                if project is not None:
                    project.reload()  # the child wrote project.json: see what it committed
                if on_commit is not None:
                    on_commit(message[1], message[2])
            elif kind == "done":
                return _loads(message[1], self._own, _receive_buffers(conn, message[2]))
            elif kind == "cancelled":
                raise _ChildCancelled()
            elif kind == "failed":
                raise _JobFailed(_failure(message[1], message[2]))
            elif kind == "unsendable":
                raise _Unsendable(message[1])

    def _abandon(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.join(STOP_TIMEOUT_S)
        self._reset()


class _ChildCancelled(Cancelled):
    """The child's report that its job stopped on the cancel event."""


class _Unsendable(Exception):
    """The child's report that it could not rebuild the job (a function it cannot import)."""


class _JobFailed(Exception):
    """The child's report that its job raised; `run` raises the job's own exception."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _failure(data: bytes | None, details: str) -> BaseException:
    """The child's exception as itself where it pickles, with the child's traceback as its details."""
    exc = None
    if data is not None:
        try:
            exc = pickle.loads(data)
        except Exception:  # an exception class that cannot be rebuilt here
            exc = None
    if exc is None:
        last = details.strip().splitlines()[-1] if details.strip() else "an error"
        exc = WorkbenchError(f"The job failed in the worker process: {last}")
    exc.worker_traceback = details
    return exc


# --- the child's side --------------------------------------------------------------------------------

def serve(conn, cancel, threads: int | None, setup: Callable[[], Any] | None = None) -> None:
    """The child's loop: keep shared objects, run one job at a time, report back, until told to stop."""
    from workbench.core.execution.jobs import run_process_in_background, share_cores

    _serving[0] = True  # the main script has run: from here on this is the worker's own code
    run_process_in_background()  # before torch starts its threads, which inherit it
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if threads:
        torch.set_num_threads(threads)
    else:
        share_cores()
    if setup is not None:
        setup()
    store: dict[int, Any] = {}
    tokens: dict[int, int] = {}  # id(obj) → token, so a shared object in a result goes back as a token

    def lookup(token):
        return store[token]

    def back(obj):
        return tokens.get(id(obj))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent went away
            return
        kind = message[0]
        if kind == "stop":
            return
        if kind == "store":
            buffers = _receive_buffers(conn, message[3])
            try:
                obj = _loads(message[2], lookup, buffers)
            except Exception:  # a class this process cannot import: the job that needs it is told
                continue
            store[message[1]], tokens[id(obj)] = obj, message[1]
        elif kind == "forget":
            obj = store.pop(message[1], None)
            if obj is not None:
                tokens.pop(id(obj), None)
        elif kind == "run":
            buffers = _receive_buffers(conn, message[2])
            try:
                call = _loads(message[1], lookup, buffers)
            except Exception as exc:  # a function or object this process cannot rebuild: run it there
                conn.send(("unsendable", f"{type(exc).__name__}: {exc}"))
                continue
            _run_one(conn, cancel, call, back)


class _BackPickler(pickle.Pickler):
    """Pickles a result, sending the caller's own shared objects back as their tokens."""

    def __init__(self, file, back, buffers: list):
        super().__init__(file, protocol=5, buffer_callback=buffers.append)
        self.back = back

    def persistent_id(self, obj):
        return self.back(obj)


def _dumps_back(obj, back) -> tuple[bytes, list]:
    buffer, buffers = io.BytesIO(), []
    _BackPickler(buffer, back, buffers).dump(obj)
    return buffer.getvalue(), buffers


def _run_one(conn, cancel, call, back) -> None:
    from workbench.core.execution.jobs import device_description
    from workbench.core.project.folder import Project
    from workbench.core.project.staging import run_staged

    fn, args, kwargs, device, folder, reuse, distribution = call
    last = [0.0]

    def progress(done, total, message):
        now = time.monotonic()
        if done >= total or now - last[0] >= PROGRESS_INTERVAL_S:
            last[0] = now
            conn.send(("progress", done, total, message))

    ctx = JobContext(device, on_progress=progress, distribution=distribution,
                     on_partial=lambda result: _send_pickled(conn, "partial", pickled=_dumps_back(result, back)),
                     cancel_event=cancel, on_notice=lambda text: conn.send(("notice", text)),
                     on_shards=lambda distribution: conn.send(("shards", distribution)))
    try:
        conn.send(("device", device_description(ctx.device)))
        if folder is None:
            result = fn(ctx, *args, **kwargs)
        else:
            result = run_staged(ctx, fn, Project.open(folder), *args, reuse=reuse,
                                on_commit=lambda staged: conn.send(("saved", staged.committed, staged.unsaved)),
                                **kwargs)
        _send_pickled(conn, "done", pickled=_dumps_back(result, back))
    except Cancelled:
        conn.send(("cancelled",))
    except Exception as exc:  # every failure goes back as a message; the loop serves the next job
        details = traceback.format_exc()
        try:
            data = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            data = None
        conn.send(("failed", data, details))

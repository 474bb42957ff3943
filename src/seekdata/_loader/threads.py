"""Thread workers (``worker_method="thread"``): ``num_workers`` threads of this process fetch and
collate batches ahead of the step, handed out in order.

The batches are the same as process workers' because nothing a fetch draws is stateful: each
sample's stream is keyed by its counters (:func:`seekdata.sample_rng`, ``seekdata.transforms``,
batch transforms), whichever thread fetches it, and the per-sample context
(:mod:`seekdata._core.sample`) is each thread's own. What threads cannot make exact is a
draw from torch's, numpy's or ``random``'s *global* generator, which every thread shares: the loader
never reseeds them in a thread (a seed written by one thread would be drawn by another) and watches
them instead (:class:`RngWatch`): a batch during which they moved raises, naming
:func:`seekdata.sample_rng` and ``worker_method="multiprocessing"``.

What a thread worker shares with a process worker: ``torch.utils.data.get_worker_info()`` inside
it returns its own ``WorkerInfo`` (``worker_method="thread"``; :func:`install_worker_info`),
``worker_init_fn(worker_id)`` runs first in it, batch ``k`` of an iterator goes to worker
``k % num_workers`` (torch's round robin), at most ``prefetch_factor * num_workers`` batches are
ahead, ``timeout`` bounds the wait for one, ``persistent_workers`` keeps the threads between
iterators and ``pin_memory`` pins in the worker (:func:`pinned`). An error in a worker is raised
in the caller's thread with the worker's traceback.

Threads are daemonic and block the signals a job receives (Ctrl-C, SIGTERM, SIGUSR1), which
therefore reach the main thread; they end when their iterator ends or is dropped (persistent
ones: when their loader is), and never keep the interpreter from exiting.
"""

from __future__ import annotations

import atexit
import collections
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from seekdata._core import globalrng as _globalrng
from seekdata._core import sample as _sample

__all__ = ["THREAD", "Pool", "RngWatch", "install_worker_info", "thread_worker_info", "unshared"]

THREAD = "thread"

# --- get_worker_info() in a thread ----------------------------------------------------------------

_local = threading.local()  # .info: this thread's WorkerInfo, in a thread worker
_installed = False
_install_lock = threading.Lock()


def thread_worker_info() -> Any:
    """This thread's ``WorkerInfo`` when it is a seekdata thread worker, else None."""
    return getattr(_local, "info", None)


def install_worker_info() -> None:
    """Make ``torch.utils.data.get_worker_info()`` return a thread worker's own ``WorkerInfo``.

    torch's function returns a module global (``_worker_info``, set once in a worker process),
    which threads of one process would share; it has no public hook. So its code is replaced,
    once per process and in place (every reference to the function, however imported, sees it),
    by code that returns this thread's info when there is one and torch's global otherwise:
    outside a thread worker it behaves as before. Done when a loader first starts threads.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        from torch.utils.data._utils import worker as _torch_worker

        fn = _torch_worker.get_worker_info
        # the replacement runs with the globals of torch's module: give it this thread-local
        _torch_worker.__dict__["_seekdata_thread_local"] = _local
        scope: dict[str, Any] = {}
        exec(  # a fixed source: torch's function, reading the thread's info first
            "def get_worker_info():\n"
            "    info = getattr(_seekdata_thread_local, 'info', None)\n"
            "    return _worker_info if info is None else info\n",
            scope,
        )
        fn.__code__ = scope["get_worker_info"].__code__
        _installed = True


def unshared(collate_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``collate_fn`` as a thread worker runs it: torch's ``default_collate`` stacks a batch into
    a new shared-memory segment whenever ``get_worker_info()`` is not None, ready for the trip
    from a worker process to the main one; thread workers make no such trip, so it runs with
    this thread's info hidden and stacks into ordinary memory (the same values; the segment,
    its file and its mapping cost a share of the GIL at every batch). Any other function is
    returned as it is: it may read ``get_worker_info()``."""
    import torch.utils.data

    if collate_fn is not torch.utils.data.default_collate:
        return collate_fn

    def collate(data: Any) -> Any:
        info = getattr(_local, "info", None)
        _local.info = None
        try:
            return collate_fn(data)
        finally:
            _local.info = info

    return collate


# --- the global generators, watched ------------------------------------------------------------


class RngWatch:
    """Whether a thread worker's batch drew from a global generator.

    Each batch compares the generators' states (:func:`seekdata._core.globalrng.fingerprint`,
    a few µs) before and after it. Other threads draw from them too: the caller's training step
    (dropout on the CPU, its own ``torch.randn``) and the loader's ``step_rng``, which reseeds them
    at every batch handed out. A change is therefore the dataset's only when nothing else ran
    meanwhile: the caller's thread waited inside ``next()`` for the whole batch (``phase`` odd and
    unchanged; the caller's thread moves it on entering and leaving the wait). Such batches always
    include each iterator's first (the threads start while the caller waits for it), and every
    batch of a loader slower than the step; a batch fetched while the step runs is not checked.
    """

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.phase = 0  # odd while the caller's thread waits inside next()

    def before(self) -> tuple[int, Any] | None:
        if not self.names or not self.phase & 1:
            return None
        return self.phase, _globalrng.fingerprint(self.names)

    def after(self, mark: tuple[int, Any] | None) -> tuple[str, ...]:
        """The names of the generators that moved (empty when none, or when not decidable)."""
        if mark is None:
            return ()
        phase, before = mark
        now = _globalrng.fingerprint(self.names)
        if self.phase != phase:
            return ()  # the caller's thread ran meanwhile: its draws are not the dataset's
        return tuple(
            name for name, a, b in zip(_globalrng.GENERATORS, before, now, strict=True) if a != b
        )


def global_draw_error(names: tuple[str, ...], worker: int, what: str) -> RuntimeError:
    """The refusal of a global draw in a thread worker (STYLE: what must hold, what was given,
    how to fix)."""
    which = ", ".join(f"{name}'s" for name in names)
    return RuntimeError(
        f"StatefulDataLoader: with worker_method='thread' a sample must draw its randomness from "
        f"seekdata's streams, not from the global RNG every thread shares; {what} drew from "
        f"{which} global RNG in thread worker {worker}, so its result would depend on which "
        f"thread drew first. Draw from seekdata.sample_rng() (or seekdata.transforms), or pass "
        f"worker_method='multiprocessing', where each sample's global RNG is seeded from its key "
        f"(reseed_global_rng); reseed_global_rng=False stops this check where you accept draws "
        f"that do not reproduce (docs/threads.md)"
    )


def pinned(work: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``work`` whose result is pinned, in the worker thread (torch pins in a thread too)."""
    from seekdata._loader.device import move

    def pin(planned: Any) -> Any:
        return move(work(planned), lambda t: t.pin_memory())

    return pin


# --- the pool ----------------------------------------------------------------------------------

# what the threads block, so that the main thread receives them: a process-directed signal goes
# to any thread that does not block it, and one that lands in a worker leaves the main thread
# waiting on a lock instead of raising KeyboardInterrupt
_BLOCKED = {signal.SIGINT, signal.SIGTERM} | (
    {signal.SIGUSR1} if hasattr(signal, "SIGUSR1") else set()
)
_WAIT = 0.5  # seconds between the caller's checks of its workers while it waits for a batch


class _Task:
    __slots__ = ("k", "planned", "run", "work")

    def __init__(self, run: int, k: int, planned: Any, work: Callable[[Any], Any]) -> None:
        self.run, self.k, self.planned, self.work = run, k, planned, work


class _Shared:
    """What a pool's threads and its caller share, all guarded by ``cond``. The threads hold
    this, never the :class:`Pool`, so a pool nobody holds is collected (and closes)."""

    def __init__(self, num_workers: int, watch: RngWatch) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.queues: list[collections.deque[_Task]] = [
            collections.deque() for _ in range(num_workers)
        ]
        self.results: dict[int, tuple[bool, Any]] = {}  # batch k of the run -> (ok, value)
        self.run = 0  # the run (iterator) whose batches are wanted; older ones are dropped
        self.closed = False
        self.failed: tuple[int, BaseException] | None = None  # worker_init_fn raised
        self.watch = watch

    def drop_pending(self) -> None:
        for q in self.queues:
            q.clear()
        self.results.clear()


_live: weakref.WeakSet[Pool] = weakref.WeakSet()  # pools whose threads may run
_JOIN_AT_EXIT = 5.0  # seconds a thread may take to finish its batch when the process exits


def _close_all() -> None:
    """At exit (``atexit``, before the interpreter finalizes): stop every pool's threads, so
    none is alive while torch's and Python's globals are torn down (a daemon thread then can
    abort the process: "terminate called without an active exception"). A thread stuck in
    its batch is waited for a few seconds, then left (it is a daemon)."""
    for pool in list(_live):
        pool.close(_JOIN_AT_EXIT)


atexit.register(_close_all)


class Pool:
    """``num_workers`` daemon threads that run the batches of one iterator at a time (a *run*);
    persistent workers run many."""

    def __init__(
        self,
        num_workers: int,
        dataset: Any,
        seed: int,
        worker_init_fn: Callable[[int], None] | None,
        watch: RngWatch,
        per_worker: list[Any] | None = None,
    ) -> None:
        """``per_worker``: each worker's own dataset (its ``get_worker_info().dataset``), where
        the workers cannot share ``dataset`` (an iterable one with state on itself)."""
        install_worker_info()
        from torch.utils.data._utils.worker import WorkerInfo  # the class torch's workers get

        self.num_workers = num_workers
        self.shared = shared = _Shared(num_workers, watch)
        self.threads = [
            threading.Thread(
                target=_loop,
                args=(
                    shared,
                    i,
                    WorkerInfo(
                        # torch's WorkerInfo.seed (base seed + id): reported, never a key
                        id=i, num_workers=self.num_workers, seed=seed + i,
                        dataset=dataset if per_worker is None else per_worker[i],
                        worker_method=THREAD,
                    ),
                    worker_init_fn,
                ),
                name=f"seekdata-worker-{i}",
                daemon=True,
            )
            for i in range(self.num_workers)
        ]  # fmt: skip
        masked = hasattr(signal, "pthread_sigmask")
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED) if masked else None
        try:
            for thread in self.threads:
                thread.start()  # inherits the blocked signals
        finally:
            if previous is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        _live.add(self)

    @property
    def alive(self) -> bool:
        return not self.shared.closed

    def close(self, wait: float | None = None) -> None:
        """Stop the threads and wait for them (each ends after the batch it is on; ``wait``:
        at most so many seconds each)."""
        if _live is not None:  # None once the interpreter tears this module down
            _live.discard(self)
        shared = self.shared
        with shared.cond:
            if shared.closed:
                return
            shared.closed = True
            shared.drop_pending()
            shared.cond.notify_all()
        me = threading.current_thread()
        for thread in self.threads:
            if thread is not me:
                thread.join(wait)

    def __del__(self) -> None:
        # not contextlib.suppress: modules may be torn down already at interpreter exit
        try:  # noqa: SIM105
            self.close()
        except Exception:  # nothing to report to at interpreter exit
            pass

    def batches(
        self,
        planned: Iterator[Any],
        work: Callable[[Any], Any],
        depth: int,
        timeout: float,
        failed: Callable[[BaseException], Any],
        owned: bool,
        phased: bool = True,
    ) -> Iterator[Any]:
        """The results of ``work`` over ``planned``, in order, ``depth`` of them ahead; an error
        in a worker comes out as ``failed(error)``, a value (the loader counts the batch, then
        raises it, as torch counts a batch whose fetch raised). ``owned``: the iterator closes
        the pool when it ends or is dropped (``persistent_workers=False``). ``phased``: each
        ``next()`` marks the caller's wait for :class:`RngWatch`; False where the caller marks
        it around more than one ``next()`` (the iterable path's one batch takes several)."""
        return _Run(self, planned, work, depth, timeout, failed, owned, phased)


def _loop(shared: _Shared, i: int, info: Any, worker_init_fn: Callable[[int], None] | None) -> None:
    """One worker thread: ``worker_init_fn``, then the batches its queue gets."""
    _local.info = info
    _sample.mark_threaded()
    cond, queue = shared.cond, shared.queues[i]
    try:
        if worker_init_fn is not None:
            worker_init_fn(i)
    except BaseException as e:
        with cond:
            shared.failed = (i, e)
            cond.notify_all()
        return
    while True:
        with cond:
            while True:
                if shared.closed:
                    return
                if queue:
                    task = queue.popleft()
                    if task.run == shared.run:
                        break
                    continue  # a superseded iterator's batch
                cond.wait()
        watch = shared.watch
        try:
            mark = watch.before()
            value = task.work(task.planned)
            moved = watch.after(mark)
            if moved:
                raise global_draw_error(moved, i, _which(task.planned))
            out = (True, value)
        except BaseException as e:
            _note(e, f"in DataLoader worker thread {i}")
            out = (False, e)
        with cond:
            if shared.closed:
                return
            if task.run == shared.run:
                shared.results[task.k] = out
                cond.notify_all()
        del task, out, value


def _which(planned: Any) -> str:
    indices = getattr(planned, "indices", None)
    if indices is None:
        return "a batch"
    shown = ", ".join(str(i) for i in indices[:8]) + (", ..." if len(indices) > 8 else "")
    return f"batch {planned.batch} of epoch {planned.epoch} (indices [{shown}])"


def _note(error: BaseException, note: str) -> None:
    add = getattr(error, "add_note", None)
    if add is not None and note not in getattr(error, "__notes__", ()):
        add(note)


class _Run:
    """One iterator's batches from a :class:`Pool`, in order (torch's ``in_order``)."""

    def __init__(
        self,
        pool: Pool,
        planned: Iterator[Any],
        work: Callable[[Any], Any],
        depth: int,
        timeout: float,
        failed: Callable[[BaseException], Any],
        owned: bool,
        phased: bool = True,
    ) -> None:
        self.pool, self.planned, self.work = pool, planned, work
        self.depth, self.timeout, self.failed = max(1, depth), timeout, failed
        self.owned, self.phased = owned, phased
        shared = pool.shared
        with shared.cond:
            shared.run += 1
            shared.drop_pending()
            self.run = shared.run
        self.sent = 0  # batches handed to the workers
        self.next = 0  # the batch handed out next
        self.exhausted = False  # the plan has no more batches
        self.ended = False

    def __iter__(self) -> _Run:
        return self

    def _send(self, shared: _Shared) -> None:
        """Hand the workers batches until ``depth`` are ahead (caller holds the condition)."""
        num_workers = self.pool.num_workers
        while not self.exhausted and self.sent - self.next < self.depth:
            planned = next(self.planned, None)
            if planned is None:
                self.exhausted = True
                break
            k = self.sent
            # batch k goes to worker k % num_workers (torch's round robin), or to the worker
            # the plan names (an iterable dataset's turn skips workers whose stream ended)
            worker = getattr(planned, "worker", None)
            worker = k % num_workers if worker is None else worker
            shared.queues[worker].append(_Task(self.run, k, planned, self.work))
            self.sent += 1
        shared.cond.notify_all()

    def __next__(self) -> Any:
        if self.ended:
            raise StopIteration
        shared = self.pool.shared
        if not self.phased:  # the caller marks its wait itself
            ok, value = self._wait(shared)
            return value if ok else self.failed(value)
        watch = shared.watch
        watch.phase += 1  # odd: the caller's thread waits in here (RngWatch)
        try:
            ok, value = self._wait(shared)
        finally:
            watch.phase += 1  # even: the caller's thread runs its step
        return value if ok else self.failed(value)

    def _wait(self, shared: _Shared) -> tuple[bool, Any]:
        with shared.cond:
            if shared.run != self.run or shared.closed:
                raise RuntimeError(
                    "StatefulDataLoader: the thread workers of this iterator went on to another "
                    "iterator or were stopped; call iter(loader) to continue from its cursor"
                )
            self._send(shared)
            if self.next >= self.sent:
                ending = True
            else:
                ending = False
                deadline = None if not self.timeout else time.monotonic() + self.timeout
                while self.next not in shared.results:
                    if shared.failed is not None:
                        worker, error = shared.failed
                        raise RuntimeError(
                            f"StatefulDataLoader: worker_init_fn raised in thread worker "
                            f"{worker}; fix worker_init_fn (its error is chained below)"
                        ) from error
                    wait = None
                    if deadline is not None:
                        wait = deadline - time.monotonic()
                        if wait <= 0:
                            raise RuntimeError(
                                f"DataLoader timed out after {self.timeout} seconds: thread "
                                f"worker {self.next % self.pool.num_workers} did not deliver batch "
                                f"{self.next} in time; raise timeout=, or make the dataset "
                                f"faster"
                            )
                    shared.cond.wait(wait)
                out = shared.results.pop(self.next)
                self.next += 1
                self._send(shared)
        if ending:
            self.close()
            raise StopIteration
        return out

    def close(self) -> None:
        """The iterator ended, or is dropped or superseded: its batches ahead are dropped, and
        its own threads (``persistent_workers=False``) stop."""
        if self.ended:
            return
        self.ended = True
        shared = self.pool.shared
        with shared.cond:
            if shared.run == self.run:
                shared.run += 1  # the workers drop what is left of this run
                shared.drop_pending()
        if self.owned:
            self.pool.close()

    def __del__(self) -> None:
        # not contextlib.suppress: modules may be torn down already at interpreter exit
        try:  # noqa: SIM105
            self.close()
        except Exception:  # nothing to report to at interpreter exit
            pass

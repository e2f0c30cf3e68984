"""The ``jaxfed`` command's process: :func:`main` (devices and processes set up, user files
imported, the command run, every error reported in one line) and :func:`console`."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import jax

from jaxfed import validation
from jaxfed.cli.commands import COMMANDS
from jaxfed.cli.parser import DEBUG_ENV, DEFAULT_OUT, build_parser
from jaxfed.engine import devices
from jaxfed.runs import catalog
from jaxfed.runs.runner import calling_after, notice_if_slow


def _start_devices(args) -> None:
    """Device and process set-up of the commands that run (before JAX initialises its backends):
    the processes a cluster scheduler started (``--distributed auto``) or those given by hand
    joined by ``jax.distributed``; on a CPU ``--devices N`` host devices, else one per usable core
    (:func:`jaxfed.engine.devices.default_host_devices`) unless ``XLA_FLAGS`` sets a count.
    Processes started by hand may share a machine, which none of them can see: each keeps one host
    device unless ``--devices`` is given. ``jaxfed reproduce`` keeps one host device unless
    ``--devices`` is given: at the experiments' default sizes a group runs about as long as it
    compiles, and every core did not make the whole command faster (docs/performance.md, "Every
    core by default")."""
    if not hasattr(args, "distributed"):  # (list, show, plot, report run nothing)
        return
    n = args.num_processes
    cluster = devices.scheduler_processes(os.environ) if args.distributed != "off" and n != 1 else None
    by_hand = cluster is None and n is not None and n > 1
    if args.devices:
        devices.ask_host_devices(args.devices)
    elif (
        not by_hand
        and args.command != "reproduce"
        and devices.host_devices_asked(os.environ.get("XLA_FLAGS", "")) is None
    ):
        if not devices.backends_started():  # (cli.main called in a process that already uses JAX)
            devices.ask_host_devices(devices.default_host_devices())
    if by_hand:
        if not args.coordinator or args.process_id is None:
            raise ValueError(
                "a multi-process run needs --coordinator host:port and --process-id (or their JAXFED_ variables)"
            )
        validation.index("process_id", args.process_id, n, f"an index in [0, num_processes = {n})")
    if by_hand or cluster is not None:
        found = "" if cluster is None else f" ({cluster.n_processes} {cluster.scheduler} processes)"
        _initialize_distributed(args.coordinator, n, args.process_id, args.coordinator_timeout, found)
    if args.devices:
        present = jax.local_devices()
        if args.devices > len(present):
            raise ValueError(
                f"--devices {args.devices}: only {len(present)} {present[0].platform} device(s) present on this machine"
            )


def _initialize_distributed(
    coordinator: str | None, n: int | None, process_id: int | None, timeout: float, found: str = ""
) -> None:
    """:func:`jaxfed.engine.devices.start_distributed` (what is None found by JAX's cluster
    detection, ``found`` saying what it found), or one line and exit status 2 when not every
    process has reached the coordinator within ``timeout`` seconds.

    JAX itself aborts the process with a multi-line fatal log on its own timeout, so a watchdog
    thread (JAX's wait releases the interpreter) reports first and ends the process.
    """

    def give_up():
        where = f"the coordinator {coordinator}" if coordinator else f"the coordinator found by jax{found}"
        sys.stderr.write(
            f"jaxfed: error: {where} and all {n or 'the'} processes were not reachable within "
            f"{timeout:g} s (--coordinator-timeout); check the address and start every process\n"
        )
        sys.stderr.flush()
        os._exit(2)

    with calling_after(timeout, give_up):
        devices.start_distributed(coordinator, n, process_id, timeout=int(timeout) + 30)  # JAX's limit after ours


def main(argv: list[str] | None = None) -> int:
    """Runs the ``jaxfed`` command with the arguments ``argv`` (default ``sys.argv[1:]``).

    Errors in names, values or parameters, and any exception raised in a user experiment's code
    (with the file and line), print one line ``jaxfed: error: …`` and return 2; ``--debug`` (or
    ``JAXFED_DEBUG=1``) raises them instead.

    Args:
        argv: the arguments after ``jaxfed``.

    Returns:
        The exit status: 0 done, 1 ``verify`` found another build's values, 2 an error, 130
        interrupted.

    Raises:
        SystemExit: argparse's (a bad argument, ``--help``), or one that code the command ran raised
            where ``--debug`` is on or no user file raised it.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    # The CLI only writes figures to files: the Agg backend, chosen here, when a command runs, not on
    # `import jaxfed.cli` (the library leaves the backend to its caller: a notebook keeps its own).
    import matplotlib

    matplotlib.use("Agg")
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
    _resolve_paths(args)  # before any user code runs: a file that calls os.chdir at import moves nothing
    signals: list = []  # SIGINTs received: a KeyboardInterrupt without one was raised by code, not the user
    # An ignored SIGINT (a job started in the background, nohup, some batch runners) raises nothing: every
    # KeyboardInterrupt is then code's.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    previous = _count_interrupts(signals)
    try:
        _start_devices(args)
        with _process_ends_refused():
            with notice_if_slow(f"importing {', '.join(args.imports)}"):
                args.imported = catalog.import_extensions(args.imports)  # before any name is resolved
            return COMMANDS[args.command](args)
    except KeyboardInterrupt as err:
        where = None if signals or (previous is None and not ignored) else catalog.user_frame(err)
        if where is not None and not debug:
            print(
                f"jaxfed: error: {where[0]}:{where[1]}: KeyboardInterrupt raised by the experiment's code (no "
                "interrupt signal was received); the run did not finish",
                file=sys.stderr,
            )
            return 2
        print("jaxfed: interrupted; rerun the same command to resume from the finished chunks", file=sys.stderr)
        return 130
    except SystemExit as err:  # (argparse's exits come before: this one is code called inside the command)
        where = catalog.user_frame(err)
        if where is None or debug:
            raise
        called = err.call if isinstance(err, ProcessEndCalled) else f"sys.exit({err.code!r})"
        print(
            f"jaxfed: error: {where[0]}:{where[1]}: the experiment's code called {called}; "
            "the run did not finish (a file must define experiments, not exit)",
            file=sys.stderr,
        )
        return 2
    except Exception as err:
        line = None if debug else _error_line(err)
        if line is None:
            raise  # --debug, or a fault in jaxfed's own code: the traceback is the report
        print(f"jaxfed: error: {line}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class ProcessEndCalled(SystemExit):
    """A call that would end the process (``os._exit``, ``os.abort``, a terminating signal sent to
    itself), made by code a command runs: raised in its place (see :func:`_process_ends_refused`)."""

    def __init__(self, call: str, code: int = 2):
        super().__init__(code)
        self.call = call


_KEEPS_RUNNING = {
    getattr(signal, name) for name in ("SIGCHLD", "SIGCONT", "SIGURG", "SIGWINCH") if hasattr(signal, name)
}
"""Signals whose default action does not end the process."""


def _ends_the_process(sig) -> bool:
    """Whether ``sig`` delivered to this process now would end it (or stop it): SIGKILL and SIGSTOP
    always, any other signal left to its default action unless that action is to ignore it."""
    try:
        sig = signal.Signals(sig)
    except ValueError:
        return False
    if sig in (signal.SIGKILL, getattr(signal, "SIGSTOP", signal.SIGKILL)):
        return True
    return sig not in _KEEPS_RUNNING and signal.getsignal(sig) == signal.SIG_DFL


@contextlib.contextmanager
def _process_ends_refused():
    """While a command runs user code, every call by which it could end this process raises
    :class:`ProcessEndCalled` instead (reported with the caller's file and line, exit status 2),
    where the process would otherwise end with the status the code chose and no result written:
    ``os._exit`` and ``posix._exit`` (one function under two names), ``os.abort``, and ``os.kill``,
    ``os.killpg``, ``signal.raise_signal`` and ``signal.pthread_kill`` sending this process a signal
    that would end it. A forked child (another pid) still exits; signals to other processes, and
    signals this process handles, go through."""
    posix = sys.modules[os.name]  # (posix, or nt: the module os takes these from, callable by that name too)
    pid = os.getpid()
    real = {name: getattr(os, name) for name in ("_exit", "abort", "kill", "killpg")}
    real_raise, real_pthread_kill = signal.raise_signal, signal.pthread_kill

    def ours() -> bool:
        return os.getpid() == pid  # (not in a forked child)

    def _exit(status: int) -> None:
        if not ours():
            real["_exit"](status)
        raise ProcessEndCalled(f"os._exit({status!r})")

    def abort() -> None:
        if not ours():
            real["abort"]()
        raise ProcessEndCalled("os.abort()")

    def kill(target: int, sig: int) -> None:
        if ours() and target in (pid, 0) and _ends_the_process(sig):
            raise ProcessEndCalled(f"os.kill({target}, {signal.Signals(sig).name}) on its own process")
        real["kill"](target, sig)

    def killpg(group: int, sig: int) -> None:
        if ours() and group in (os.getpgid(0), 0) and _ends_the_process(sig):
            raise ProcessEndCalled(f"os.killpg({group}, {signal.Signals(sig).name}) on its own process group")
        real["killpg"](group, sig)

    def raise_signal(sig: int) -> None:
        if ours() and _ends_the_process(sig):
            raise ProcessEndCalled(f"signal.raise_signal({signal.Signals(sig).name})")
        real_raise(sig)

    def pthread_kill(thread_id: int, sig: int) -> None:
        if ours() and _ends_the_process(sig):
            raise ProcessEndCalled(f"signal.pthread_kill(…, {signal.Signals(sig).name})")
        real_pthread_kill(thread_id, sig)

    replaced = {"_exit": _exit, "abort": abort, "kill": kill, "killpg": killpg}
    for name, function in replaced.items():
        setattr(os, name, function)
        if hasattr(posix, name):
            setattr(posix, name, function)
    signal.raise_signal, signal.pthread_kill = raise_signal, pthread_kill
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(os, name, function)
            if hasattr(posix, name):
                setattr(posix, name, function)
        signal.raise_signal, signal.pthread_kill = real_raise, real_pthread_kill


def _resolve_paths(args) -> None:
    """Every path the command names made absolute, before any user code runs (``--out``, DIR,
    ``--import`` files, ``FILE.py:NAME``): a user file that calls ``os.chdir`` at import or in
    ``build()`` moves no result. ``args.out_given`` keeps ``--out`` as given (printed back)."""
    args.out_given = getattr(args, "out", None)
    args.default_out = os.path.abspath(DEFAULT_OUT)
    for name in ("out", "dir"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, os.path.abspath(value))
    args.imports = [os.path.abspath(path) for path in getattr(args, "imports", [])]
    for name in ("name", "experiment"):
        value = getattr(args, name, None)
        path, sep, attribute = value.rpartition(":") if isinstance(value, str) else ("", "", "")
        if sep and path.endswith(".py"):
            setattr(args, name, f"{os.path.abspath(path)}:{attribute}")


def _count_interrupts(signals: list):
    """Installs a SIGINT handler that notes each signal in ``signals`` and raises KeyboardInterrupt
    as Python's own does; returns the handler it replaced (None: left as it was, off the main
    thread or under another handler)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None

    def noted(signum, frame):
        signals.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, noted)
    return previous


def _error_line(err: Exception) -> str | None:
    """The one line that reports ``err`` (after ``jaxfed: error:``): a bad value, a path, memory,
    or any exception raised in user code (an experiment file's import, ``__post_init__``,
    ``build``, trial, plot), prefixed with the user file and line where it was raised; None for
    an unexpected exception in jaxfed's own code. A bad value, path or memory need that jaxfed
    reports (naming the parameter or file) keeps its message alone, wherever it was called from."""
    expected = isinstance(err, (ValueError, OSError, MemoryError))
    where = catalog.user_frame(err, raised_there=expected)
    at = f"{where[0]}:{where[1]}: " if where is not None else ""
    if isinstance(err, ValueError):
        return at + " ".join(str(err).split())
    if isinstance(err, OSError):  # a path that is not a directory, a read-only one, a full disk, …
        return at + (f"{err.filename}: " if err.filename else "") + str(err.strerror or err)
    if isinstance(err, MemoryError):
        return f"{at}out of memory ({' '.join(str(err).split()) or 'allocation failed'}); use smaller shapes"
    if where is None:
        return None
    first = next((text.strip() for text in str(err).splitlines() if text.strip()), "")  # JAX's run to pages
    return f"{at}{type(err).__name__}: {first} (the full traceback: --debug or {DEBUG_ENV}=1)"


def console() -> None:
    """The ``jaxfed`` command: :func:`main`, then the process ends with its exit status, even where
    user code left threads running (a non-daemon thread would keep the process alive, hanging,
    after the run was written): it says so and exits without them."""
    code = main()
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if left:
        names = ", ".join(sorted({t.name for t in left}))
        print(
            f"jaxfed: note: the experiment's code left {len(left)} thread(s) running ({names}); exiting without them",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

"""Sandboxed grading workers, and the jupyter_client glue that runs kernels in them.

A *worker* is one long-lived process (:mod:`autograder.grading.zygote`) that has already
imported torch and the kernel, and forks a fresh kernel for each submission. With the
sandbox on (the default), each worker runs

* in its own network namespace (no network at all: only a loopback that is down),
* in its own PID namespace (it cannot see or signal other processes; when a submission
  ends, everything it started is killed, however it detached itself),
* in its own mount namespace where ``/`` is read-only and the course root, home folders,
  ``/tmp``, ``/run``, ``/mnt``, ``/srv`` and the rest of the course's repository are
  covered by empty tmpfs mounts; only the Python installation, the course's packages and
  the worker's own folder are mounted back (read-only), plus a size-limited tmpfs for the
  submission's files,
* as its own unprivileged uid/gid (one per worker), with no capabilities and
  ``no_new_privs``,
* under resource limits: CPU seconds, address space, processes, file size, open files,
  no core dumps.

All of it is util-linux (``unshare``, ``mount``, ``setpriv``, ``prlimit``); it needs root
(to create the namespaces and switch uid) on Linux. :func:`sandbox_problem` says why the
sandbox cannot be used here, and the command refuses to grade without it unless told
``--no-sandbox``.

The kernel's sockets are ZeroMQ ``ipc`` (Unix) sockets in the worker's socket folder, so
the driver reaches the kernel without any network.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

import autograder

UID_BASE = 990_000  # worker i runs as uid/gid UID_BASE + i (no such user needs to exist)
HERE = Path(__file__).resolve().parent


@dataclass
class Limits:
    """What one submission may use. Sizes in bytes, times in seconds."""

    cell_timeout: float | None = None  # None: nbgrader's configured Execute.timeout
    notebook_timeout: float = 600.0
    memory: int = 4 << 30  # address space per process
    cpu: int = 600  # CPU seconds per process
    nproc: int = 256  # processes and threads of the worker's uid
    fsize: int = 64 << 20  # largest file a submission may write
    disk: int = 256 << 20  # its private tmpfs
    nofile: int = 1024
    output: int = 8 << 20  # notebook output kept from the kernel (the rest is dropped)
    startup_timeout: float = 120.0


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be set up on this machine."""


_PROBE: str | None | bool = False  # False: not probed yet


def sandbox_problem() -> str | None:
    """``None`` when workers can be sandboxed here, else the reason in one sentence."""
    global _PROBE
    if _PROBE is not False:
        return _PROBE  # type: ignore[return-value]
    if not sys.platform.startswith("linux"):
        _PROBE = f"the sandbox needs Linux namespaces (this is {sys.platform})"
    elif os.geteuid() != 0:
        _PROBE = ("the sandbox needs root to create namespaces and switch to an unprivileged "
                  f"uid (running as uid {os.geteuid()})")
    else:
        missing = [t for t in ("unshare", "setpriv", "prlimit", "mount") if not shutil.which(t)]
        if missing:
            _PROBE = f"util-linux tools not found: {', '.join(missing)}"
        else:
            probe = subprocess.run(
                ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
                 "setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups",
                 "--no-new-privs", "true"],
                capture_output=True, text=True)
            _PROBE = None if probe.returncode == 0 else (
                "creating namespaces failed: " + (probe.stderr.strip() or f"exit {probe.returncode}"))
    return _PROBE  # type: ignore[return-value]


def package_dirs() -> list[str]:
    """Folders of the course's importable packages (``autograder``, ``course``)."""
    dirs = [str(Path(autograder.__file__).resolve().parent)]
    try:
        import course

        dirs.append(str(Path(course.__file__).resolve().parent))
    except ImportError:
        pass
    return dirs


def hidden_paths(course_root: Path) -> list[str]:
    home = os.path.expanduser("~")
    repo = str(Path(autograder.__file__).resolve().parent.parent)
    paths = {"/tmp", "/var/tmp", "/run", "/root", "/home", "/mnt", "/media", "/srv", home,
             str(course_root.resolve()), repo}
    return sorted(p for p in paths if p and p != "/")


class KernelHandle:
    """A kernel forked by a worker, seen as the ``Popen`` that jupyter_client expects."""

    stdin = stdout = stderr = None

    def __init__(self, worker: Worker, pid: int) -> None:
        self.worker = worker
        self.pid = pid
        self.returncode: int | None = None
        self.killed_by_driver: str | None = None  # why the driver ended it, if it did

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self.worker.send({"op": "signal", "sig": int(sig)})

    def kill(self) -> None:
        if self.returncode is None:
            self.worker.kill_kernel()

    terminate = kill


class Worker:
    """One sandboxed (or, with ``sandbox=False``, plain) zygote process and its folders."""

    def __init__(self, index: int, root: Path, limits: Limits, *, sandbox: bool,
                 course_root: Path, lessons: list[str]) -> None:
        self.index = index
        self.limits = limits
        self.sandbox = sandbox
        self.course_root = course_root
        self.lessons = lessons
        self.dir = root / f"w{index}"
        self.sockets = self.dir / "sock"
        self.job = self.dir / "job"
        self.scratch = self.dir / "scratch"
        self.uid = self.gid = UID_BASE + index if sandbox else os.getuid()
        self.proc: subprocess.Popen | None = None
        self.kernel: KernelHandle | None = None
        self._lock = threading.Lock()
        self._events: queue.Queue = queue.Queue()
        self.ready_info: dict = {}
        self.log_path = self.dir.parent / f"w{index}.log"

    # -- lifecycle
    def _prepare_dirs(self) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir)
        for d in (self.dir, self.job, self.scratch):
            d.mkdir(parents=True)
            d.chmod(0o755)
        self.sockets.mkdir()
        self.sockets.chmod(0o700)
        if self.sandbox:
            os.chown(self.sockets, self.uid, self.gid)

    def command(self) -> tuple[list[str], dict[str, str]]:
        zcfg = {"scratch": str(self.scratch), "sockets": str(self.sockets),
                "lessons": self.lessons}
        pythonpath = os.pathsep.join(sorted({str(Path(d).parent) for d in package_dirs()}))
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(self.scratch),
        }
        argv = [sys.executable, "-s", "-m", "autograder.grading.zygote", json.dumps(zcfg)]
        if not self.sandbox:
            return argv, dict(os.environ, **{k: env[k] for k in ("PYTHONPATH",)})
        keep = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(self.dir),
                *package_dirs()}
        lim = self.limits
        cfg = {
            "keep_ro": sorted(keep), "hide": hidden_paths(self.course_root),
            "bind_rw": [str(self.sockets)], "scratch": str(self.scratch),
            "uid": self.uid, "gid": self.gid, "disk_bytes": lim.disk,
            "limits": {"cpu": lim.cpu, "memory": lim.memory, "nproc": lim.nproc,
                       "fsize": lim.fsize, "nofile": lim.nofile},
            "argv": argv, "env": env,
        }
        cmd = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
               "--propagation", "private",
               sys.executable, "-I", "-S", str(HERE / "nsinit.py"), json.dumps(cfg)]
        return cmd, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def start(self) -> None:
        """Start the worker process (returns at once; :meth:`wait_ready` waits for it)."""
        self._prepare_dirs()
        cmd, env = self.command()
        self._events = queue.Queue()
        self.kernel = None
        self.ready_info = {}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, env=env, cwd="/", start_new_session=True)
        # The reader gets this process's own queue: a stopped worker's reader may see its
        # end only after the next worker started, and must not report that one dead.
        threading.Thread(target=self._read, args=(self.proc, self._events), daemon=True).start()

    def wait_ready(self, timeout: float) -> None:
        if not self.ready_info:
            self.ready_info = self._next_event(timeout, "ready")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()  # the worker kills its kernel and exits
            proc.wait(timeout=3)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    # -- protocol
    def _read(self, proc: subprocess.Popen, events: queue.Queue) -> None:
        assert proc.stdout is not None

        def kernel():  # this process's kernel; none once the next worker has started
            return self.kernel if self._events is events else None

        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            k = kernel()
            if "exited" in msg and k is not None and k.pid == msg["exited"]:
                k.returncode = msg["status"]
            elif "killed" in msg and k is not None and k.returncode is None:
                k.returncode = -9
            events.put(msg)
        k = kernel()
        if k is not None and k.returncode is None:
            k.returncode = -9
        events.put({"dead": True})

    def send(self, msg: dict) -> None:
        with self._lock:
            if not self.alive():
                raise SandboxUnavailable(f"worker {self.index} is not running")
            assert self.proc is not None and self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()

    def _next_event(self, timeout: float, key: str, value=None) -> dict:
        """The next event carrying ``key`` (equal to ``value``, if given); the others are put
        back for whoever waits for them."""
        deadline = time.monotonic() + timeout
        others: list[dict] = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxUnavailable(f"worker {self.index}: no {key!r} within "
                                             f"{timeout:g} s (see {self.log_path})")
                try:
                    msg = self._events.get(timeout=left)
                except queue.Empty:
                    continue
                if key in msg and (value is None or msg[key] == value):
                    return msg
                if msg.get("dead"):
                    others.append(msg)
                    tail = self.log_path.read_text(errors="replace")[-2000:] \
                        if self.log_path.exists() else ""
                    raise SandboxUnavailable(f"worker {self.index} exited\n{tail}")
                if not any(k in msg for k in ("cell_records", "cell_began")):
                    others.append(msg)  # an answer nobody waits for any more is dropped
        finally:
            for msg in others:
                self._events.put(msg)

    # -- the grader's checker (autograder.grading.zygote.Checker)
    def cell_begin(self, tag: str, limit: float | None, timeout: float = 20.0) -> None:
        """A cell of the submission is about to run, with this time limit; returns once the
        checker has opened the cell's window (so no check of the cell can reach it before)."""
        self.send({"op": "cell", "begin": tag, "limit": limit})
        self._next_event(timeout, "cell_began", tag)

    def cell_end(self, tag: str, timeout: float = 20.0) -> dict:
        """The cell ended: the checker's record of the checks it answered during it
        (``{"records": [...]}``, or ``{"error": why}``)."""
        try:
            self.send({"op": "cell", "end": tag})
            msg = self._next_event(timeout, "cell_records", tag)
        except SandboxUnavailable as exc:
            return {"error": f"the grading worker did not answer ({str(exc).splitlines()[0]})"}
        return {k: v for k, v in msg.items() if k != "cell_records"}

    def stage_job(self, files: dict[str, Path | bytes]) -> None:
        """Put a submission's files where the next kernel copies them from (read-only to it).

        A value is a file to copy, or the file's bytes (as a Dask task receives them)."""
        if self.job.exists():
            shutil.rmtree(self.job)
        self.job.mkdir()
        self.job.chmod(0o755)
        for rel, src in files.items():
            dest = (self.job / rel).resolve()
            if not dest.is_relative_to(self.job.resolve()):
                continue  # a name like ../x: never written outside the job folder
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                dest.write_bytes(src)
            else:
                shutil.copyfile(src, dest, follow_symlinks=False)
            dest.chmod(0o644)
        for d, _, _ in os.walk(self.job):
            os.chmod(d, 0o755)

    def start_kernel(self, conn: dict, extra: list[str]) -> KernelHandle:
        self._drain()
        self.send({"op": "start", "conn": conn, "extra": extra, "job": str(self.job)})
        msg = self._next_event(30, "started")
        self.kernel = KernelHandle(self, msg["started"])
        return self.kernel

    def kill_kernel(self, reason: str | None = None) -> None:
        """End the current kernel and everything it started; wipe its files."""
        kernel = self.kernel
        if kernel is not None and reason and kernel.killed_by_driver is None:
            kernel.killed_by_driver = reason
        if not self.alive():
            return
        self.send({"op": "kill"})

    def finish(self, timeout: float = 30) -> None:
        """Kill what is left of the current submission and wait until the worker is clean."""
        if not self.alive():
            return
        self._drain()
        self.send({"op": "kill"})
        self._next_event(timeout, "killed")
        self.kernel = None

    def _drain(self) -> None:
        while True:
            try:
                msg = self._events.get_nowait()
            except queue.Empty:
                return
            if msg.get("dead"):
                self._events.put(msg)
                return


class WorkerProvisioner(LocalProvisioner):
    """Launches the kernel by asking a worker to fork one, instead of starting a process."""

    worker: Worker | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs):
        assert self.worker is not None and self.parent is not None
        with open(self.parent.connection_file) as f:
            conn = json.load(f)
        extra = cmd[cmd.index("-f") + 2:] if "-f" in cmd else []
        self.process = self.worker.start_kernel(conn, extra)
        self.pid = self.process.pid
        self.pgid = None  # signals go through the worker
        return self.connection_info

    async def cleanup(self, restart: bool = False) -> None:
        return None


class WorkerKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, without the fixed waits of its ``wait_for_ready``.

    jupyter_client's version takes the ``kernel_info`` reply, then waits up to 0.2 s for
    any IOPub message (to see IOPub connected), then waits until IOPub has been silent
    for 0.2 s: at least 0.2 s per kernel, often 0.4 s. Here the proof that IOPub is
    connected is the IOPub ``idle`` status of that same ``kernel_info`` request, after
    which everything it caused has arrived (one socket keeps its order), and only what
    is already queued is discarded. Same retries, same errors. nbclient then ignores
    every IOPub message that does not answer the cell it runs, so what it records is
    the same.
    """

    async def wait_for_ready(self, timeout: float | None = None) -> None:  # type: ignore[override]
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            msg_id = self.kernel_info()
            try:
                reply = await self._async_recv_reply(msg_id, timeout=1)
            except TimeoutError:
                reply = None
            if reply is not None and await self._iopub_idle_after(msg_id, 0.2):
                self._handle_kernel_info_reply(reply)
                break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")
        while True:  # flush what has already arrived on IOPub
            try:
                await self.iopub_channel.get_msg(timeout=0)
            except queue.Empty:
                return

    async def _iopub_idle_after(self, msg_id: str, wait: float) -> bool:
        end = time.monotonic() + wait
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            try:
                msg = await self.iopub_channel.get_msg(timeout=left)
            except queue.Empty:
                return False
            if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id
                    and msg["content"].get("execution_state") == "idle"):
                return True


class WorkerKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernels live in a worker, reached over ipc sockets.

    nbclient instantiates its ``kernel_manager_class`` itself, so :meth:`for_worker` makes
    a subclass bound to one worker.
    """

    worker: Worker | None = None

    @classmethod
    def for_worker(cls, worker: Worker) -> type[WorkerKernelManager]:
        return type(f"WorkerKernelManager{worker.index}", (cls,), {"worker": worker})

    def __init__(self, **kwargs) -> None:
        worker = type(self).worker
        assert worker is not None, "use WorkerKernelManager.for_worker(worker)"
        kwargs.setdefault("kernel_name", "python3")
        kwargs.setdefault("client_class", f"{__name__}.WorkerKernelClient")
        super().__init__(transport="ipc", ip=str(worker.sockets / "k"), **kwargs)
        self.connection_file = str(worker.dir.parent / f"conn-{worker.index}-{uuid.uuid4()}.json")

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        # jupyter_client polls a killed kernel every 0.1 s; the worker reports its end
        # within milliseconds
        await super()._async_wait(pollinterval=min(pollinterval, 0.005))

    async def _async_pre_start_kernel(self, **kw):
        self.kernel_id = self.kernel_id or str(uuid.uuid4())
        if self.provisioner is None:
            prov = WorkerProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                     parent=self)
            prov.worker = type(self).worker
            self.provisioner = prov
        return await super()._async_pre_start_kernel(**kw)


def limits_json(limits: Limits) -> dict:
    return asdict(limits)

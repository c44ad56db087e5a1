"""Real servers that a test starts on 127.0.0.1 and stops by their own process id."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL binaries (``apt-get install postgresql``), newest version."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A throw-away PostgreSQL cluster: ``initdb`` into a temp folder as the ``postgres``
    user (the server refuses to run as root), listening on 127.0.0.1 only, trust auth."""

    def __init__(self, root: Path) -> None:
        bindir = postgres_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = bindir
        self.root = root
        self.data = root / "data"
        self.sockets = root / "sockets"
        self.port = free_port()
        self.pid: int | None = None
        self.user = "postgres"

    def _as_postgres(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            cmd = ("setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                   "--init-groups", *cmd)
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120,
                              cwd=self.root)

    def start(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            for p in (self.root, self.sockets):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            # the folders above it must be passable for the postgres user
            for parent in self.root.parents:
                if parent == Path("/"):
                    break
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o001)
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                          "-U", self.user, "--no-sync", "-E", "UTF8")
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
            "-w", "-t", "60", "-o",
            f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off", "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def createdb(self, name: str) -> str:
        self._as_postgres(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                          "-U", self.user, name)
        return self.url(name)

    def url(self, name: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the server by its own pid (SIGINT: PostgreSQL's fast shutdown)."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            self.pid = None
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(self.pid, signal.SIGKILL)
        self.pid = None
        shutil.rmtree(self.data, ignore_errors=True)


class DaskCluster:
    """``dask scheduler`` and N ``dask worker`` processes on 127.0.0.1 (no nanny, so a
    killed worker stays dead, one thread each as docs/grading.md says to run them)."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.n = workers
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def _dask(self) -> str:
        import sys

        return str(Path(sys.executable).parent / "dask")

    def start(self, env: dict[str, str] | None = None) -> DaskCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "scheduler.log", "ab")
        self.scheduler = subprocess.Popen(
            [self._dask(), "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
             "--no-dashboard"], stdout=log, stderr=log, env=env, start_new_session=True)
        for i in range(self.n):
            wlog = open(self.root / f"worker{i}.log", "ab")
            self.workers.append(subprocess.Popen(
                [self._dask(), "worker", self.address, "--nthreads", "1", "--no-nanny",
                 "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}"],
                stdout=wlog, stderr=wlog, env=env, start_new_session=True))
        from distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(self.n, timeout=120)
        return self

    def kill_worker(self, i: int) -> None:
        os.kill(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait()

    def stop(self) -> None:
        """Stop every process by its own pid: SIGTERM, then SIGKILL after 10 s."""
        procs = [p for p in [*self.workers, self.scheduler] if p is not None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

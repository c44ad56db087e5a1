"""First program inside a worker's new namespaces: arrange the filesystem, then drop privileges.

Started by the driver as ``unshare --net --mount --pid --fork --mount-proc ... python -I -S
nsinit.py CONFIG`` (see :mod:`autograder.grading.sandbox`). It runs as root, but only
inside the worker's private mount namespace, and does nothing but call util-linux
``mount``:

1. opens the folders that must stay visible (the Python installation, the course's
   packages, the worker's own folder) so they can be mounted back after step 2;
2. covers the folders that must not be seen (the course root, home folders, ``/tmp``,
   ``/run``, ...) with empty read-only tmpfs mounts;
3. mounts the kept folders back at their own paths, read-only, and the worker's socket
   folder read-write;
4. gives the worker a size-limited private tmpfs for the submission's files and a
   private ``/dev/shm``;
5. remounts ``/`` read-only (in this namespace only);

then ``exec``s ``setpriv`` (unprivileged uid/gid, no groups, no capabilities, no new
privileges) and ``prlimit`` (CPU, address space, processes, file size, open files, core
dumps), which ``exec`` the worker. Standard library only; no imports of the course.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def mount(*args: str, fds: tuple[int, ...] = ()) -> None:
    subprocess.run(["mount", *args], check=True, pass_fds=fds)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    keep_ro = sorted(p for p in cfg["keep_ro"] if os.path.isdir(p))
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in keep_ro}
    hidden = []
    for path in sorted(cfg["hide"], key=len):
        if os.path.isdir(path) and not os.path.islink(path):
            mount("-t", "tmpfs", "-o", "size=64k,mode=0755", "hide", path)
            hidden.append(path)
    for path in sorted(keep_ro, key=len):
        os.makedirs(path, exist_ok=True)
        fd = fds[path]
        # -c: do not resolve the fd link to its (now covered) path name
        mount("-c", "--bind", f"/proc/self/fd/{fd}", path, fds=(fd,))
        mount("-o", "remount,bind,ro", path)
    for path in cfg["bind_rw"]:
        mount("--bind", path, path)
        mount("-o", "remount,bind,rw", path)  # a bind copies the ro flag of its parent mount
    uid, gid = cfg["uid"], cfg["gid"]
    mount("-t", "tmpfs", "-o",
          f"size={cfg['disk_bytes']},mode=0700,uid={uid},gid={gid},nosuid,nodev",
          "scratch", cfg["scratch"])
    if os.path.isdir("/dev/shm"):
        mount("-t", "tmpfs", "-o", "size=64m,mode=1777,nosuid,nodev", "shm", "/dev/shm")
    for path in hidden:
        if path not in keep_ro:
            mount("-o", "remount,ro", path)
    mount("-o", "remount,bind,ro", "/")
    for fd in fds.values():
        os.close(fd)
    lim = cfg["limits"]
    argv = [
        "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
        "prlimit", f"--cpu={lim['cpu']}", f"--as={lim['memory']}", f"--nproc={lim['nproc']}",
        f"--fsize={lim['fsize']}", f"--nofile={lim['nofile']}", "--core=0", "--",
        *cfg["argv"],
    ]
    os.chdir(cfg["scratch"])
    os.execvpe(argv[0], argv, cfg["env"])


if __name__ == "__main__":
    main()

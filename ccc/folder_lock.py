"""An exclusive lock on an output folder, held through the operating system.

The lock is an ``flock`` on an open descriptor of the folder itself, so it cannot be defeated by
deleting a file, and the OS releases it when the process ends, however it ends (SIGKILL included).
A lock file inside the folder is locked as well: processes of earlier versions locked only that
file, and some network file systems cannot lock a directory (the file lock is then all there is).
The holder writes who it is into the lock file (process id, host, start time), so that a process
refused the lock can name it (:class:`FolderInUseError`). The lock file is opened through
:func:`ccc.safe_files.open_owned`: a symbolic or hard link planted in its place (a shared folder) is
refused, never truncated through.
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from ccc.safe_files import open_owned

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; the lock is then advisory only
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)


class FolderInUseError(BlockingIOError):
    """Another open lock (this or another process) holds the folder or its lock file.

    Attributes:
        folder: the locked folder.
        holder: who holds it, as the holder wrote itself into the lock file ("process 1234 on
            HOST since 2026-01-01 12:00:00 UTC"); None when unknown (a holder of an earlier
            version, or one whose lock file was deleted).
    """

    def __init__(self, folder: Path, holder: str | None) -> None:
        super().__init__(errno.EWOULDBLOCK, f"{folder} is locked by {holder or 'another process'}")
        self.folder = folder
        self.holder = holder


class FolderLock:
    """An exclusive lock on ``folder`` (use as a context manager or call :meth:`release`).

    Acquire with :meth:`acquire`, which raises :class:`FolderInUseError` (a ``BlockingIOError``)
    when another open lock (this or another process) holds the folder or its lock file.
    """

    def __init__(self, folder_descriptor: int | None, lock_file: BinaryIO) -> None:
        self._folder_descriptor = folder_descriptor
        self._lock_file = lock_file

    @classmethod
    def acquire(cls, folder: str | os.PathLike[str], lock_name: str) -> FolderLock:
        """Lock the existing folder ``folder`` and its file ``lock_name`` (created if missing), without
        waiting, and write this process's description into the lock file.

        Raises :class:`FolderInUseError` naming the holder when another lock holds either, and
        :class:`ccc.safe_files.UnsafePathError` when the lock file is a link or not a regular file."""
        folder = Path(folder)
        descriptor: int | None = None
        lock_file = open_owned(folder / lock_name, "lock file")
        try:
            if fcntl is not None:
                descriptor = _lock_directory(folder)
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_file.truncate(0)
            lock_file.write(_this_process().encode())
            lock_file.flush()
        except BlockingIOError:
            lock_file.close()
            if descriptor is not None:
                os.close(descriptor)
            raise FolderInUseError(folder, _holder(folder / lock_name)) from None
        except BaseException:
            lock_file.close()
            if descriptor is not None:
                os.close(descriptor)
            raise
        return cls(descriptor, lock_file)

    def release(self) -> None:
        """Release the lock (closing the descriptors releases the flocks); safe to call twice."""
        if not self._lock_file.closed:
            self._lock_file.close()
        if self._folder_descriptor is not None:
            os.close(self._folder_descriptor)
            self._folder_descriptor = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def _this_process() -> str:
    """How a holder names itself in its lock file."""
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"process {os.getpid()} on {socket.gethostname()} since {started}"


def _holder(lock_path: Path) -> str | None:
    """The holder named in the lock file at ``lock_path`` (its first line), None when it names none."""
    try:
        text = lock_path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[0] if text else None


def _lock_directory(folder: Path) -> int | None:
    """An open descriptor of ``folder`` holding an exclusive flock; None where directories cannot be
    locked; BlockingIOError when another holds it."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise
    except OSError as error:
        os.close(descriptor)
        logger.debug("cannot lock the folder %s itself (%s); its lock file is locked only", folder, error)
        return None
    return descriptor

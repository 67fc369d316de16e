"""ccc.folder_lock: a lock file planted as a link never makes the lock write into another file."""

import pytest

from ccc.folder_lock import FolderLock
from ccc.safe_files import UnsafePathError


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"lock file .*\.lock is a symbolic link"):
        FolderLock.acquire(folder, ".lock")
    assert victim.read_bytes() == b"precious"


def test_the_lock_file_names_its_holder(tmp_path):
    with FolderLock.acquire(tmp_path, ".lock"):
        assert (tmp_path / ".lock").read_text().startswith("process ")

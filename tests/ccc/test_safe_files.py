"""ccc.safe_files: no writer follows a symbolic link or writes through a hard link."""

import os

import pytest

from ccc.safe_files import (
    UnsafePathError,
    create_temporary,
    open_for_reading,
    open_owned,
    refuse_symlink,
    write_atomically,
)


def test_open_owned_refuses_a_symlink_and_leaves_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="lock file .* symbolic link"):
        open_owned(tmp_path / "lock", "lock file")
    assert victim.read_bytes() == b"precious"


def test_open_owned_refuses_a_hard_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.link(victim, tmp_path / "part")
    with pytest.raises(UnsafePathError, match="hard links"):
        open_owned(tmp_path / "part", "partial download", append=True)
    assert victim.read_bytes() == b"precious"


def test_open_owned_refuses_a_folder(tmp_path):
    (tmp_path / "lock").mkdir()
    with pytest.raises(OSError, match="lock"):
        open_owned(tmp_path / "lock", "lock file")


def test_open_owned_creates_and_continues_a_regular_file(tmp_path):
    with open_owned(tmp_path / "part", "partial download", append=True) as handle:
        handle.write(b"ab")
    with open_owned(tmp_path / "part", "partial download", append=True) as handle:
        handle.write(b"cd")
    assert (tmp_path / "part").read_bytes() == b"abcd"


def test_write_atomically_replaces_a_symlink_instead_of_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "mirror.json").symlink_to(victim)
    write_atomically(tmp_path / "mirror.json", b"{}")
    assert victim.read_bytes() == b"precious"
    assert not (tmp_path / "mirror.json").is_symlink()
    assert (tmp_path / "mirror.json").read_bytes() == b"{}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mirror.json", "victim"]


def test_create_temporary_never_reuses_a_path(tmp_path):
    first = create_temporary(tmp_path, "shard.tar")
    second = create_temporary(tmp_path, "shard.tar")
    for handle, _ in (first, second):
        handle.close()
    assert first[1] != second[1] and first[1].name.startswith(".shard.tar.")


def test_refuse_symlink_names_the_entry(tmp_path):
    (tmp_path / "entry").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="cache entry .*entry is a symbolic link"):
        refuse_symlink(tmp_path / "entry", "cache entry")
    refuse_symlink(tmp_path / "missing", "cache entry")


def test_open_for_reading_refuses_links_and_folders_and_reads_regular_files(tmp_path):
    (tmp_path / "victim").write_bytes(b"precious")
    (tmp_path / "entry").symlink_to(tmp_path / "victim")
    (tmp_path / "folder").mkdir()
    with pytest.raises(UnsafePathError, match="cache entry .*entry is a symbolic link"):
        open_for_reading(tmp_path / "entry", "cache entry")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        open_for_reading(tmp_path / "folder", "cache entry")
    with pytest.raises(FileNotFoundError):
        open_for_reading(tmp_path / "missing", "cache entry")
    with open_for_reading(tmp_path / "victim", "cache entry") as handle:
        assert handle.read() == b"precious"

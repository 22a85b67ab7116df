"""Output files: only regular files are written (issue 30).

A device node, a FIFO, a socket or a directory in an output's place is refused in one line, and a
symlink is written through only to a regular file at or below its own directory; a write keeps an
existing file's mode and leaves no temporary file.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from shardwise.atomic import atomic_path, check_writable
from shardwise.errors import SpecError

PLAN = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "1"]


def _cli(args: list[str], cwd: Path):
    from tests.test_fuzz import cli

    return cli(args, cwd=str(cwd))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_the_way_is_refused_and_kept(tmp_path: Path):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    run = _cli([*PLAN, "--csv", str(fifo)], tmp_path)
    assert run.code == 2 and "FIFO" in run.err and len(run.err.strip().splitlines()) == 1, run.err
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced by a regular file"


def test_a_socket_in_the_way_is_refused(tmp_path: Path):
    path = tmp_path / "s.csv"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(SpecError, match="socket"):
            check_writable(path)
    assert stat.S_ISSOCK(path.lstat().st_mode)


def test_a_device_or_a_link_to_one_is_refused(tmp_path: Path):
    """As root, `--csv link` where link -> /dev/null would replace the system's /dev/null. Only the
    check is called here, never a write: before the fix this test fails without touching the device."""
    with pytest.raises(SpecError, match="character device"):
        check_writable(os.devnull)
    link = tmp_path / "out.csv"
    link.symlink_to(os.devnull)
    with pytest.raises(SpecError, match="symbolic link"):
        check_writable(link)
    assert stat.S_ISCHR(Path(os.devnull).stat().st_mode)


def test_a_link_pointing_outside_its_directory_is_refused(tmp_path: Path):
    outside = tmp_path / "victim.csv"
    outside.write_text("SENTINEL")
    home = tmp_path / "work"
    home.mkdir()
    link = home / "out.csv"
    link.symlink_to(outside)
    run = _cli([*PLAN, "--csv", str(link)], home)
    assert run.code == 2 and "outside" in run.err, run.err
    assert outside.read_text() == "SENTINEL" and link.is_symlink()


def test_a_link_to_a_file_beside_it_is_written_through(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "real.csv"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "out.csv"
    link.symlink_to(Path("sub") / "real.csv")
    run = _cli([*PLAN, "--csv", str(link)], tmp_path)
    assert run.code == 0, run.err
    assert link.is_symlink() and target.read_text().startswith("gpus,tp,pp,")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640, "the existing file's mode was not kept"


def test_a_directory_in_the_way_is_refused_in_one_line(tmp_path: Path):
    (tmp_path / "out.csv").mkdir()
    with pytest.raises(SpecError) as exc:
        check_writable(tmp_path / "out.csv")
    assert "is a directory" in str(exc.value) and "cannot write there" not in str(exc.value)


def test_a_fifo_put_in_place_during_the_write_is_not_replaced(tmp_path: Path):
    """The name is checked again just before the rename."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "late.json"
    with pytest.raises(SpecError, match="FIFO"), atomic_path(path) as tmp:
        Path(tmp).write_text("{}")
        os.mkfifo(path)
    assert stat.S_ISFIFO(path.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["late.json"], "a temporary file was left"


def test_an_existing_files_mode_is_kept(tmp_path: Path):
    path = tmp_path / "keep.json"
    path.write_text("x")
    path.chmod(0o600)
    with atomic_path(path) as tmp:
        Path(tmp).write_text("{}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "{}"

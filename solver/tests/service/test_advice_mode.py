"""The advice file's mode and group (advice.mode, advice.group): a slurmctld that runs as
its SlurmUser reads the advice through its group, and nobody but clavisd may write it."""

from __future__ import annotations

import grp
import json
import os
import stat
from pathlib import Path

import pytest

from clavis.service.config import ConfigError, load_config
from clavis.service.daemon import Clavisd

from .helpers import write_setup


def _other_group() -> grp.struct_group:
    """A group this process may give a file to that is not its own: any group as root,
    else one of its supplementary groups."""
    mine = os.getegid()
    allowed = None if os.geteuid() == 0 else set(os.getgroups())
    for g in grp.getgrall():
        if g.gr_gid != mine and (allowed is None or g.gr_gid in allowed):
            return g
    pytest.skip("no second group to give the advice file to")


def _clavisd(tmp_path: Path, advice_keys: str) -> Clavisd:
    # write_setup ends with the [advice] table, so these keys land in it
    d = Clavisd(load_config(write_setup(tmp_path, extra=advice_keys)))
    d.ingestor.start()
    return d


def test_the_advice_is_written_with_the_configured_mode_and_group(tmp_path: Path) -> None:
    group = _other_group()
    d = _clavisd(tmp_path, f'mode = "0640"\ngroup = "{group.gr_name}"\n')
    try:
        d.publish_advice()
        path = d.config.advice.path
        st = path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == group.gr_gid
        assert json.loads(path.read_text())["kind"] == "clavis.advice"
        # re-issued by a rename: the new file has them too, from its first byte on
        inode = st.st_ino
        d.publish_advice()
        st = path.stat()
        assert st.st_ino != inode
        assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == group.gr_gid
    finally:
        d.stop()


def test_by_default_only_the_writer_reads_it(tmp_path: Path) -> None:
    d = _clavisd(tmp_path, "")
    try:
        d.publish_advice()
        st = d.config.advice.path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_gid == os.getegid()
    finally:
        d.stop()


def test_a_group_given_by_number_is_used(tmp_path: Path) -> None:
    group = _other_group()
    d = _clavisd(tmp_path, f'mode = "644"\ngroup = "{group.gr_gid}"\n')
    try:
        d.publish_advice()
        st = d.config.advice.path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_gid == group.gr_gid
    finally:
        d.stop()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('mode = "0660"', "gives more than 0644"),
        ('mode = "0646"', "gives more than 0644"),
        ('mode = "0750"', "gives more than 0644"),
        ('mode = "rw-r-----"', "is not an octal mode"),
        ('mode = "06400"', "is not an octal mode"),
        ("mode = 416", "advice.mode"),
        ('group = "no-such-group-clavis"', "no group 'no-such-group-clavis'"),
        ('group = "4294967"', "no group '4294967'"),
    ],
)
def test_a_bad_mode_or_group_is_refused_by_name(tmp_path: Path, keys: str, message: str) -> None:
    cfg = write_setup(tmp_path, extra=keys + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "advice." in str(err.value) and message in str(err.value), str(err.value)

"""The rules of shmwheel/segment/trust.py, one test each, on real files whose owner and mode
are forged with chown and chmod (so the tests run as root: other users' files are made by
chown to uid 4242, which has no user name, and to nobody, which has one)."""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from shmwheel import ShmwheelError, UntrustedPath
from shmwheel.segment import trust

OTHER = 4242  # a uid with no user name
NOBODY = 65534

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or pwd.getpwuid(NOBODY).pw_name != "nobody",
    reason="needs root (to chown what it forges) and a user nobody with uid 65534",
)


def _file(path, mode: int = 0o600, uid: int | None = None):  # type: ignore[no-untyped-def]
    path.write_bytes(b"x")
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


@contextmanager
def _as_user(uid: int) -> Iterator[None]:
    """This process's effective user is `uid` inside (the real one stays root)."""
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)


def test_owner_rule_another_users_file_is_refused_naming_owner_and_mode(tmp_path):
    p = _file(tmp_path / "f", 0o600, OTHER)
    why = trust.judge(p, os.lstat(p), trust.REGULAR_FILE)
    assert why is not None and f"belongs to uid {OTHER}" in why, why
    with pytest.raises(UntrustedPath) as e:
        trust.check(p, trust.REGULAR_FILE, "the thing")
    assert isinstance(e.value, ShmwheelError)
    assert (e.value.path, e.value.uid, e.value.mode) == (str(p), OTHER, 0o600)
    assert f"(owner uid {OTHER}, mode 0600)" in str(e.value) and str(p) in str(e.value)
    n = _file(tmp_path / "n", 0o600, NOBODY)
    with pytest.raises(UntrustedPath, match=r"owner user nobody \(uid 65534\), mode 0600"):
        trust.check(n, trust.REGULAR_FILE, "the thing")
    assert trust.judge(p, os.lstat(_file(tmp_path / "mine")), trust.REGULAR_FILE) is None


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666, 0o777])
def test_mode_rule_group_or_others_write_is_refused(tmp_path, mode):
    p = _file(tmp_path / "f", mode)
    with pytest.raises(UntrustedPath, match=rf"mode {mode:04o}: group or others can write"):
        trust.check(p, trust.REGULAR_FILE, "the thing")


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o400, 0o700])
def test_mode_rule_owner_bits_and_reading_are_fine(tmp_path, mode):
    p = _file(tmp_path / "f", mode)
    assert trust.check(p, trust.REGULAR_FILE, "the thing").st_ino == os.lstat(p).st_ino


def test_mode_rule_a_private_path_allows_group_and_others_nothing(tmp_path):
    p = _file(tmp_path / "f", 0o640)
    assert trust.judge(p, os.lstat(p), trust.REGULAR_FILE) is None
    why = trust.judge(p, os.lstat(p), trust.REGULAR_FILE, private=True)
    assert why is not None and "mode 0640, not 0600" in why, why
    os.chmod(p, 0o600)
    assert trust.judge(p, os.lstat(p), trust.REGULAR_FILE, private=True) is None


def test_kind_rule_a_link_is_never_followed_to_a_file(tmp_path):
    target = _file(tmp_path / "target")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UntrustedPath, match="is not a regular file"):
        trust.check(link, trust.REGULAR_FILE, "the thing")
    with pytest.raises(UntrustedPath, match="is not a directory"):
        trust.check(target, trust.DIRECTORY, "the thing")


def test_kind_rule_a_directory_is_judged_where_its_path_leads(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir(mode=0o700)
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER, OTHER)
    (tmp_path / "to-mine").symlink_to(mine)
    (tmp_path / "to-theirs").symlink_to(theirs)
    trust.check(tmp_path / "to-mine", trust.DIRECTORY, "the directory")
    with pytest.raises(UntrustedPath, match=f"belongs to uid {OTHER}"):
        trust.check(tmp_path / "to-theirs", trust.DIRECTORY, "the directory")


def test_parent_rule_a_sticky_shared_parent_is_not_judged_the_directory_is(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.chown(shared, OTHER, OTHER)
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    trust.check(mine, trust.DIRECTORY, "the directory")
    os.chown(shared, 0, 0)  # ours now, but open to all: as the directory used, refused
    with pytest.raises(UntrustedPath, match="mode 1777: group or others can write"):
        trust.check(shared, trust.DIRECTORY, "the directory")


def test_owner_rule_roots_directory_is_trusted_only_where_root_ok(tmp_path):
    """Another (non-root) user trusts root's directory only with root_ok (the working
    directory `shmwheel run` imports tasks from), never a third user's."""
    rooted, theirs = tmp_path / "rooted", tmp_path / "theirs"
    rooted.mkdir(mode=0o755)
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    st_root, st_theirs = os.stat(rooted), os.stat(theirs)
    with _as_user(OTHER):
        assert trust.judge(rooted, st_root, trust.DIRECTORY, root_ok=True) is None
        why = trust.judge(rooted, st_root, trust.DIRECTORY)
        assert why is not None and re.search(r"belongs to user root \(uid 0\)", why), why
        assert trust.judge(theirs, st_theirs, trust.DIRECTORY, root_ok=True) is not None
        assert trust.foreign_holder(os.devnull) == 0 and not trust.ours(os.devnull)
    assert trust.foreign_holder(os.devnull) is None and trust.ours(os.devnull)


def test_a_refusal_pickles_with_its_fields(tmp_path):
    import pickle

    p = _file(tmp_path / "f", 0o666)
    with pytest.raises(UntrustedPath) as e:
        trust.check(p, trust.REGULAR_FILE, "the thing")
    back = pickle.loads(pickle.dumps(e.value))
    assert (str(back), back.path, back.uid, back.mode) == (str(e.value), str(p), 0, 0o666)

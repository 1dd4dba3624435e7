"""The embedded driver's class archive: Java's class data sharing for Spark's classes.

Theory of operation. An embedded session's JVM spends most of its start loading and
verifying Spark's classes from some 280 jars, and Spark's first job more of the same: on
this machine a session with one tiny job took 10-13 s. Java 17 can write the classes a run
loaded to an archive when the JVM exits (``-XX:ArchiveClassesAtExit``) and map them at a
later start (``-XX:SharedArchiveFile``): then 5-7 s, and an audit's session starts in
3.7-7.0 s instead of 6.6-11.2 s (docs/performance.md).

The archive is a cache the ``audit`` command keeps, one file per JVM and Spark:

- **Where.** ``$SHMWHEEL_JVM_ARCHIVE`` names the directory (``off`` turns the archive
  off); else ``$XDG_CACHE_HOME/shmwheel/jvm``, else ``~/.cache/shmwheel/jvm``. Created
  0700.
- **Which.** ``spark-<key>.jsa``: the key hashes the java binary and its version, Spark's
  jars (name, size, modification time) and the JVM's options. A new JDK or Spark gets a
  new file (the JVM itself refuses an archive whose class path differs: it then starts
  without one).
- **Trust.** An archive is code the JVM maps. It is used only when the directory and the
  file are this user's, writable by no one else (``segment/trust.py``'s rules), and the
  file is a regular file whose SHA-256 equals its digest file (``.sha256``) written beside
  it. A JVM given a damaged archive crashes (SIGSEGV, measured); a damaged one is never
  given to it: it is rewritten at this run's exit. Anything not this user's is left alone
  (never deleted) and the archive is off for the run, with a warning.
- **Written.** Only by the ``audit`` command (``write=True``), which owns its JVM from
  start to exit: its JVM dumps to a temporary file when it exits, the command waits for
  that (``finish``; 15-20 s once), and moves the file and its digest into place (a
  concurrent run's pair is replaced whole; a reader between the two moves sees a digest
  mismatch and rewrites). A failed dump (a full or read-only disk, a class path Java
  cannot archive) leaves nothing but a ``.failed`` note, which stops later runs from
  trying again for a day (or until it is removed, or the key changes). A session
  embedded in a notebook or a test only reads the archive: its JVM exits with the
  Python process, after which nothing could move the file into place.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...segment import trust

log = logging.getLogger("shmwheel.pipeline")

ENV = "SHMWHEEL_JVM_ARCHIVE"
#: bumped when the key's inputs or the file layout change
KEY_VERSION = "1"
#: the JVM's own class-sharing messages (thousands at a dump) go nowhere: its log's
#: default output is stdout, which carries the command's --json
QUIET = "-Xlog:cds*=off"
#: how long ``finish`` waits for the JVM to write the archive and exit (15-20 s measured)
DUMP_TIMEOUT_S = 300.0
#: a failed attempt to write the archive is not repeated for a day (each costs the dump)
RETRY_AFTER_S = 86400.0


@dataclass(frozen=True)
class Plan:
    """What one embedded session's JVM does with the archive.

    ``options`` are the JVM options to add (empty when the archive is off); ``path`` is the
    archive used or to be written; ``tmp`` is where the JVM dumps at exit, set only when
    this run writes; ``note`` says why, for the command's progress line."""

    options: str
    path: str | None
    tmp: str | None
    note: str

    @property
    def writes(self) -> bool:
        return self.tmp is not None


OFF = Plan("", None, None, "off")


def directory() -> str | None:
    """The archive's directory (None: turned off by ``$SHMWHEEL_JVM_ARCHIVE=off``)."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in ("off", "0", "none", "false"):
        return None
    if env:
        return os.path.abspath(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "shmwheel", "jvm")


def key(java: str, version_text: str, spark_home: str, jvm_options: str) -> str:
    """The archive's key: 16 hex digits of a hash of everything the archive depends on."""
    h = hashlib.sha256(f"{KEY_VERSION}\0{os.path.realpath(java)}\0{version_text}\0".encode())
    # the JVM checks the class path's entries by path too: a moved Spark is a new key
    h.update(f"{jvm_options}\0{os.path.realpath(spark_home)}\0".encode())
    jars = os.path.join(spark_home, "jars")
    for name in sorted(os.listdir(jars)) if os.path.isdir(jars) else []:
        st = os.stat(os.path.join(jars, name))
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def plan(java: str, version_text: str, spark_home: str, jvm_options: str, write: bool) -> Plan:
    """The archive this session's JVM maps, or writes at exit (`write`), or neither: see the
    module docstring. Never raises for the archive's sake: a problem turns it off."""
    where = directory()
    if where is None:
        return OFF
    try:
        problem = _private_dir(where, create=write)
        if problem:
            log.warning("the JVM class archive is off for this run: %s", problem)
            return OFF
        name = f"spark-{key(java, version_text, spark_home, jvm_options)}.jsa"
        path = os.path.join(where, name)
        _remove_stale(where)
        state = check(path)
        if state == "ok":
            return Plan(f"-XX:SharedArchiveFile={path} {QUIET}", path, None, f"used {path}")
        if state not in ("missing", "damaged"):
            log.warning("the JVM class archive is off for this run: %s", state)
            return OFF
        if state == "damaged":
            log.warning("the JVM class archive %s is damaged (its SHA-256 differs from its "
                        "digest): not used; %s", path,
                        "rewritten at this run's exit" if write else "the audit command "
                        "rewrites it")  # fmt: skip
        if not write:
            return Plan("", path, None, f"{state}: {path}")
        if _recent_failure(path):
            return Plan("", path, None, f"not written: an attempt failed in the last day "
                        f"({path}.failed says why; remove it to try again)")  # fmt: skip
        tmp = os.path.join(where, f".{name}.{os.getpid()}.tmp")
        return Plan(f"-XX:ArchiveClassesAtExit={tmp} {QUIET}", path, tmp,
                    f"written to {path} at exit (once)")  # fmt: skip
    except OSError as e:
        log.warning("the JVM class archive is off for this run: %s", e)
        return OFF


def check(path: str) -> str:
    """ "ok" (this user's, a regular file, its digest matches), "missing", "damaged", or why
    it cannot be trusted."""
    digest_path = path + ".sha256"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    for p, s in ((path, st), (digest_path, _lstat(digest_path))):
        if s is None:
            return "damaged"
        problem = trust.judge(p, s, trust.REGULAR_FILE)
        if problem:
            return problem
    with open(digest_path, encoding="ascii", errors="replace") as f:
        want = f.read(200).strip()
    return "ok" if want == sha256_of(path) else "damaged"


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def finish(
    plan: Plan, proc: subprocess.Popen[bytes] | None, progress: Callable[[str], None] = log.info
) -> bool:
    """Once the session has stopped: end its JVM (`proc`, the gateway's process: closing
    its stdin ends it) and wait while it writes the archive, then move the archive and its
    digest into place. Whether an archive was written; a failure is reported, never
    raised, and leaves no temporary file."""
    if not plan.writes:
        return False
    assert plan.tmp is not None and plan.path is not None
    t = time.perf_counter()
    try:
        rc = _end(proc) if proc is not None else None
        if rc != 0 or not os.path.isfile(plan.tmp) or os.path.getsize(plan.tmp) == 0:
            why = (
                "no JVM to write it" if proc is None
                else f"the JVM did not exit within {DUMP_TIMEOUT_S:.0f} s" if rc is None
                else f"the JVM exited {rc} without writing it"
            )  # fmt: skip
            _note_failure(plan.path, why)
            progress(f"[archive] not written: {why} ({plan.path}.failed)")
            return False
        digest = sha256_of(plan.tmp)
        tmp_digest = plan.tmp + ".sha256"
        with open(tmp_digest, "w", encoding="ascii") as f:
            f.write(digest + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(plan.tmp, plan.path)
        os.replace(tmp_digest, plan.path + ".sha256")
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT):
            _note_failure(plan.path, str(e))
        progress(f"[archive] not written: {e}")
        return False
    finally:
        for p in (plan.tmp, plan.tmp + ".sha256"):
            _unlink(p)
    size = os.path.getsize(plan.path) / (1 << 20)
    progress(f"[archive] the JVM's class archive written: {plan.path} ({size:.0f} MiB, "
             f"{time.perf_counter() - t:.1f} s); later audits start sooner")  # fmt: skip
    return True


def _end(proc: subprocess.Popen[bytes]) -> int | None:
    """Close the gateway JVM's stdin (it exits on EOF, writing the archive first) and wait
    for it; killed if it takes longer than ``DUMP_TIMEOUT_S``."""
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    try:
        return proc.wait(DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    except BaseException:  # an interrupt while waiting: no JVM outlives the command
        proc.kill()
        proc.wait()
        raise


def _recent_failure(path: str) -> bool:
    """Whether an attempt to write `path` failed less than ``RETRY_AFTER_S`` ago."""
    st = _lstat(path + ".failed")
    return st is not None and time.time() - st.st_mtime < RETRY_AFTER_S


def _note_failure(path: str, why: str) -> None:
    try:
        with open(path + ".failed", "w", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {why}\n")
    except OSError:
        pass  # a full or read-only disk: the next run tries again


def _private_dir(path: str, create: bool) -> str | None:
    """Why `path` cannot hold the archive (None: it can). Created 0700 when `create`."""
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    st = _lstat(path)
    if st is None:
        return f"{path} does not exist"
    return trust.judge(path, st, trust.DIRECTORY)


def _remove_stale(where: str) -> None:
    """Remove temporary archives whose writer is gone (a command killed while its JVM
    wrote): 150 MiB each."""
    for name in os.listdir(where):
        if not (name.startswith(".spark-") and ".tmp" in name):
            continue
        try:
            pid = int(name.split(".jsa.", 1)[1].split(".", 1)[0])
            os.kill(pid, 0)
        except (IndexError, ValueError):
            continue  # not one of ours
        except ProcessLookupError:
            _unlink(os.path.join(where, name))
        except PermissionError:
            pass  # alive, another user's pid


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

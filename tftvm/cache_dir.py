"""Where tftvm keeps what it builds, and how it writes there safely."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """The user cache dir: $TFTVM_CACHE_DIR, else $XDG_CACHE_HOME/tftvm, else ~/.cache/tftvm."""
    env = os.environ.get("TFTVM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "tftvm" if xdg else Path.home() / ".cache" / "tftvm"


def subdir(name: str) -> Path:
    """A private (0700) directory under the cache root; modules there are native code.

    A cache root that cannot be created or written (read-only, a file in the way)
    gives way to a private temporary directory, with a warning.
    """
    path = usable_root(str(cache_root())) / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def module_dir() -> Path:
    """The compiled TVM modules, one `<sha256>.so` per kernel: the bridge kernel loads a
    TvmCall node's module from here by its key."""
    return subdir("modules")


def usable_root(root: str) -> Path:
    path = Path(root)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):  # can we write here?
            pass
        return path
    except OSError as err:
        fallback = private_temp_dir()
        log.warning("tftvm cache directory %s is not usable (%s); using %s", path, err, fallback)
        return fallback


@functools.lru_cache(maxsize=None)
def private_temp_dir() -> Path:
    """A fresh 0700 directory in the system temp dir, for this process."""
    return Path(tempfile.mkdtemp(prefix="tftvm-"))  # mkdtemp makes it 0700 and unguessable


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock between processes (flock on `path`)."""
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)

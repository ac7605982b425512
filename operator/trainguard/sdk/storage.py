"""What the trainer measures of its checkpoint storage: it mounts the checkpoint volume, the sidecar may
not. Standard library only; every function answers None rather than raise."""

from __future__ import annotations

import os

WALK_MAX_FILES = 100_000
"""A checkpoint with more files than this is not sized (walking it would cost more than it tells)."""


def checkpoint_size(path: str) -> int | None:
    """Bytes of a checkpoint: the file's size, or the sum of the files under a directory (symlinks not
    followed). None when the path is not on this machine (a URL, gone) or too large to walk."""
    try:
        if os.path.isfile(path):
            return os.path.getsize(path)
        if not os.path.isdir(path):
            return None
        total, files = 0, 0
        for root, _dirs, names in os.walk(path):
            for name in names:
                files += 1
                if files > WALK_MAX_FILES:
                    return None
                st = os.lstat(os.path.join(root, name))
                total += st.st_size
        return total
    except OSError:
        return None


def filesystem(path: str) -> tuple[int, int] | None:
    """(bytes available to an unprivileged writer, filesystem size) of the filesystem holding `path`
    (a file's directory), from statvfs; None where it cannot be read."""
    try:
        directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        st = os.statvfs(directory)
    except (OSError, AttributeError):  # AttributeError: no statvfs on this platform
        return None
    if st.f_blocks <= 0:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def checkpoint_measures(path: str) -> dict[str, int]:
    """The fields a checkpoint report carries about its storage: size_bytes, fs_avail_bytes and
    fs_size_bytes, each only where it could be measured."""
    out: dict[str, int] = {}
    size = checkpoint_size(path)
    if size is not None:
        out["size_bytes"] = size
    fs = filesystem(path)
    if fs is not None:
        out["fs_avail_bytes"], out["fs_size_bytes"] = fs
    return out


def process_io() -> tuple[int, int] | None:
    """(rchar, read_bytes) of this process from Linux /proc/self/io; None elsewhere."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["rchar"]), int(fields["read_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def bytes_read_since(start: tuple[int, int] | None) -> int | None:
    """Bytes this process read since `start` (a process_io() answer): the larger of what went through
    read calls (rchar, the page cache included) and what was fetched from storage (read_bytes, mmap
    page faults included, as safetensors loads). None without /proc/self/io."""
    now = process_io()
    if start is None or now is None:
        return None
    return max(now[0] - start[0], now[1] - start[1], 0)

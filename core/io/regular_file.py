"""Opening only regular files, and writing them atomically: the one place Fieldscope refuses
FIFOs, devices and planted symlinks.

A FIFO blocks a reader for ever, a device (``/dev/zero``) never ends, and a symlink inside a
store can point anywhere. Every reader of a user's file (``core.io``'s loaders) and of a
store (the run store, the calibration store, checkpoints, ``writer.lock``) opens through
here::

    fd = open_regular(path)                      # follows a symlink (a data file may be one)
    data = read_regular(path, max_bytes=1 << 20) # the whole file, refused when larger
    data = read_inside(store_root, "posterior/index/0.0", max_bytes=n)

``open_regular`` opens with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a
writer) and checks ``fstat`` of what it opened: the check and the read are of the same file,
whatever is renamed in between. ``read_inside`` walks ``rel`` one component at a time from
``root`` with ``O_NOFOLLOW``, so no component (directory or file) may be a symlink: what it
reads lies inside ``root``. ``NotRegularFile`` (an ``OSError``) names the path and what it
is; a missing file raises ``FileNotFoundError`` as ``open`` does.

Writing (configs, the desktop launcher and icons, the demo's files)::

    write_atomic(path, data)                     # whole or not at all, never through a link

writes a temporary file beside ``path`` (a random name, created with ``O_EXCL | O_NOFOLLOW``:
never a file or link someone planted), syncs it and renames it over ``path``: a symlink at
``path`` is replaced, never followed, and a failed write leaves neither a half file nor the
temporary one.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat

__all__ = ["NotRegularFile", "describe_mode", "regular_file_size", "open_regular", "read_regular", "open_inside",
           "read_inside", "read_fd", "write_atomic"]


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device, a directory, a symlink where
    none may be, or a file larger than its bound); the message names it. ``mode``: the
    ``st_mode`` of what was found (0 when unknown or when it was too large)."""

    mode = 0


def describe_mode(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for messages)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def _check_fd(fd: int, where: str, max_bytes: int | None) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        err = NotRegularFile(errno.EINVAL, f"{where}: {describe_mode(info.st_mode)}, not a regular file")
        err.mode = info.st_mode
        raise err
    if max_bytes is not None and info.st_size > max_bytes:
        raise NotRegularFile(errno.EFBIG, f"{where}: {info.st_size} bytes, more than the {max_bytes} "
                                          "it can hold")
    return info


def open_regular(path, *, follow_symlinks: bool = True, max_bytes: int | None = None, dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file ``path`` (the caller closes it).

    NotRegularFile when it is anything else, or (``follow_symlinks=False``) a symlink, or
    larger than ``max_bytes``; FileNotFoundError when there is none."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    where = os.fspath(path)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_symlinks:
            raise NotRegularFile(errno.ELOOP, f"{where}: a symlink, not a regular file") from None
        raise
    try:
        _check_fd(fd, where, max_bytes)
        # the descriptor stays non-blocking; for a regular file that changes nothing
    except BaseException:
        os.close(fd)
        raise
    return fd


def regular_file_size(path) -> int:
    """The size of the regular file ``path`` (following a symlink), checked on an open
    descriptor as ``open_regular`` does: NotRegularFile (``mode`` says what it is) otherwise."""
    fd = open_regular(path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_fd(fd: int, where: str, max_bytes: int | None = None) -> bytes:
    """Every byte of the open regular file ``fd`` (at most ``max_bytes``: a file that grew
    past it while read is refused)."""
    info = _check_fd(fd, where, max_bytes)
    chunks, total = [], 0
    while True:
        # os.read allocates the size it asks for: ask for what the file holds (and one byte
        # to see its end), not for the bound, which may be far larger than a compressed chunk
        block = os.read(fd, max(1 << 16, min(info.st_size + 1 - total, 1 << 24)))
        if not block:
            break
        chunks.append(block)
        total += len(block)
        if max_bytes is not None and total > max_bytes:
            raise NotRegularFile(errno.EFBIG, f"{where}: more than the {max_bytes} bytes it can hold")
    return b"".join(chunks)


def read_regular(path, *, follow_symlinks: bool = True, max_bytes: int | None = None) -> bytes:
    """The whole regular file ``path`` (``open_regular``'s rules)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks, max_bytes=max_bytes)
    try:
        return read_fd(fd, os.fspath(path), max_bytes)
    finally:
        os.close(fd)


def open_inside(root, rel: str, *, max_bytes: int | None = None) -> int:
    """A descriptor of the regular file ``root/rel``, reached without following any symlink
    below ``root`` (``rel``: '/'-separated, no '..'). NotRegularFile names the component
    that is not a directory or not a regular file; FileNotFoundError when one is missing."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    root = os.fspath(root)
    if not parts or ".." in parts:
        raise NotRegularFile(errno.EINVAL, f"{os.path.join(root, rel)}: not a file inside {root}")
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                sub = os.open(part, dir_flags, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = os.path.join(root, *parts[:i + 1])
                    what = _lstat_words(part, fd)
                    raise NotRegularFile(err.errno, f"{where}: {what}, not a directory of the store") from None
                raise
            os.close(fd)
            fd = sub
        return open_regular(parts[-1], follow_symlinks=False, max_bytes=max_bytes, dir_fd=fd)
    except NotRegularFile as err:
        # name the whole path, not the last component alone
        message = str(err.strerror or err)
        if message.startswith(parts[-1] + ":"):
            message = os.path.join(root, *parts) + message[len(parts[-1]):]
        raise NotRegularFile(err.errno, message) from None
    finally:
        os.close(fd)


def _lstat_words(name: str, dir_fd: int) -> str:
    try:
        return describe_mode(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return "unreadable"


def read_inside(root, rel: str, *, max_bytes: int | None = None) -> bytes:
    """The whole regular file ``root/rel`` (``open_inside``'s rules)."""
    fd = open_inside(root, rel, max_bytes=max_bytes)
    try:
        return read_fd(fd, os.path.join(os.fspath(root), rel), max_bytes)
    finally:
        os.close(fd)


def write_atomic(path, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all (module docstring), mode 0666 less the
    umask. ``overwrite=False``: FileExistsError when ``path`` exists (a link too), checked by
    the kernel when the file is put in place (``link``), not before."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path, follow_symlinks=False)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

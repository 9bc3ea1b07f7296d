"""An .npz archive written in one pass, its members compressed side by side on threads.

A leaf of refseg (NumPy and the standard library, nothing of refseg's but its citations and the
number of cores): :func:`refseg.publish.write_npz` writes its compressed archives with it.
Python's ``zipfile`` deflates one member after another on the calling thread; zlib releases
the GIL while it compresses and checksums, so the members of a checkpoint (hundreds of trained
arrays) compress on every core at once. The archive holds the bytes ``zipfile`` writes for the
same members (``ZipFile.open(info, "w", force_zip64=True)``, numpy's ``.npy`` format, the
date 1980-01-01): local headers with a Zip64 extra field, the central directory, Zip64 end
records only when the archive needs them (PKWARE APPNOTE 6.3, sections 4.3 and 4.5).
"""
from __future__ import annotations

import io
import struct
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from refseg.cite import infrastructure
from refseg.workers import default_jobs

#: Zip's method numbers: stored as is, and deflated.
STORED, DEFLATED = 0, 8
#: Sizes and offsets above this take a Zip64 field (zipfile's bound, 2 GiB - 1).
ZIP64_LIMIT = (1 << 31) - 1
#: Members above this count take the Zip64 end records.
FILECOUNT_LIMIT = (1 << 16) - 1
#: The version that extracts Zip64 members (4.5), the system that made them (3: Unix).
ZIP64_VERSION, UNIX = 45, 3
#: Permissions of every member (rw-------), as zipfile gives a member without its own.
MEMBER_ATTRIBUTES = 0o600 << 16
#: 1980-01-01 00:00:00 in MS-DOS form: the fixed date of every member.
DOS_DATE, DOS_TIME = (1 << 5) | 1, 0
#: Flag bit 11: the member's name is UTF-8.
UTF8_NAME = 0x800
#: Bytes of members that may compress ahead of the one being written: what bounds the
#: deflated streams held in memory (a trained fusion checkpoint holds 92 MB in 39 members, the
#: largest 53 MB).
AHEAD_BYTES = 128 << 20

_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR64 = struct.Struct("<4sLQL")


def _npy_parts(value) -> tuple[bytes, np.ndarray]:
    """The ``.npy`` header of ``value`` (format 1.0, else 2.0 for a long header) and its data
    as C-ordered bytes (a view when it already is C-contiguous); no pickled objects."""
    value = np.asanyarray(value)
    if value.dtype.hasobject:
        raise ValueError("Object arrays cannot be saved when allow_pickle=False")
    if not value.flags.c_contiguous:
        value = value.copy(order="C")
    header = io.BytesIO()
    data = np.lib.format.header_data_from_array_1_0(value)
    try:
        np.lib.format.write_array_header_1_0(header, data)
    except ValueError:
        header = io.BytesIO()
        np.lib.format.write_array_header_2_0(header, data)
    return header.getvalue(), value.reshape(-1).view(np.uint8)


def _packed(header: bytes, data: np.ndarray, deflate: bool) -> tuple[int, int, bytes | None]:
    """(CRC-32, size, the deflated stream or None) of a member's bytes, header then data."""
    crc = zlib.crc32(data, zlib.crc32(header))
    if not deflate:
        return crc, len(header) + data.size, None
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    stream = compressor.compress(header) + compressor.compress(data) + compressor.flush()
    return crc, len(header) + data.size, stream


@infrastructure("atomic output files: the container of compressed .npz files")
def write_npz_members(f, arrays: dict, deflate, threads: int | None = None) -> None:
    """Write ``arrays`` as an .npz archive (member ``<name>.npy`` per array, in order) to the
    binary file ``f``, positioned at its start; the arrays for which ``deflate(array)`` is
    true are deflated at zlib's default level, the others stored. The members compress on
    ``threads`` threads (default: one per core); the bytes do not depend on their number."""
    members = []
    for name, value in arrays.items():
        value = np.asanyarray(value)
        members.append((name, *_npy_parts(value), bool(deflate(value))))
    threads = default_jobs() if threads is None else threads
    central, offset = [], 0
    with ThreadPoolExecutor(max(1, min(threads, len(members)))) as pool:
        for (name, header, data, _), (crc, size, stream) in zip(
                members, _in_order(pool, members, AHEAD_BYTES)):
            encoded, flag_bits = _encoded_name(name + ".npy")
            stored = size if stream is None else len(stream)
            method = STORED if stream is None else DEFLATED
            f.write(_LOCAL.pack(b"PK\x03\x04", ZIP64_VERSION, 0, flag_bits, method, DOS_TIME,
                                DOS_DATE, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(encoded), 20))
            f.write(encoded + struct.pack("<HHQQ", 1, 16, size, stored))
            if stream is None:
                f.write(header)
                f.write(data)
            else:
                f.write(stream)
            central.append((encoded, flag_bits, method, crc, size, stored, offset))
            offset += _LOCAL.size + len(encoded) + 20 + stored
    _write_central_directory(f, central, offset)


def _in_order(pool, members, ahead: int):
    """:func:`_packed` of each member, in order, computed on ``pool`` while the members
    submitted and not yet written hold at most ``ahead`` bytes (always at least one member):
    the streams waiting to be written stay within that."""
    pending, held = deque(), 0
    for member in members:
        size = len(member[1]) + member[2].size
        while pending and held + size > ahead:
            done_size, future = pending.popleft()
            held -= done_size
            yield future.result()
        pending.append((size, pool.submit(_packed, *member[1:])))
        held += size
    while pending:
        yield pending.popleft()[1].result()


def _encoded_name(name: str) -> tuple[bytes, int]:
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), UTF8_NAME


def _write_central_directory(f, central: list, start: int) -> None:
    """The central directory of the members ``central`` (in order) and the end records."""
    size = 0
    for encoded, flag_bits, method, crc, file_size, stored, offset in central:
        wide = []
        if file_size > ZIP64_LIMIT or stored > ZIP64_LIMIT:
            wide += [file_size, stored]
            file_size = stored = 0xFFFFFFFF
        if offset > ZIP64_LIMIT:
            wide.append(offset)
            offset = 0xFFFFFFFF
        extra = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide) if wide else b""
        record = _CENTRAL.pack(
            b"PK\x01\x02", ZIP64_VERSION, UNIX, ZIP64_VERSION, 0, flag_bits, method, DOS_TIME,
            DOS_DATE, crc, stored, file_size, len(encoded), len(extra), 0, 0, 0,
            MEMBER_ATTRIBUTES, offset)
        f.write(record + encoded + extra)
        size += len(record) + len(encoded) + len(extra)
    count = len(central)
    if count > FILECOUNT_LIMIT or start > ZIP64_LIMIT or size > ZIP64_LIMIT:
        f.write(_END64.pack(b"PK\x06\x06", 44, ZIP64_VERSION, ZIP64_VERSION, 0, 0, count,
                            count, size, start))
        f.write(_LOCATOR64.pack(b"PK\x06\x07", 0, start + size, 1))
        count, size, start = min(count, 0xFFFF), min(size, 0xFFFFFFFF), min(start, 0xFFFFFFFF)
    f.write(_END.pack(b"PK\x05\x06", 0, 0, count, count, size, start, 0))

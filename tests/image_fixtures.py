"""Damaged image files for the tests of unreadable inputs (shared by the ccc and tta_eval tests)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def bomb_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A PNG header declaring width × height pixels, without the pixels (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


def truncated_jpeg() -> bytes:
    """The first 200 bytes of a 64×64 JPEG."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), color=(10, 200, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()[:200]

"""Small CIFAR files in torchvision's on-disk format, written two ways.

:func:`python2_pickle` writes the opcodes Python 2's cPickle wrote into the published files (protocol 2:
``str`` as ``SHORT_BINSTRING``/``BINSTRING``, every string and call result memoised with ``BINPUT`` /
``LONG_BINPUT``, lists filled by ``APPENDS`` in groups of 1,000, numpy 1.x's ``numpy.core.multiarray``
names and the dtype's arguments as the ints ``0, 1``). :func:`write_cifar_folder` writes a folder with
either that or Python 3's ``pickle.dumps(protocol=2)`` (bytes as ``_codecs.encode`` calls, numpy 2's names).
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np

from ccc.datasets.cifar import CIFAR_FORMATS


class _Python2Pickler:
    """Opcodes of a protocol-2 pickle as Python 2's cPickle emitted them, for the values CIFAR files hold."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self.out = bytearray(b"\x80\x02" if protocol == 2 else b"")
        self.memo_size = 0

    def memoise(self) -> None:
        if self.memo_size < 256:
            self.out += b"q" + bytes([self.memo_size])
        else:
            self.out += b"r" + struct.pack("<I", self.memo_size)
        self.memo_size += 1

    def string(self, value: bytes) -> None:
        if len(value) < 256:
            self.out += b"U" + bytes([len(value)]) + value
        else:
            self.out += b"T" + struct.pack("<I", len(value)) + value
        self.memoise()

    def boolean(self, value: bool) -> None:
        if self.protocol == 2:
            self.out += b"\x88" if value else b"\x89"
        else:
            self.out += b"I01\n" if value else b"I00\n"

    def integer(self, value: int) -> None:
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self.out += b"M" + struct.pack("<H", value)
        elif -(2**31) <= value < 2**31:
            self.out += b"J" + struct.pack("<i", value)
        else:
            encoded = value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True)
            size = bytes([len(encoded)]) if len(encoded) < 256 else struct.pack("<I", len(encoded))
            self.out += (b"\x8a" if len(encoded) < 256 else b"\x8b") + size + encoded

    def value(self, value: object) -> None:
        if isinstance(value, bytes):
            self.string(value)
        elif isinstance(value, bool):
            self.boolean(value)
        elif isinstance(value, int):
            self.integer(value)
        elif value is None:
            self.out += b"N"
        elif isinstance(value, list):
            self.out += b"]"
            self.memoise()
            for start in range(0, len(value), 1000):
                self.out += b"("
                for item in value[start : start + 1000]:
                    self.value(item)
                self.out += b"e"
        elif isinstance(value, dict):
            self.out += b"}"
            self.memoise()
            self.out += b"("
            for key, item in value.items():
                self.value(key)
                self.value(item)
            self.out += b"u"
        elif isinstance(value, np.ndarray):
            self.array(value)
        else:
            raise TypeError(type(value))

    def array(self, array: np.ndarray) -> None:
        self.out += b"cnumpy.core.multiarray\n_reconstruct\n"
        self.memoise()
        self.out += b"cnumpy\nndarray\n"
        self.memoise()
        self.out += b"K\x00\x85"
        self.memoise()
        self.string(b"b")
        self.out += b"\x87R"
        self.memoise()
        self.out += b"(K\x01"
        if array.ndim > 3:
            self.out += b"("
        for size in array.shape:
            self.integer(size)
        self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(array.ndim, b"t")
        self.memoise()
        self.out += b"cnumpy\ndtype\n"
        self.memoise()
        self.string(array.dtype.str[1:].encode())
        self.out += b"K\x00K\x01\x87R"
        self.memoise()
        self.out += b"(K\x03"
        self.string(array.dtype.str[0].encode())
        self.out += b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
        self.boolean(False)
        self.string(array.tobytes())
        self.out += b"tb"


def python2_pickle(value: dict[bytes, object], protocol: int = 2) -> bytes:
    """``value`` (bytes keys; bytes, ints, bools, lists, dicts and C-order numpy arrays) pickled as Python 2
    did at ``protocol`` 2 (the published files) or 1 (no PROTO opcode, bools as ``INT``)."""
    pickler = _Python2Pickler(protocol)
    pickler.value(value)
    return bytes(pickler.out + b".")


def batch_content(name: str, rows: np.ndarray, labels: list[int]) -> dict[bytes, object]:
    """The dict of a batch file of CIFAR dataset ``name`` (bytes keys, as published)."""
    cifar = CIFAR_FORMATS[name]
    content: dict[bytes, object] = {
        b"batch_label": b"testing batch 1 of 1",
        cifar.labels_key.encode(): labels,
        b"data": rows,
        b"filenames": [b"image_%d.png" % position for position in range(len(labels))],
    }
    if name == "cifar100":
        content[b"coarse_labels"] = [label // 5 for label in labels]
    return content


def meta_content(name: str) -> dict[bytes, object]:
    """The dict of the meta file of CIFAR dataset ``name``: class names "class_0", "class_1", …"""
    cifar = CIFAR_FORMATS[name]
    names = [b"class_%d" % index for index in range(cifar.class_count)]
    content: dict[bytes, object] = {cifar.class_names_key.encode(): names}
    if name == "cifar100":
        content[b"coarse_label_names"] = [b"superclass_%d" % index for index in range(20)]
    else:
        content[b"num_cases_per_batch"] = 10000
        content[b"num_vis"] = 3072
    return content


def write_cifar_folder(
    root: Path, name: str = "cifar10", images_per_file: int = 3, seed: int = 0, python2: bool = True
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write ``root/<cifar-10-batches-py | cifar-100-python>/`` with ``images_per_file`` random images per
    batch file; returns split → (images N×32×32×3 uint8, labels int64) as the files hold them."""
    cifar = CIFAR_FORMATS[name]
    folder = root / cifar.folder
    folder.mkdir(parents=True)
    dump = python2_pickle if python2 else (lambda value: pickle.dumps(value, protocol=2))
    generator = np.random.default_rng(seed)
    expected = {}
    for split, file_names in cifar.split_files.items():
        all_images, all_labels = [], []
        for file_name in file_names:
            images = generator.integers(0, 256, (images_per_file, 32, 32, 3), dtype=np.uint8)
            labels = [int(label) for label in generator.integers(0, cifar.class_count, images_per_file)]
            rows = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(images_per_file, 3072)
            (folder / file_name).write_bytes(dump(batch_content(name, rows, labels)))
            all_images.append(images)
            all_labels.extend(labels)
        expected[split] = (np.concatenate(all_images), np.asarray(all_labels, dtype=np.int64))
    (folder / cifar.meta_file).write_bytes(dump(meta_content(name)))
    return expected

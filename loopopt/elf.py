"""The shared libraries an ELF shared object needs (its ``DT_NEEDED`` entries), read from the file."""
from __future__ import annotations

import struct
from pathlib import Path

MAGIC = b"\x7fELF"
SHT_DYNAMIC = 6
DT_NULL, DT_NEEDED = 0, 1
# per ELF class (1: 32-bit, 2: 64-bit): the header's (section table offset, entry size, count) and a
# section header's (type, offset, size, link) formats with their offsets, and a dynamic entry's format
LAYOUT = {1: ("32xI10xHH", "4xI8xIIi", "iI"), 2: ("40xQ10xHH", "4xI16xQQi", "qQ")}


def needed(path: Path) -> tuple[str, ...]:
    """The library names ``path`` (an ELF shared object) needs, in order; ValueError if it is not ELF."""
    data = path.read_bytes()
    if data[:4] != MAGIC or data[4] not in LAYOUT or data[5] not in (1, 2):
        raise ValueError(f"{path} is not an ELF file (allowed: a shared object built by the C compiler)")
    order = "<" if data[5] == 1 else ">"
    header, section, entry = (order + text for text in LAYOUT[data[4]])
    table, entry_size, count = struct.unpack_from(header, data)
    sections = [struct.unpack_from(section, data, table + index * entry_size) for index in range(count)]
    names: list[str] = []
    for kind, offset, size, link in sections:
        if kind != SHT_DYNAMIC:
            continue
        strings = sections[link][1]
        for tag, value in struct.iter_unpack(entry, data[offset:offset + size]):
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                start = strings + value
                names.append(data[start:data.index(b"\0", start)].decode())
    return tuple(names)

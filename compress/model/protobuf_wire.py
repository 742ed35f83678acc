"""The protobuf wire format walked field by field, checked as protobuf checks it, without
parsing the payloads: what onnx_file reads an ONNX file's layout with.

A file that is not protobuf must fail at once, not after a walk as long as the damage:
every step consumes at least one byte and is checked against the end of its message, so
the walk is linear in the file's size and stops at the first byte protobuf would refuse:
a varint over 10 bytes, field number 0, wire type 6 or 7, an end-group tag without its
start, a length past the end of its message. Groups (wire types 3 and 4, deprecated but
still read by protobuf) are skipped whole, nested at most as deep as protobuf's default
recursion limit.
"""
from __future__ import annotations

MAX_VARINT_BYTES = 10     # a 64-bit value, 7 bits a byte
MAX_TAG = (1 << 32) - 1   # a tag is a uint32: field number (29 bits) and wire type
MAX_DEPTH = 100           # protobuf's default recursion limit
_MASK64 = (1 << 64) - 1
_END_GROUP, _START_GROUP = 4, 3


class WireError(Exception):
    """The bytes are not protobuf: `what` went wrong at byte `at` of the buffer."""

    def __init__(self, what: str, at: int):
        self.what, self.at = what, at
        super().__init__(f"{what} at byte {at}")


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`, within buf[:end]."""
    start, value = pos, 0
    for shift in range(0, 7 * MAX_VARINT_BYTES, 7):
        if pos >= end:
            raise WireError("the data ends inside a varint", start)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _MASK64, pos   # bits past 64 dropped, as protobuf drops them
    raise WireError(f"a varint longer than {MAX_VARINT_BYTES} bytes", start)


def _tag(buf, pos: int, end: int) -> tuple[int, int, int]:
    """(field number, wire type, position after the tag)."""
    key, after = varint(buf, pos, end)
    number, wire = key >> 3, key & 7
    if key > MAX_TAG:
        raise WireError(f"a field tag of {key} (over 32 bits)", pos)
    if number == 0:
        raise WireError("field number 0 (protobuf numbers fields from 1)", pos)
    if wire in (6, 7):
        raise WireError(f"wire type {wire} (protobuf has none)", pos)
    return number, wire, after


def _within(pos: int, length: int, end: int, what: str) -> int:
    if length > end - pos:
        raise WireError(f"{what} of {length} bytes runs past the end of its message "
                        f"({end - pos} bytes left)", pos)
    return pos + length


def _payload(buf, pos: int, end: int, number: int, wire: int, depth: int) -> tuple[int, int]:
    """(where the field's payload starts, where the field ends)."""
    if wire == 0:
        return pos, varint(buf, pos, end)[1]
    if wire == 1:
        return pos, _within(pos, 8, end, "a fixed64 field")
    if wire == 5:
        return pos, _within(pos, 4, end, "a fixed32 field")
    if wire == 2:
        length, start = varint(buf, pos, end)
        return start, _within(start, length, end, f"field {number}")
    return pos, _skip_group(buf, pos, end, number, depth + 1)   # wire 3: start group


def _skip_group(buf, pos: int, end: int, number: int, depth: int) -> int:
    """The position after the end-group tag that closes group `number`."""
    if depth > MAX_DEPTH:
        raise WireError(f"groups nested over {MAX_DEPTH} deep", pos)
    while pos < end:
        begin = pos
        inner, wire, pos = _tag(buf, pos, end)
        if wire == _END_GROUP:
            if inner != number:
                raise WireError(f"an end-group tag for field {inner} inside group {number}",
                                begin)
            return pos
        pos = _payload(buf, pos, end, inner, wire, depth)[1]
    raise WireError(f"group {number} has no end-group tag", end)


def fields(buf, start: int, end: int):
    """(field number, wire type, payload start, field end, field start) of each field of
    the message in buf[start:end]; payloads are skipped, not read. Raises WireError."""
    pos = start
    while pos < end:
        begin = pos
        number, wire, pos = _tag(buf, pos, end)
        if wire == _END_GROUP:
            raise WireError(f"an end-group tag for field {number} outside any group", begin)
        payload, after = _payload(buf, pos, end, number, wire, 0)
        yield number, wire, payload, after, begin
        pos = after


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)

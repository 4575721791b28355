"""Column-at-a-time protobuf wire decoding for the XEvent/XStat fields the reader uses.

upb hands us every line's events as undecoded byte strings (``messages(raw_events=True)``); they are joined into
one buffer and all events are decoded together: each round reads the next field of every event that still has
bytes left, so the number of numpy passes is the number of fields in the longest event, not the number of events.
Stats (XEvent field 4) come out as byte ranges and are decoded the same way.

This is the fallback for installs without the C walker (``_wire_scan.c``), which reads the same fields in one
sequential pass; both feed ``xplane_space.decode_space`` the same columns.
"""

from __future__ import annotations

import numpy as np

PAD = 16  # zero bytes after the buffer: a varint read that runs off the end stops there and is caught below

#: upb's limits, which the C walker applies too: a key or a length is a varint of at most 5 bytes (a key fits 32
#: bits, a length stays below 2**31 - 1), a value of at most 10; every submessage or group takes one of 100 levels.
KEY_MAX, SIZE_MAX = 0xFFFFFFFF, 0x7FFFFFFE
EVENT_DEPTH = 97  # XSpace > XPlane > XLine > XEvent
STAT_DEPTH = EVENT_DEPTH - 1


class WireError(ValueError):
    """The bytes are not a well-formed message of the expected shape."""


def _varints(buf: np.ndarray, pos: np.ndarray, max_len: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint of at most ``max_len`` bytes at each position: (values as uint64, position after each)."""
    b = buf[pos]
    end = pos + 1
    if b.max(initial=0) < 0x80:  # all one byte: the common case for keys, lengths and small ids
        return b.astype(np.uint64), end
    value = (b & 0x7F).astype(np.uint64)
    more = np.flatnonzero(b >= 0x80)
    cur = pos[more] + 1
    shift = 7
    while len(more):
        if shift >= 7 * max_len:
            raise WireError(f"varint longer than {max_len} bytes")
        b = buf[cur]
        value[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        cur += 1
        go_on = b >= 0x80
        done = ~go_on
        end[more[done]] = cur[done]
        more, cur = more[go_on], cur[go_on]
        shift += 7
    return value, end


def _sizes(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Length prefixes at ``pos``: (lengths as int64, position after each), within upb's limits."""
    ln, after = _varints(buf, pos, 5)
    if len(ln) and ln.max() > SIZE_MAX:
        raise WireError("length too large")
    return ln.astype(np.int64), after


def _scalar_varint(buf: np.ndarray, p: int, end: int, max_len: int) -> tuple[int, int]:
    v = 0
    for i in range(max_len):
        if p >= end:
            break
        b = int(buf[p])
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return v & 0xFFFFFFFFFFFFFFFF, p
    raise WireError("a field runs past the end of its message")


def skip_group(buf: np.ndarray, p: int, end: int, field: int, depth: int) -> int:
    """The position after a group whose start key (``field``) ends at ``p``, in a message ending at ``end`` with
    ``depth`` levels left: upb skips an unknown group this way and so does the C walker. Groups never occur in
    profiler output, so this scalar walk only runs on odd or hostile files."""
    stack = [field]
    depth -= 1
    while True:
        if depth < 0 or p >= end:
            raise WireError("a group is unterminated or nested too deep")
        key, p = _scalar_varint(buf, p, end, 5)
        wt, f = key & 7, key >> 3
        if key > KEY_MAX or wt > 5:  # field number 0 passes inside a group: upb does not look there
            raise WireError("invalid field key")
        if wt == 4:
            if f != stack.pop():
                raise WireError("a group ends with another field's key")
            if not stack:
                return p
            depth += 1
        elif wt == 3:
            stack.append(f)
            depth -= 1
        elif wt == 0:
            _, p = _scalar_varint(buf, p, end, 10)
        elif wt == 2:
            ln, p = _scalar_varint(buf, p, end, 5)
            if ln > SIZE_MAX:
                raise WireError("length too large")
            p += ln
        else:
            p += 8 if wt == 1 else 4
        if p > end:
            raise WireError("a field runs past the end of its message")


def decode_fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, varint_fields: tuple[int, ...],
                  bytes_fields: tuple[int, ...] = (), fixed64_fields: tuple[int, ...] = (),
                  repeated_bytes: int | None = None, depth: int = EVENT_DEPTH):
    """Decode the messages ``buf[starts[i]:ends[i]]`` field by field, all messages at once.

    Returns ``(values, seen, spans, repeated)``, each per message: ``values[f]`` the uint64 of a varint or fixed64
    field (0 when absent; the last occurrence wins, as in protobuf); ``seen[f]`` the round in which field ``f`` was
    last read (-1 = absent), which resolves oneofs (the member read last is the one set); ``spans[f]`` the
    ``(start, end)`` of a length-delimited field; ``repeated`` = ``(message index, start, end)`` of every occurrence
    of the ``repeated_bytes`` field, in round order: the k-th occurrences of all messages come before the (k+1)-th,
    so a stable sort on the message index puts them in message and then file order. Unknown fields are skipped,
    groups among them too (``depth``: the levels the messages have left); what upb would refuse raises WireError.
    """
    n = len(starts)
    values = {f: np.zeros(n, dtype=np.uint64) for f in varint_fields + fixed64_fields}
    seen = {f: np.full(n, -1, dtype=np.int32) for f in varint_fields + bytes_fields + fixed64_fields}
    spans = {f: (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)) for f in bytes_fields}
    rep_idx, rep_s, rep_e = [], [], []
    pos = starts.astype(np.int64, copy=True)
    ends = np.asarray(ends, dtype=np.int64)
    active = np.flatnonzero(pos < ends)
    limit = len(buf) - PAD
    rnd = 0
    while len(active):
        p = pos[active]
        key = buf[p].astype(np.int64)
        if (key >= 0x80).any():
            k, p = _varints(buf, p, 5)
            if k.max() > KEY_MAX:
                raise WireError("invalid field key")
            key = k.astype(np.int64)
        else:
            p = p + 1
        wt = key & 7
        field = key >> 3
        nxt = np.empty_like(p)
        bad = (field == 0) | (wt == 4) | (wt > 5)
        if bad.any():
            raise WireError("invalid field key")
        sel = np.flatnonzero(wt == 3)
        if len(sel):
            e = ends[active]
            nxt[sel] = [skip_group(buf, int(q), int(x), int(f), depth)
                        for q, x, f in zip(p[sel].tolist(), e[sel].tolist(), field[sel].tolist())]
        sel = np.flatnonzero(wt == 0)
        if len(sel):
            v, after = _varints(buf, p[sel])
            nxt[sel] = after
            fs = field[sel]
            for f in varint_fields:
                m = fs == f
                if m.any():
                    idx = active[sel[m]]
                    values[f][idx] = v[m]
                    seen[f][idx] = rnd
        sel = np.flatnonzero(wt == 2)
        if len(sel):
            ln, after = _sizes(buf, p[sel])
            stop = after + ln
            nxt[sel] = stop
            fs = field[sel]
            for f in bytes_fields:
                m = fs == f
                if m.any():
                    idx = active[sel[m]]
                    spans[f][0][idx] = after[m]
                    spans[f][1][idx] = stop[m]
                    seen[f][idx] = rnd
            if repeated_bytes is not None:
                m = fs == repeated_bytes
                if m.all():
                    rep_idx.append(active[sel])
                    rep_s.append(after)
                    rep_e.append(stop)
                elif m.any():
                    rep_idx.append(active[sel[m]])
                    rep_s.append(after[m])
                    rep_e.append(stop[m])
        for w, width in ((1, 8), (5, 4)):
            sel = np.flatnonzero(wt == w)
            if len(sel):
                q = p[sel]
                nxt[sel] = q + width
                if w == 1:
                    fs = field[sel]
                    for f in fixed64_fields:
                        m = fs == f
                        if m.any():
                            raw = np.ascontiguousarray(buf[q[m][:, None] + np.arange(8)])
                            idx = active[sel[m]]
                            values[f][idx] = raw.view("<u8").ravel()
                            seen[f][idx] = rnd
        e = ends[active]
        if (nxt > e).any() or (nxt > limit).any():
            raise WireError("a field runs past the end of its message")
        pos[active] = nxt
        active = active[nxt < e]
        rnd += 1
    if rep_idx:
        repeated = (np.concatenate(rep_idx), np.concatenate(rep_s), np.concatenate(rep_e))
    else:
        empty = np.zeros(0, dtype=np.int64)
        repeated = (empty, empty, empty)
    return values, seen, spans, repeated


def _opt_varint(buf, pos, ends, rows, tag):
    """Where the next key of message ``rows`` is ``tag`` (a one-byte varint key): read it. Returns (hit mask, value)."""
    p = pos[rows]
    hit = (p < ends[rows]) & (buf[p] == tag)
    sel = rows[hit]
    v, after = _varints(buf, pos[sel] + 1)
    pos[sel] = after
    return sel, v


def decode_events(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """XEvent columns: (metadata_id, offset_ps, duration_ps) as int64, and (event, start, end) of every stat.

    Fast path for the layout every protobuf serializer writes (fields in number order: 1, 2, 3, 4*, 5); events laid
    out any other way (unknown fields, reordered or repeated fields) are decoded by ``decode_fields``. Stats come
    in round order (see ``decode_fields``).
    """
    n = len(starts)
    ends = np.asarray(ends, dtype=np.int64)
    pos = starts.astype(np.int64, copy=True)
    rows = np.arange(n)
    mid = np.zeros(n, dtype=np.uint64)
    off = np.zeros(n, dtype=np.uint64)
    dur = np.zeros(n, dtype=np.uint64)
    for tag, out in ((0x08, mid), (0x10, off), (0x18, dur)):
        sel, v = _opt_varint(buf, pos, ends, rows, tag)
        out[sel] = v
    rep_idx, rep_s, rep_e = [], [], []
    active = rows[pos < ends]
    while len(active):
        p = pos[active]
        st = active[buf[p] == 0x22]
        if not len(st):
            break
        ln, after = _sizes(buf, pos[st] + 1)
        stop = after + ln
        rep_idx.append(st)
        rep_s.append(after)
        rep_e.append(stop)
        pos[st] = stop
        active = st[stop < ends[st]]
    sel, _ = _opt_varint(buf, pos, ends, rows[pos < ends], 0x28)
    off[sel] = 0  # num_occurrences shares a oneof with offset_ps and comes later: it is the member set
    limit = len(buf) - PAD
    irregular = np.flatnonzero((pos != ends) | (pos > limit))
    if len(irregular):
        # anything else: decode those events in full, the general way
        if rep_idx:
            keep = [~np.isin(i, irregular) for i in rep_idx]
            rep_idx = [i[k] for i, k in zip(rep_idx, keep)]
            rep_s = [s[k] for s, k in zip(rep_s, keep)]
            rep_e = [e[k] for e, k in zip(rep_e, keep)]
        values, seen, _, (ri, rs, re_) = decode_fields(buf, starts[irregular], ends[irregular], (1, 2, 3, 5),
                                                       repeated_bytes=4)
        mid[irregular] = values[1]
        off[irregular] = np.where(seen[5] > seen[2], 0, values[2])
        dur[irregular] = values[3]
        rep_idx.append(irregular[ri])
        rep_s.append(rs)
        rep_e.append(re_)
    if rep_idx:
        stats = (np.concatenate(rep_idx), np.concatenate(rep_s), np.concatenate(rep_e))
    else:
        empty = np.zeros(0, dtype=np.int64)
        stats = (empty, empty, empty)
    return mid.view(np.int64), off.view(np.int64), dur.view(np.int64), stats


def leading_varint_in(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, group: np.ndarray,
                      wanted: list[set[int]]) -> np.ndarray:
    """Which messages start with field 1 (varint) holding one of ``wanted[group[i]]``: a byte-pattern lookup.

    Ids below 2**14 encode in at most two bytes, so the two bytes after the key index a 64 KiB table per group.
    Messages not starting with key 0x08, or groups with larger ids, are answered by decoding the varint.
    """
    out = np.zeros(len(starts), dtype=bool)
    if not len(starts):
        return out
    small = [g for g, ids in enumerate(wanted) if ids and max(ids) < 1 << 14 and min(ids) >= 0]
    lut = np.zeros((len(wanted), 1 << 16), dtype=bool)
    lo = np.arange(1 << 16) & 0xFF
    hi = np.arange(1 << 16) >> 8
    for g in small:
        for i in wanted[g]:
            if i < 0x80:
                lut[g, lo == i] = True
            else:
                lut[g, (lo == ((i & 0x7F) | 0x80)) & (hi == (i >> 7))] = True
    is_small = np.zeros(len(wanted), dtype=bool)
    is_small[small] = True
    lead = (buf[starts] == 0x08) & (ends - starts >= 2)
    fast = lead & is_small[group]
    f = np.flatnonzero(fast)
    pair = buf[starts[f] + 1].astype(np.intp) | (buf[starts[f] + 2].astype(np.intp) << 8)
    out[f] = lut[group[f], pair]
    slow = np.flatnonzero(~fast)
    if len(slow):
        # field 1 wherever it is (last occurrence wins), as a full decode would see it
        values, _, _, _ = decode_fields(buf, starts[slow], ends[slow], (1,), depth=STAT_DEPTH)
        ids = values[1].view(np.int64)
        g = group[slow]
        for grp in np.unique(g).tolist():
            m = g == grp
            out[slow[m]] = np.isin(ids[m], np.fromiter(wanted[grp], dtype=np.int64))
    return out


_VARINT_VALUE_TAGS = np.array([0x18, 0x20, 0x38])  # XStat uint64, int64, ref
_BYTES_TAGS = np.array([0x2A, 0x32])  # XStat str, bytes


def odd_stats(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of these XStats are not laid out as serializers write them (the metadata id in its shortest form, then
    at most one value, each once): a few whole-column passes, decoding nothing. A stat in that layout is well formed, and its first
    field is its metadata id; any other must be decoded in full (``decode_fields``), which also finds its faults.
    Raises WireError on a varint or length no layout allows.
    """
    if not len(starts):
        return np.zeros(0, dtype=bool)
    ends = np.asarray(ends, dtype=np.int64)
    pos = starts.astype(np.int64, copy=True)
    lead = np.flatnonzero((pos < ends) & (buf[np.minimum(pos, len(buf) - 1)] == 0x08))
    _, after = _varints(buf, pos[lead] + 1)
    # an id written in more bytes than it needs (ends in a zero byte) is valid but defeats a byte-pattern match
    overlong = lead[(after - pos[lead] > 2) & (buf[after - 1] == 0)]
    pos[lead] = after
    rest = lead[pos[lead] < ends[lead]]
    p = pos[rest]
    tag = buf[p]
    var = np.isin(tag, _VARINT_VALUE_TAGS)
    if var.any():
        _, pos[rest[var]] = _varints(buf, p[var] + 1)
    fix = tag == 0x11  # double
    pos[rest[fix]] = p[fix] + 9
    byt = np.isin(tag, _BYTES_TAGS)
    if byt.any():
        ln, after = _sizes(buf, p[byt] + 1)
        pos[rest[byt]] = after + ln
    odd = np.ones(len(starts), dtype=bool)
    odd[lead] = False
    odd[rest[~(var | fix | byt)]] = True
    odd |= pos != ends
    odd[overlong] = True
    odd[starts == ends] = False  # an empty stat is a valid one
    return odd

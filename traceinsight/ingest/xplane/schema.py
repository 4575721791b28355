"""The XSpace message family, declared in Python from the public field numbers.

Why not the TensorFlow-generated module: importing it drags in all of TensorFlow (seconds, >1 GB). Why not protoc:
no build step and no generated-code/runtime version coupling. A ``FileDescriptorProto`` built here plus
``message_factory.GetMessageClass`` gives the same fast (upb) parser with ``protobuf`` as the only dependency.
The package name is deliberately private so it never clashes with TensorFlow's own registration in one process.
Where the C walker (``_wire_scan.c``) is built the reader does not need these classes (it walks the wire format
itself); they serve the pure-Python path and tools that write xplanes.
"""

from __future__ import annotations

from functools import lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "traceinsight.xplane"
_RAW_PACKAGE = "traceinsight.xplane_raw"

_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _DOUBLE, _STRING, _BYTES, _MSG = (
    _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE, _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE,
)
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message -> [(field name, number, type, label, message type or None, oneof index or None)]
_SCHEMA: dict[str, list[tuple]] = {
    "XSpace": [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STRING, _REP, None, None),
        ("warnings", 3, _STRING, _REP, None, None),
        ("hostnames", 4, _STRING, _REP, None, None),
    ],
    "XPlane": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _INT64, _OPT, None, None),
        ("display_id", 10, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("display_name", 11, _STRING, _OPT, None, None),
        ("timestamp_ns", 3, _INT64, _OPT, None, None),
        ("duration_ps", 9, _INT64, _OPT, None, None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("offset_ps", 2, _INT64, _OPT, None, 0),
        ("num_occurrences", 5, _INT64, _OPT, None, 0),
        ("duration_ps", 3, _INT64, _OPT, None, None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("double_value", 2, _DOUBLE, _OPT, None, 0),
        ("uint64_value", 3, _UINT64, _OPT, None, 0),
        ("int64_value", 4, _INT64, _OPT, None, 0),
        ("str_value", 5, _STRING, _OPT, None, 0),
        ("bytes_value", 6, _BYTES, _OPT, None, 0),
        ("ref_value", 7, _UINT64, _OPT, None, 0),
    ],
    "XEventMetadata": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("display_name", 4, _STRING, _OPT, None, None),
        ("metadata", 3, _BYTES, _OPT, None, None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _INT64, _REP, None, None),
    ],
    "XStatMetadata": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("description", 3, _STRING, _OPT, None, None),
    ],
}
_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}
_MAPS = {"XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]}


def _add_fields(msg: descriptor_pb2.DescriptorProto, fields: list[tuple], package: str = _PACKAGE) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{package}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof
        if ftype == _INT64 and label == _REP:
            f.options.packed = True


def file_descriptor(raw_events: bool = False) -> descriptor_pb2.FileDescriptorProto:
    """The schema; ``raw_events`` declares ``XLine.events`` as ``repeated bytes`` (same wire type, field 4).

    The raw variant lets the reader take each line's events as undecoded byte strings straight from upb and decode
    the few fields it needs for all events at once (``proto/wire.py``) instead of building a message per event.
    """
    package = _RAW_PACKAGE if raw_events else _PACKAGE
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package.replace('.', '/')}.proto", package=package,
                                             syntax="proto3")
    for name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=name)
        for oneof in _ONEOFS.get(name, []):
            msg.oneof_decl.add(name=oneof)
        if raw_events and name == "XLine":
            fields = [("events", 4, _BYTES, _REP, None, None) if f[0] == "events" else f for f in fields]
        _add_fields(msg, fields, package)
        for entry, value_type in _MAPS.get(name, []):
            e = msg.nested_type.add(name=entry)
            e.options.map_entry = True
            _add_fields(e, [("key", 1, _INT64, _OPT, None, None), ("value", 2, _MSG, _OPT, value_type, None)],
                        package)
    return fdp


@lru_cache(maxsize=None)
def messages(raw_events: bool = False) -> dict[str, type]:
    """Message classes by name, built once per process in a private pool (see ``file_descriptor``)."""
    package = _RAW_PACKAGE if raw_events else _PACKAGE
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor(raw_events))
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}")) for name in _SCHEMA}


def XSpace():  # noqa: N802 - mirrors the message name
    return messages()["XSpace"]()

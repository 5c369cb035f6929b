"""The `DumpData` message of an Ascend graph-engine (GE) dump file, built with the protobuf library.

The schema is the public `dump_data.proto` (package `toolkit.dumpdata` in MindSpore, `toolkit.dump`
in CANN's GE): the same message, field numbers and types are declared here with descriptor_pb2 and
turned into message classes at import time, in a pool of their own — no generated code, no protoc,
no hand-parsed varints. Only the fields opdiff reads or the test writer sets need to be right; the
others are declared so that a file carrying them still parses as the schema says.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "toolkit.dumpdata"

# OutputDataType (dump_data.proto): number -> name
DATA_TYPES: dict[int, str] = {
    0: "DT_UNDEFINED", 1: "DT_FLOAT", 2: "DT_FLOAT16", 3: "DT_INT8", 4: "DT_UINT8", 5: "DT_INT16", 6: "DT_UINT16",
    7: "DT_INT32", 8: "DT_INT64", 9: "DT_UINT32", 10: "DT_UINT64", 11: "DT_BOOL", 12: "DT_DOUBLE", 13: "DT_STRING",
    14: "DT_DUAL_SUB_INT8", 15: "DT_DUAL_SUB_UINT8", 16: "DT_COMPLEX64", 17: "DT_COMPLEX128", 18: "DT_QINT8",
    19: "DT_QINT16", 20: "DT_QINT32", 21: "DT_QUINT8", 22: "DT_QUINT16", 23: "DT_RESOURCE", 24: "DT_STRING_REF",
    25: "DT_DUAL", 26: "DT_VARIANT", 27: "DT_BF16", 28: "DT_INT4", 29: "DT_UINT1", 30: "DT_INT2", 31: "DT_UINT2",
    32: "DT_COMPLEX32", 33: "DT_HIFLOAT8", 34: "DT_FLOAT8_E5M2", 35: "DT_FLOAT8_E4M3FN", 36: "DT_FLOAT8_E8M0",
    37: "DT_FLOAT6_E3M2", 38: "DT_FLOAT6_E2M3", 39: "DT_FLOAT4_E2M1", 40: "DT_FLOAT4_E1M2", 41: "DT_HIFLOAT4",
    42: "DT_HIFLOAT4_SCALE",
}

# OutputFormat (dump_data.proto): number -> name (without the FORMAT_ prefix)
FORMATS: dict[int, str] = {
    0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 5: "NC1C0HWPAD", 6: "NHWC1C0", 7: "FSR_NCHW",
    8: "FRACTAL_DECONV", 9: "C1HWNC0", 10: "FRACTAL_DECONV_TRANSPOSE", 11: "FRACTAL_DECONV_SP_STRIDE_TRANS",
    12: "NC1HWC0_C04", 13: "FRACTAL_Z_C04", 14: "CHWN", 15: "FRACTAL_DECONV_SP_STRIDE8_TRANS", 16: "HWCN",
    17: "NC1KHKWHWC0", 18: "BN_WEIGHT", 19: "FILTER_HWCK", 20: "HASHTABLE_LOOKUP_LOOKUPS",
    21: "HASHTABLE_LOOKUP_KEYS", 22: "HASHTABLE_LOOKUP_VALUE", 23: "HASHTABLE_LOOKUP_OUTPUT",
    24: "HASHTABLE_LOOKUP_HITS", 25: "C1HWNCoC0", 26: "MD", 27: "NDHWC", 28: "FRACTAL_ZZ", 29: "FRACTAL_NZ",
    30: "NCDHW", 31: "DHWCN", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 34: "CN", 35: "NC", 36: "DHWNC",
    37: "FRACTAL_Z_3D_TRANSPOSE", 38: "FRACTAL_ZN_LSTM", 39: "FRACTAL_Z_G", 40: "RESERVED", 41: "ALL", 42: "NULL",
    43: "ND_RNN_BIAS", 44: "FRACTAL_ZN_RNN", 45: "NYUV", 46: "NYUV_A", 47: "NCL", 48: "FRACTAL_Z_WINO",
    49: "C1HWC0", 255: "MAX",
}
FORMAT_NUMBER = {name: num for num, name in FORMATS.items()}
DATA_TYPE_NUMBER = {name: num for num, name in DATA_TYPES.items()}

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "uint64": _F.TYPE_UINT64, "uint32": _F.TYPE_UINT32,
            "int32": _F.TYPE_INT32}
_ENUMS = ("OutputDataType", "OutputFormat", "BufferType", "Workspace.SpaceType")

# message -> [(field name, number, type, repeated)]; a type that is not a scalar names a message or enum
_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "OriginalOp": [("name", 1, "string", False), ("output_index", 2, "uint32", False),
                   ("data_type", 3, "OutputDataType", False), ("format", 4, "OutputFormat", False)],
    "Shape": [("dim", 1, "uint64", True)],
    "DimRange": [("dim_start", 1, "uint64", False), ("dim_end", 2, "uint64", False)],
    "OpOutput": [("data_type", 1, "OutputDataType", False), ("format", 2, "OutputFormat", False),
                 ("shape", 3, "Shape", False), ("original_op", 4, "OriginalOp", False), ("data", 5, "bytes", False),
                 ("size", 6, "uint64", False), ("original_shape", 7, "Shape", False), ("sub_format", 8, "int32", False),
                 ("address", 9, "uint64", False), ("dim_range", 10, "DimRange", True),
                 ("arg_index", 11, "uint32", False)],
    "OpInput": [("data_type", 1, "OutputDataType", False), ("format", 2, "OutputFormat", False),
                ("shape", 3, "Shape", False), ("data", 4, "bytes", False), ("size", 5, "uint64", False),
                ("original_shape", 6, "Shape", False), ("sub_format", 7, "int32", False), ("address", 8, "uint64", False),
                ("offset", 9, "uint64", False), ("arg_index", 10, "uint32", False), ("input_type", 11, "uint32", False)],
    "OpBuffer": [("buffer_type", 1, "BufferType", False), ("data", 2, "bytes", False), ("size", 3, "uint64", False)],
    "OpAttr": [("name", 1, "string", False), ("value", 2, "string", False)],
    "Workspace": [("type", 1, "Workspace.SpaceType", False), ("data", 2, "bytes", False), ("size", 3, "uint64", False),
                  ("arg_index", 4, "uint32", False)],
    "DumpData": [("version", 1, "string", False), ("dump_time", 2, "uint64", False), ("output", 3, "OpOutput", True),
                 ("input", 4, "OpInput", True), ("buffer", 5, "OpBuffer", True), ("op_name", 6, "string", False),
                 ("attr", 7, "OpAttr", True), ("space", 8, "Workspace", True), ("dfx_message", 9, "string", False)],
}


def _enum(parent: Any, name: str, values: dict[int, str], prefix: str = "") -> None:
    e = parent.enum_type.add(name=name)
    for num, val in sorted(values.items()):
        e.value.add(name=prefix + val, number=num)


def _file() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a FileDescriptorProto (proto3, like the public file)."""
    f = descriptor_pb2.FileDescriptorProto(name="opdiff/ge_dump_data.proto", package=PACKAGE, syntax="proto3")
    _enum(f, "OutputDataType", DATA_TYPES)
    _enum(f, "OutputFormat", FORMATS, "FORMAT_")
    _enum(f, "BufferType", {0: "L1"})
    for msg, fields in _MESSAGES.items():
        m = f.message_type.add(name=msg)
        if msg == "Workspace":
            _enum(m, "SpaceType", {0: "LOG"})
        for name, num, typ, repeated in fields:
            fd = m.field.add(name=name, number=num,
                             label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if typ in _SCALARS:
                fd.type = _SCALARS[typ]
            else:
                fd.type = _F.TYPE_ENUM if typ in _ENUMS else _F.TYPE_MESSAGE
                fd.type_name = f".{PACKAGE}.{typ}"
    return f


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
DumpData: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.DumpData"))

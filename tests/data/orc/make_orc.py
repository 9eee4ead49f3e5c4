"""Writes the ORC data files of tests/other_writers.rs (`orc_data_files_*`) with pyarrow.

    python tests/data/orc/make_orc.py tests/data/orc

nested.orc:      a struct column before the others (see below).
with_ids.orc:    the columns carry Iceberg field ids as ORC type attributes (`iceberg.id`),
                 as Iceberg's ORC writers store them; zstd.
without_ids.orc: no attributes (a file written before the table had ids); `id` is an ORC int
                 (the table's is a long); zlib.
evolved.orc:     written before the table evolved: its struct `s` holds `b_old` (since renamed
                 `b`) before `a`, it has a column the table dropped (`gone`, id 99), and
                 nanosecond timestamps (`tsn`, `tsz`); field ids s=1, id=2, tsn=3, tsz=4,
                 s.a=7, s.b=8. (pyarrow writes the nanoseconds of a time before 1970 that is
                 not a whole second negative, which other readers read otherwise: such
                 values are left out.)
No file stores the identity partition column `region`.
"""
import datetime as dt
import decimal
import sys

import pyarrow as pa
import pyarrow.orc as orc

out = sys.argv[1]


def field(name, ty, fid=None, nullable=True):
    meta = {"iceberg.id": str(fid), "iceberg.required": str(not nullable).lower()} if fid else None
    return pa.field(name, ty, nullable=nullable, metadata=meta)


rows = 5
with_ids = pa.schema([
    field("id", pa.int64(), 1, nullable=False),
    field("name", pa.string(), 2),
    field("ts", pa.timestamp("us"), 3),
    field("d", pa.decimal128(10, 2), 4),
])
orc.write_table(
    pa.table({
        "id": pa.array(range(1, rows + 1), pa.int64()),
        "name": ["a", None, "c", "d", "e"],
        "ts": [dt.datetime(2024, 1, i, 12, 30, 0, 250) if i != 3 else None for i in range(1, rows + 1)],
        "d": [decimal.Decimal(f"{i}.25") for i in range(1, rows + 1)],
    }, schema=with_ids),
    f"{out}/with_ids.orc",
    compression="zstd",
)
without_ids = pa.schema([
    field("id", pa.int32()),
    field("name", pa.string()),
    field("ts", pa.timestamp("us")),
    field("d", pa.decimal128(10, 2)),
])
orc.write_table(
    pa.table({
        "id": pa.array(range(11, 14), pa.int32()),
        "name": ["x", "y", None],
        "ts": [dt.datetime(1999, 12, 31, 23, 59, 59), None, dt.datetime(2000, 1, 1)],
        "d": [decimal.Decimal("-1.50"), None, decimal.Decimal("99999999.99")],
    }, schema=without_ids),
    f"{out}/without_ids.orc",
    compression="zlib",
)
# nested.orc: a struct column first (ORC type ids: root 0, s 1, s.a 2, id 3, name 4), so a
# column after it is not at its position + 1; field ids s=1, id=2, name=3, s.a=5 (the table's
# region is 4).
nested = pa.schema([
    field("s", pa.struct([field("a", pa.int32(), 5)]), 1),
    field("id", pa.int64(), 2, nullable=False),
    field("name", pa.string(), 3),
])
orc.write_table(
    pa.table({
        "s": [{"a": 10}, None, {"a": 30}],
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": ["n1", "n2", None],
    }, schema=nested),
    f"{out}/nested.orc",
    compression="zstd",
)

evolved = pa.schema([
    field("s", pa.struct([field("b_old", pa.string(), 8), field("a", pa.int32(), 7)]), 1),
    field("id", pa.int64(), 2, nullable=False),
    field("gone", pa.int32(), 99),
    field("tsn", pa.timestamp("ns"), 3),
    field("tsz", pa.timestamp("ns", tz="UTC"), 4),
])
orc.write_table(
    pa.table({
        "s": [{"b_old": "x", "a": 1}, None, {"b_old": None, "a": 3}],
        "id": pa.array([1, 2, 3], pa.int64()),
        "gone": pa.array([7, 8, 9], pa.int32()),
        "tsn": pa.array([1_700_000_000_123_456_789, None, -86_400_000_000_000], pa.timestamp("ns")),
        "tsz": pa.array([1_700_000_000_000_000_001, 5, None], pa.timestamp("ns", tz="UTC")),
    }, schema=evolved),
    f"{out}/evolved.orc",
    compression="zstd",
)

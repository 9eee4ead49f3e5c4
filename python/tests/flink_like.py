"""Equality deletes committed the way Flink's upsert sink commits them: one snapshot that adds a
data file with the new versions of some rows and an equality-delete file (on the key) that
deletes the older versions. The delete's sequence number is the data file's, so it applies to
rows written before that commit only, not to the new versions beside it.

pyiceberg cannot write delete files; this writes them with pyarrow and pyiceberg's own manifest
and manifest-list writers, and commits through its catalog (compare-and-swap on the snapshot).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.typedef import Record


class _DeleteManifestWriter(ManifestWriterV2):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _write_parquet(table, arrow: pa.Table, kind: str) -> tuple[str, int]:
    path = f"{table.location()}/data/{kind}-{uuid.uuid4()}.parquet"
    local = path.removeprefix("file://")
    # Field ids in the footer, as every Iceberg writer puts them.
    fields = []
    for f in arrow.schema:
        fid = table.schema().find_field(f.name).field_id
        fields.append(f.with_metadata({b"PARQUET:field_id": str(fid).encode()}))
    pq.write_table(arrow.cast(pa.schema(fields)), local)
    import os

    return path, os.path.getsize(local)


def upsert_with_equality_deletes(catalog, identifier: str, new_rows: pa.Table, key: str) -> None:
    """Commits `new_rows` (the table's columns) and an equality delete on `key` of their keys."""
    table = catalog.load_table(identifier)
    meta = table.metadata
    parent = table.current_snapshot()
    snapshot_id = meta.new_snapshot_id()
    seq = meta.next_sequence_number()
    io = table.io
    data_path, data_size = _write_parquet(table, new_rows, "data")
    deletes = new_rows.select([key])
    delete_path, delete_size = _write_parquet(table, deletes, "eq-delete")
    key_id = table.schema().find_field(key).field_id

    def data_file(content, path, size, rows, equality_ids=None):
        return DataFile.from_args(
            content=content,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=rows,
            file_size_in_bytes=size,
            equality_ids=equality_ids,
            spec_id=table.spec().spec_id,
        )

    def entry(f):
        return ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, sequence_number=None,
            file_sequence_number=None, data_file=f,
        )

    manifests = list(parent.manifests(io)) if parent else []
    data_manifest = f"{table.location()}/metadata/{uuid.uuid4()}-m0.avro"
    with ManifestWriterV2(table.spec(), table.schema(), io.new_output(data_manifest), snapshot_id, "deflate") as w:
        w.add_entry(entry(data_file(DataFileContent.DATA, data_path, data_size, new_rows.num_rows)))
    manifests.append(w.to_manifest_file())
    delete_manifest = f"{table.location()}/metadata/{uuid.uuid4()}-m1.avro"
    with _DeleteManifestWriter(table.spec(), table.schema(), io.new_output(delete_manifest), snapshot_id, "deflate") as w:
        w.add_entry(entry(data_file(DataFileContent.EQUALITY_DELETES, delete_path, delete_size,
                                    deletes.num_rows, [key_id])))
    manifests.append(w.to_manifest_file())
    manifest_list = f"{table.location()}/metadata/snap-{snapshot_id}-{uuid.uuid4()}.avro"
    with write_manifest_list(2, io.new_output(manifest_list), snapshot_id,
                             parent.snapshot_id if parent else None, seq, "deflate") as lw:
        lw.add_manifests(manifests)
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        sequence_number=seq,
        manifest_list=manifest_list,
        summary=Summary(Operation.OVERWRITE, **{"added-data-files": "1", "added-delete-files": "1",
                                               "added-equality-delete-files": "1"}),
        schema_id=table.schema().schema_id,
    )
    with table.transaction() as tx:
        tx._apply(
            (AddSnapshotUpdate(snapshot=snapshot),
             SetSnapshotRefUpdate(snapshot_id=snapshot_id, parent_snapshot_id=snapshot.parent_snapshot_id,
                                  ref_name="main", type="branch")),
            (AssertRefSnapshotId(snapshot_id=parent.snapshot_id if parent else None, ref="main"),),
        )

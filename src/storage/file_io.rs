//! The iceberg crate's file I/O over this crate's storage: every location goes through a
//! [`LocationMap`] (relative or moved tables), then to the local file system or to the object
//! store of its bucket, the same store DataFusion's readers use. Local files are on the disk
//! when their writer closes (see `LocalWriter`): data files, manifests and metadata alike, so a
//! catalog never points at bytes a crash can lose.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::location::LocationMap;
use super::{locate, ObjectStores, StorageOptions};

/// Size of the parts of a multipart upload; files smaller than one part are written with a
/// single request.
const PART_SIZE: usize = 8 << 20;

/// Parts of one file uploaded at the same time.
const PARTS_IN_FLIGHT: usize = 4;

/// Storage for one catalog's or one path's tables.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableStorage {
    map: LocationMap,
    #[serde(with = "stores_serde")]
    stores: Arc<ObjectStores>,
    #[serde(skip)]
    local: LocalFsStorage,
}

/// A serialized file I/O carries its storage options; the stores are built again where it is
/// read back.
mod stores_serde {
    use super::*;

    pub fn serialize<S: Serializer>(stores: &Arc<ObjectStores>, s: S) -> Result<S::Ok, S::Error> {
        stores.options().properties().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<ObjectStores>, D::Error> {
        let props = std::collections::BTreeMap::<String, String>::deserialize(d)?;
        Ok(ObjectStores::standalone(StorageOptions::new(props)))
    }
}

fn err(what: &str, location: &str, e: impl std::fmt::Display) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::Unexpected,
        format!("{what} '{location}': {e}"),
    )
}

/// Where an operation on a location goes.
enum Target {
    /// A local path: a `file:` URL taken to its path, the one form reads and writes share.
    Local(String),
    Remote(Arc<dyn ObjectStore>, ObjectPath),
}

impl TableStorage {
    /// Storage resolving locations through `map`, with object stores from `stores`.
    pub fn new(map: LocationMap, stores: Arc<ObjectStores>) -> Self {
        Self {
            map,
            stores,
            local: LocalFsStorage::new(),
        }
    }

    fn target(&self, location: &str) -> iceberg::Result<Target> {
        let resolved = self
            .map
            .resolve(location)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
        if super::remote_scheme(&resolved).is_none() {
            return Ok(Target::Local(local_path(&resolved)));
        }
        let located = locate(&resolved)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
        let store = self
            .stores
            .store(&located.url)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
        Ok(Target::Remote(store, located.path))
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for TableStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        match self.target(path)? {
            Target::Local(p) => self.local.exists(&p).await,
            Target::Remote(store, key) => match store.head(&key).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(err("cannot check", path, e)),
            },
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        match self.target(path)? {
            Target::Local(p) => self.local.metadata(&p).await,
            Target::Remote(store, key) => {
                let meta = store
                    .head(&key)
                    .await
                    .map_err(|e| err("cannot stat", path, e))?;
                Ok(FileMetadata { size: meta.size })
            }
        }
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        match self.target(path)? {
            Target::Local(p) => self.local.read(&p).await,
            Target::Remote(store, key) => {
                let got = store
                    .get(&key)
                    .await
                    .map_err(|e| err("cannot read", path, e))?;
                got.bytes().await.map_err(|e| err("cannot read", path, e))
            }
        }
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        match self.target(path)? {
            Target::Local(p) => self.local.reader(&p).await,
            Target::Remote(store, key) => Ok(Box::new(ObjectReader {
                store,
                key,
                location: path.to_string(),
            })),
        }
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        match self.target(path)? {
            Target::Local(p) => {
                let mut file = LocalWriter::create(&p, path)?;
                file.write(bs).await?;
                file.close().await
            }
            Target::Remote(store, key) => store
                .put(&key, PutPayload::from(bs))
                .await
                .map(|_| ())
                .map_err(|e| err("cannot write", path, e)),
        }
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        match self.target(path)? {
            Target::Local(p) => Ok(Box::new(LocalWriter::create(&p, path)?)),
            Target::Remote(store, key) => Ok(Box::new(ObjectWriter {
                store,
                key,
                location: path.to_string(),
                buffered: Vec::new(),
                buffered_bytes: 0,
                upload: None,
                closed: false,
            })),
        }
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        match self.target(path)? {
            Target::Local(p) => self.local.delete(&p).await,
            Target::Remote(store, key) => match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(err("cannot delete", path, e)),
            },
        }
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        match self.target(path)? {
            Target::Local(p) => self.local.delete_prefix(&p).await,
            Target::Remote(store, key) => {
                let listed = store.list(Some(&key)).map_ok(|m| m.location).boxed();
                store
                    .delete_stream(listed)
                    .try_collect::<Vec<_>>()
                    .await
                    .map(|_| ())
                    .map_err(|e| err("cannot delete under", path, e))
            }
        }
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        // One by one, so that a location the map refuses fails the call.
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Ranged reads of one object.
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    location: String,
}

#[async_trait]
impl FileRead for ObjectReader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(|e| err("cannot read", &self.location, e))
    }
}

/// Writes one object: a single PUT when it stays under one part, a multipart upload otherwise.
struct ObjectWriter {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    location: String,
    buffered: Vec<Bytes>,
    buffered_bytes: usize,
    upload: Option<WriteMultipart>,
    closed: bool,
}

#[async_trait]
impl FileWrite for ObjectWriter {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        if self.closed {
            return Err(err("cannot write", &self.location, "the file is closed"));
        }
        if let Some(upload) = &mut self.upload {
            upload
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| err("cannot write", &self.location, e))?;
            upload.put(bs);
            return Ok(());
        }
        self.buffered_bytes += bs.len();
        self.buffered.push(bs);
        if self.buffered_bytes >= PART_SIZE {
            let started = self
                .store
                .put_multipart(&self.key)
                .await
                .map_err(|e| err("cannot start writing", &self.location, e))?;
            let mut upload = WriteMultipart::new_with_chunk_size(started, PART_SIZE);
            for b in self.buffered.drain(..) {
                upload.put(b);
            }
            self.buffered_bytes = 0;
            self.upload = Some(upload);
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        if self.closed {
            return Err(err(
                "cannot close",
                &self.location,
                "the file is closed already",
            ));
        }
        self.closed = true;
        match self.upload.take() {
            Some(upload) => upload.finish().await.map(|_| ()),
            None => {
                let payload: PutPayload = self.buffered.drain(..).collect();
                self.store.put(&self.key, payload).await.map(|_| ())
            }
        }
        .map_err(|e| err("cannot write", &self.location, e))
    }
}

/// The local path of a location: `file:///abs`, `file:/abs` and `file://abs` are `/abs`;
/// anything else is a path already.
fn local_path(location: &str) -> String {
    match location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
    {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        Some(rest) => format!("/{rest}"),
        None => location.to_string(),
    }
}

/// Bytes written to a local file after which their write-back to the disk is started.
const WRITE_BACK_BYTES: u64 = 4 << 20;

/// Writes one local file, durably: `close` returns once the file is on the disk (`fsync`), so
/// a commit never points at bytes a crash can lose. The write-back of a large file is started
/// as its bytes arrive, a few MiB at a time, so that the final `fsync` waits for little more
/// than the last of them; the `fsync` itself runs off the async workers.
struct LocalWriter {
    file: Option<std::fs::File>,
    location: String,
    written: u64,
    /// Bytes whose write-back has been started.
    started: u64,
}

impl LocalWriter {
    /// Creates (or truncates) the file at the local `path`, and its directories; errors name
    /// `location`, as the caller gave it.
    fn create(path: &str, location: &str) -> iceberg::Result<Self> {
        let path = std::path::Path::new(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| err("cannot create the directory of", location, e))?;
        }
        let file = std::fs::File::create(path).map_err(|e| err("cannot create", location, e))?;
        Ok(Self {
            file: Some(file),
            location: location.to_string(),
            written: 0,
            started: 0,
        })
    }
}

/// Starts writing `len` bytes of `file` from `offset` back to the disk, without waiting.
#[cfg(target_os = "linux")]
fn start_write_back(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: the descriptor is open for as long as `file` is borrowed; the call reads no
    // memory of this process.
    let done = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere the final `fsync` writes everything.
#[cfg(not(target_os = "linux"))]
fn start_write_back(_file: &std::fs::File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Ok(())
}

#[async_trait]
impl FileWrite for LocalWriter {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        use std::io::Write;
        let Some(file) = self.file.as_mut() else {
            return Err(err("cannot write", &self.location, "the file is closed"));
        };
        file.write_all(&bs)
            .map_err(|e| err("cannot write", &self.location, e))?;
        self.written += bs.len() as u64;
        if self.written - self.started >= WRITE_BACK_BYTES {
            start_write_back(file, self.started, self.written - self.started)
                .map_err(|e| err("cannot write", &self.location, e))?;
            self.started = self.written;
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let Some(file) = self.file.take() else {
            return Err(err(
                "cannot close",
                &self.location,
                "the file is closed already",
            ));
        };
        tokio::task::spawn_blocking(move || file.sync_all())
            .await
            .map_err(|e| err("cannot write", &self.location, e))?
            .map_err(|e| err("cannot write", &self.location, e))
    }
}

/// Builds [`TableStorage`] for a file I/O.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableStorageFactory {
    storage: TableStorage,
}

#[typetag::serde]
impl StorageFactory for TableStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

/// File I/O over `stores`, resolving locations through `map`.
pub(crate) fn table_file_io(map: &LocationMap, stores: &Arc<ObjectStores>) -> FileIO {
    FileIOBuilder::new(Arc::new(TableStorageFactory {
        storage: TableStorage::new(map.clone(), Arc::clone(stores)),
    }))
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageOptions;

    fn local_io() -> FileIO {
        let options = StorageOptions::new(Vec::<(String, String)>::new());
        table_file_io(&LocationMap::default(), &ObjectStores::standalone(options))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_files_are_written_whole_in_every_location_form() {
        let dir = tempfile::tempdir().unwrap();
        let io = local_io();
        // Streamed in uneven pieces, past several write-back steps, into new directories.
        let streamed = dir.path().join("a/b/data.bin");
        let mut writer = io
            .new_output(format!("file://{}", streamed.display()))
            .unwrap()
            .writer()
            .await
            .unwrap();
        let mut want = vec![];
        for i in 0..7u8 {
            let piece = vec![i; 1_500_000 + usize::from(i)];
            want.extend_from_slice(&piece);
            writer.write(Bytes::from(piece)).await.unwrap();
        }
        writer.close().await.unwrap();
        assert_eq!(std::fs::read(&streamed).unwrap(), want);
        // A closed file takes nothing more.
        let again = writer.write(Bytes::from_static(b"more")).await.unwrap_err();
        assert!(again.to_string().contains("closed"), "{again}");
        assert!(writer.close().await.is_err());
        assert_eq!(std::fs::read(&streamed).unwrap().len(), want.len());

        // Whole files, by a plain path and by `file:/`, replacing what was there.
        let whole = dir.path().join("c/metadata.json");
        for (location, bytes) in [
            (whole.display().to_string(), &b"first, longer"[..]),
            (format!("file:{}", whole.display()), &b"second"[..]),
        ] {
            io.new_output(&location)
                .unwrap()
                .write(Bytes::copy_from_slice(bytes))
                .await
                .unwrap();
            let read = io.new_input(&location).unwrap().read().await.unwrap();
            assert_eq!(read.as_ref(), bytes);
        }
        assert_eq!(std::fs::read(&whole).unwrap(), b"second");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_local_file_that_cannot_be_created_is_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), b"a file, not a directory").unwrap();
        let location = dir.path().join("plain/under/f.avro").display().to_string();
        let e = local_io()
            .new_output(&location)
            .unwrap()
            .write(Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        let message = e.to_string();
        assert!(message.contains(&location), "{message}");
        assert!(!message.contains('\n'), "{message}");
        assert_eq!(
            std::fs::read(dir.path().join("plain")).unwrap(),
            b"a file, not a directory"
        );
    }
}

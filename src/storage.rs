//! File I/O for tables whose recorded locations are relative or moved: an iceberg `Storage` that
//! rewrites every path through a [`LocationMap`] before the local file system sees it.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use serde::{Deserialize, Serialize};

use crate::location::LocationMap;

/// Local storage behind a location map.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MappedStorage {
    map: LocationMap,
    inner: LocalFsStorage,
}

impl MappedStorage {
    fn path(&self, path: &str) -> iceberg::Result<String> {
        self.map
            .resolve(path)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for MappedStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.inner.exists(&self.path(path)?).await
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.inner.metadata(&self.path(path)?).await
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.inner.read(&self.path(path)?).await
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.inner.reader(&self.path(path)?).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.inner.write(&self.path(path)?, bs).await
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.inner.writer(&self.path(path)?).await
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.inner.delete(&self.path(path)?).await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.inner.delete_prefix(&self.path(path)?).await
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        // One by one, so that a location the map refuses fails the call.
        while let Some(path) = paths.next().await {
            self.inner.delete(&self.path(&path)?).await?;
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

/// Builds [`MappedStorage`] for a file I/O.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MappedStorageFactory {
    map: LocationMap,
}

#[typetag::serde]
impl StorageFactory for MappedStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(MappedStorage {
            map: self.map.clone(),
            inner: LocalFsStorage::new(),
        }))
    }
}

/// File I/O that resolves locations through `map` (plain local I/O for the identity map).
pub(crate) fn file_io_for(map: &LocationMap) -> FileIO {
    if map.is_identity() {
        FileIO::new_with_fs()
    } else {
        FileIOBuilder::new(Arc::new(MappedStorageFactory { map: map.clone() })).build()
    }
}

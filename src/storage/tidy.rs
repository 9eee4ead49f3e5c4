//! An object store whose errors are one line: S3-compatible servers answer failures with an XML
//! document (`<Error><Code>SignatureDoesNotMatch</Code><Message>...`), which object_store puts
//! into its error as it came. Every store the catalog builds is wrapped in [`TidyStore`], so
//! that the errors DataFusion's readers and the file I/O report say the code and message on one
//! line.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// A store that reports errors on one line.
#[derive(Debug)]
pub(crate) struct TidyStore {
    inner: Arc<dyn ObjectStore>,
}

impl TidyStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }
}

impl std::fmt::Display for TidyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// The text of `source` (and its causes) on one line, an XML error document reduced to its
/// code and message.
fn one_line(source: &(dyn std::error::Error + 'static)) -> String {
    let mut text = source.to_string();
    let mut cause = source.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    if let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) {
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let close = format!("</{name}>");
            let from = text[start..].find(&open)? + start + open.len();
            let to = text[from..].find(&close)? + from;
            Some(text[from..to].to_string())
        };
        let summary = match (tag("Code"), tag("Message")) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c,
            (None, Some(m)) => m,
            (None, None) => String::new(),
        };
        text = format!("{}{summary}", &text[..start]);
    }
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(400) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// The one-line form of an error's cause.
#[derive(Debug)]
struct Line(String);

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Line {}

/// `e` with its cause on one line (same kind, same path).
fn tidy(e: object_store::Error) -> object_store::Error {
    use object_store::Error as E;
    let line = |source: Box<dyn std::error::Error + Send + Sync>| -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(Line(one_line(source.as_ref())))
    };
    match e {
        E::Generic { store, source } => E::Generic {
            store,
            source: line(source),
        },
        E::NotFound { path, source } => E::NotFound {
            path,
            source: line(source),
        },
        E::NotSupported { source } => E::NotSupported {
            source: line(source),
        },
        E::AlreadyExists { path, source } => E::AlreadyExists {
            path,
            source: line(source),
        },
        E::Precondition { path, source } => E::Precondition {
            path,
            source: line(source),
        },
        E::NotModified { path, source } => E::NotModified {
            path,
            source: line(source),
        },
        E::PermissionDenied { path, source } => E::PermissionDenied {
            path,
            source: line(source),
        },
        E::Unauthenticated { path, source } => E::Unauthenticated {
            path,
            source: line(source),
        },
        other => other,
    }
}

#[async_trait]
impl ObjectStore for TidyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner
            .put_opts(location, payload, opts)
            .await
            .map_err(tidy)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self
            .inner
            .put_multipart_opts(location, opts)
            .await
            .map_err(tidy)?;
        Ok(Box::new(TidyUpload { inner: upload }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut got = self.inner.get_opts(location, options).await.map_err(tidy)?;
        got.payload = match got.payload {
            GetResultPayload::Stream(s) => GetResultPayload::Stream(s.map_err(tidy).boxed()),
            file => file,
        };
        Ok(got)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await.map_err(tidy)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations).map_err(tidy).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix).map_err(tidy).boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner
            .list_with_offset(prefix, offset)
            .map_err(tidy)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await.map_err(tidy)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await.map_err(tidy)
    }
}

/// A multipart upload whose errors are one line.
#[derive(Debug)]
struct TidyUpload {
    inner: Box<dyn MultipartUpload>,
}

#[async_trait]
impl MultipartUpload for TidyUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        let part = self.inner.put_part(data);
        Box::pin(async move { part.await.map_err(tidy) })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.inner.complete().await.map_err(tidy)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await.map_err(tidy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_error_documents_become_their_code_and_message() {
        let e = Line(
            "403 Forbidden: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>\
             <Message>The request signature does not match.</Message><Key>a/b</Key></Error>"
                .into(),
        );
        assert_eq!(
            one_line(&e),
            "403 Forbidden: SignatureDoesNotMatch: The request signature does not match."
        );
        assert_eq!(one_line(&Line("a\n  b\tc".into())), "a b c");
    }
}

//! One group of files rewritten: read with their deletes applied, written again.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::StreamExt;
use iceberg::spec::DataContentType;
use iceberg::table::Table;

use super::groups::FileGroup;
use super::sort::sort_of;
use crate::commit::MetadataStore;
use crate::commit::NewFile;
use crate::file_planning::{DeleteFileRef, ScanFiles};
use crate::maintenance::options::RewriteStrategy;
use crate::maintenance::zorder::ZOrderOptions;
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::optimized;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::plan::plan_statement_scan;
use crate::physical_plan::scan::request::ScanRequest;
use crate::physical_plan::scan::schema::{arrow_schema, with_dictionaries, with_plain_strings};
use crate::physical_plan::write::{
    decode_data_files, plain_columns_of, DataFileWriterExec, WrittenFiles,
};
use crate::storage::location::LocationMap;

/// What rewriting one group needs, owned (groups run concurrently).
pub(super) struct GroupRewriter {
    pub(super) store: Arc<dyn MetadataStore>,
    pub(super) table: Table,
    pub(super) strategy: RewriteStrategy,
    pub(super) zorder: ZOrderOptions,
    pub(super) target_file_size: u64,
    pub(super) equality_deletes: Vec<Arc<DeleteFileRef>>,
    pub(super) streamed: bool,
    pub(super) state: SessionState,
}

impl GroupRewriter {
    /// The plan that rewrites one group: its live rows (deletes applied, row lineage carried on
    /// v3) written into new files of the target size.
    pub(super) async fn group_plan(
        &self,
        group: &FileGroup,
        counts: Arc<ChangeCounts>,
        written: WrittenFiles,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let metadata = self.table.metadata();
        let lineage = lineage::has_row_lineage(metadata);
        let read_schema = lineage::rows_schema(metadata)?;
        let locations = LocationMap::default();
        // How the files' columns fared with dictionaries: those that overflowed are written
        // plain, those that held are read as the files' dictionaries.
        let dictionaries = plain_columns_of(
            &self.state.task_ctx(),
            self.store.object_stores(),
            &locations,
            metadata.location(),
            &group.files,
        )
        .await?;
        // Strings decoded as the writer encodes them: no views to cast, and the columns whose
        // dictionaries held as dictionaries (see `dictionary_columns`).
        let schema = with_dictionaries(
            &with_plain_strings(&arrow_schema(&read_schema)?),
            &read_schema,
            &self.dictionary_columns(&dictionaries.kept),
        );
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &schema,
            projection: None,
            filtered: false,
            limit: None,
            locations: &locations,
            stores: self.store.object_stores(),
            file_column: false,
            position_column: false,
            row_lineage: lineage,
            file_metadata: None,
        };
        let files = ScanFiles {
            files: group.files.clone(),
            equality_deletes: self.equality_deletes.clone(),
            streamed: self.streamed,
            columns: None,
        };
        let scan = plan_statement_scan(&self.state, &req, &files).await?;
        // Counts the live rows (the condition selects none: every row passes).
        let rows: Arc<dyn ExecutionPlan> = Arc::new(ChangeRowsExec::try_new(
            scan,
            datafusion::physical_plan::expressions::lit(false),
            RowChange::Delete,
            counts,
        )?);
        let sort = sort_of(&self.table, &self.strategy, &rows.schema(), self.zorder)?;
        // One writer per group: its files fill up to the target size.
        let writer = DataFileWriterExec::try_new(rows, self.table.clone(), sort, written)?
            .with_row_lineage(lineage)?
            .with_target_file_size(self.target_file_size as usize)
            .with_plain_columns(dictionaries.plain)
            .with_single_writer();
        optimized(&self.state, Arc::new(writer))
    }

    /// Of the columns (field ids) whose dictionaries held in the files, those a bin-pack reads
    /// as dictionaries: any but the partition sources (the writer computes partition values
    /// from them) and equality-delete keys (looked up by value). A sort reads values.
    pub(super) fn dictionary_columns(&self, kept: &[i32]) -> Vec<i32> {
        if !matches!(self.strategy, RewriteStrategy::BinPack) {
            return vec![];
        }
        let metadata = self.table.metadata();
        let sources: Vec<i32> = metadata
            .partition_specs_iter()
            .flat_map(|spec| spec.fields().iter().map(|f| f.source_id))
            .collect();
        kept.iter()
            .copied()
            .filter(|id| !sources.contains(id))
            .filter(|id| {
                !self
                    .equality_deletes
                    .iter()
                    .any(|d| d.equality_ids.contains(id))
            })
            .collect()
    }

    /// Rewrites one group: the files it wrote and the rows they hold.
    pub(super) async fn rewrite(
        &self,
        group: &FileGroup,
        written: WrittenFiles,
    ) -> Result<(Vec<NewFile>, u64)> {
        let counts = Arc::new(ChangeCounts::default());
        let plan = self.group_plan(group, Arc::clone(&counts), written).await?;
        let mut stream = execute_stream(plan, self.state.task_ctx())?;
        let mut added = vec![];
        while let Some(batch) = stream.next().await {
            added.extend(decode_data_files(&batch?, self.table.metadata())?);
        }
        // Self-check: every live row read is written, and no more rows than the files hold.
        let (read, _) = counts.get();
        let rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
        let stored: u64 = group.files.iter().map(|f| f.record_count).sum();
        if rows != read || read > stored {
            return Err(DataFusionError::Execution(format!(
                "rewrite_data_files on table '{}' does not add up: read {read} live rows of \
                 {stored}, wrote {rows}",
                self.table.identifier()
            )));
        }
        if added
            .iter()
            .any(|f| f.file.content_type() != DataContentType::Data)
        {
            return Err(DataFusionError::Internal(
                "the rewrite wrote a delete file".into(),
            ));
        }
        Ok((added, rows))
    }
}

//! Which files a rewrite takes and how they are packed into groups, per partition.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::Struct;

use crate::file_planning::{DeleteFileRef, PlannedFile, ScanFiles};
use crate::maintenance::options::RewriteOptions;

/// Data files of one partition rewritten together.
#[derive(Debug, Clone)]
pub(super) struct FileGroup {
    pub(super) files: Vec<PlannedFile>,
}

impl FileGroup {
    pub(super) fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Delete files that apply to `f`, and the share of its rows they are known to delete.
pub(super) fn delete_load(f: &PlannedFile, equality: &[Arc<DeleteFileRef>]) -> (usize, f64) {
    let eq = equality.iter().filter(|d| d.may_apply_to(f)).count();
    let known: u64 = f
        .position_deletes
        .iter()
        .filter(|d| d.referenced_data_file.as_deref() == Some(f.path.as_str()))
        .map(|d| d.record_count)
        .sum();
    let ratio = match f.record_count {
        0 => 0.0,
        n => known.min(n) as f64 / n as f64,
    };
    (f.position_deletes.len() + eq, ratio)
}

/// `files` packed next-fit into groups of at most `limit` bytes (a larger file goes alone).
pub(super) fn pack(files: Vec<PlannedFile>, limit: u64) -> Vec<FileGroup> {
    let mut out = vec![];
    let mut current = FileGroup { files: vec![] };
    for f in files {
        if !current.files.is_empty() && current.bytes() + f.size > limit {
            out.push(std::mem::replace(&mut current, FileGroup { files: vec![] }));
        }
        current.files.push(f);
    }
    if !current.files.is_empty() {
        out.push(current);
    }
    out
}

/// Spark's bin-pack selection: candidate files, packed per partition, groups worth rewriting.
pub(super) fn choose_groups(options: &RewriteOptions, scan: &ScanFiles) -> Vec<FileGroup> {
    let delete_issue = |f: &PlannedFile| {
        let (count, ratio) = delete_load(f, &scan.equality_deletes);
        count >= options.delete_file_threshold || ratio >= options.delete_ratio_threshold
    };
    let mut partitions: Vec<((i32, Struct), Vec<PlannedFile>)> = vec![];
    let mut index: HashMap<(i32, Struct), usize> = HashMap::new();
    for f in &scan.files {
        let candidate = options.rewrite_all
            || f.size < options.min_file_size
            || f.size > options.max_file_size
            || delete_issue(f);
        if !candidate {
            continue;
        }
        let key = (f.spec_id, f.partition.clone());
        let i = *index.entry(key.clone()).or_insert_with(|| {
            partitions.push((key, vec![]));
            partitions.len() - 1
        });
        partitions[i].1.push(f.clone());
    }
    let mut groups: Vec<FileGroup> = partitions
        .into_iter()
        .flat_map(|(_, files)| pack(files, options.max_file_group_size))
        .collect();
    groups.retain(|g| {
        let n = g.files.len();
        options.rewrite_all
            || (n > 1 && n >= options.min_input_files)
            || (n > 1 && g.bytes() > options.target_file_size)
            || g.bytes() > options.max_file_size
            || g.files.iter().any(delete_issue)
    });
    groups
}

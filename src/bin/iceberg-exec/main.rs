//! The `iceberg-exec` command line: SQL on an Iceberg warehouse, an interactive shell, a demo.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::sql::parser::DFParser;
use futures::StreamExt;
use iceberg_exec::{parse_size, IcebergSession, WarehouseConfig};

mod demo;

#[derive(Parser, Debug)]
#[command(
    name = "iceberg-exec",
    version,
    about = "SQL on Apache Iceberg tables, powered by Apache DataFusion"
)]
struct Cli {
    /// Where tables go: a directory (holds the default SQLite catalog; default ./warehouse) or
    /// an object-store URI such as s3://bucket/prefix (then give --catalog-uri too). For a REST
    /// catalog: its warehouse name or location.
    #[arg(long, global = true)]
    warehouse: Option<String>,
    /// The catalog: a database URI (default: SQLite file <warehouse>/catalog.db; SQLAlchemy forms
    /// work: sqlite:////abs/path/catalog.db, sqlite:///relative.db, postgresql://user@host/db), or
    /// an Iceberg REST catalog's http(s):// URI.
    #[arg(long, global = true)]
    catalog_uri: Option<String>,
    /// Catalog name (the catalog_name column of the catalog tables).
    #[arg(long, global = true, default_value = "default")]
    catalog_name: String,
    /// A catalog configured for pyiceberg (.pyiceberg.yaml in $PYICEBERG_HOME or ~, and
    /// PYICEBERG_CATALOG__<NAME>__<KEY> variables): its uri picks a REST (http(s)://) or SQL
    /// (sqlite://, postgresql://) catalog; --catalog-prop and --catalog-uri override it. Its
    /// `execution: memory-limit` applies unless --memory-limit is given.
    #[arg(long, global = true, value_name = "NAME")]
    catalog: Option<String>,
    /// A catalog property, e.g. s3.endpoint=http://127.0.0.1:9000 or s3.region=eu-west-1
    /// (repeatable; storage settings use Iceberg's property names).
    #[arg(long = "catalog-prop", global = true, value_name = "KEY=VALUE", value_parser = parse_prop)]
    catalog_props: Vec<(String, String)>,
    /// Memory limit for query execution, e.g. 64MiB, 1GiB or bytes (default: unlimited).
    #[arg(long, global = true)]
    memory_limit: Option<String>,
    /// Output format of query results.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Run the statements over these workers (`iceberg-exec worker`), comma-separated URLs such
    /// as http://127.0.0.1:50051,http://127.0.0.1:50052.
    #[cfg(feature = "distributed")]
    #[arg(long, global = true, value_delimiter = ',', value_name = "URL,...")]
    workers: Vec<url::Url>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run SQL statements separated by ';' (without statements: an interactive shell).
    Sql {
        /// The statements, e.g. "CREATE SCHEMA ns; SELECT 1".
        statements: Option<String>,
    },
    /// A tour of the engine on a sample table: deletes other engines write, merge-on-read
    /// DELETE/UPDATE, MERGE, time travel, and plans under a small memory limit.
    Demo {
        /// Rows in the sample table.
        #[arg(long, default_value_t = 3_000_000)]
        rows: u64,
    },
    /// Serve as a worker of distributed queries (the catalog and storage options say where
    /// tables are read; --memory-limit bounds the worker's tasks). Prints its URL, then serves
    /// until stopped.
    #[cfg(feature = "distributed")]
    Worker {
        /// Address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:50051")]
        listen: std::net::SocketAddr,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned text table.
    Table,
    /// Header line, then one line per row.
    Csv,
    /// One JSON object per row.
    Json,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("{first} (see iceberg-exec --help)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The warehouse and catalog the options name.
fn warehouse_config(cli: &Cli, memory_limit: Option<usize>) -> Result<WarehouseConfig> {
    WarehouseConfig::resolve(
        &iceberg_exec::CatalogChoice {
            pyiceberg: cli.catalog.clone(),
            catalog_name: Some(cli.catalog_name.clone()),
            uri: cli.catalog_uri.clone(),
            warehouse: cli.warehouse.clone(),
            properties: cli.catalog_props.clone(),
        },
        memory_limit,
    )
}

/// A `KEY=VALUE` property.
fn parse_prop(text: &str) -> std::result::Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!(
            "expected KEY=VALUE, got '{}'",
            text.split('=').next().unwrap_or_default()
        )),
    }
}

/// An error as a single line (causes joined).
fn one_line(e: &DataFusionError) -> String {
    let text = e.to_string();
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}

async fn run(cli: Cli) -> Result<()> {
    let mut memory_limit = cli.memory_limit.as_deref().map(parse_size).transpose()?;
    // A catalog of pyiceberg's configuration brings its `execution: memory-limit` along.
    if memory_limit.is_none() && cli.catalog.is_some() {
        memory_limit = iceberg_exec::catalog::pyiceberg_execution()?
            .get("memory-limit")
            .map(|v| parse_size(v))
            .transpose()?;
    }
    let config = warehouse_config(&cli, memory_limit)?;
    let session = IcebergSession::open(config).await?;
    #[cfg(feature = "distributed")]
    let session = match cli.workers.is_empty() {
        true => session,
        false => session.with_workers(cli.workers.clone()),
    };
    show_progress(&session);
    match cli.command {
        Some(Command::Sql {
            statements: Some(sql),
        }) => run_statements(&session, &sql, cli.format).await,
        Some(Command::Sql { statements: None }) | None => shell(&session, cli.format).await,
        Some(Command::Demo { rows }) => demo::tour(&session, rows).await,
        #[cfg(feature = "distributed")]
        Some(Command::Worker { listen }) => serve_worker(&session, listen).await,
    }
}

/// `worker`: serves distributed tasks over the session's object stores and memory pool;
/// prints its URL, then serves until the process is stopped.
#[cfg(feature = "distributed")]
async fn serve_worker(session: &IcebergSession, listen: std::net::SocketAddr) -> Result<()> {
    let worker = iceberg_exec::distributed::worker(session.context().runtime_env());
    let (url, server) = iceberg_exec::distributed::serve_worker(worker, listen).await?;
    println!("listening on {url}");
    std::io::stdout().flush()?;
    server
        .await
        .map_err(|e| DataFusionError::Execution(format!("worker stopped: {e}")))?
}

/// On a terminal, long maintenance runs (`CALL system.rewrite_data_files`) draw a progress bar
/// on stderr.
fn show_progress(session: &IcebergSession) {
    use std::io::{IsTerminal, Write};
    if !std::io::stderr().is_terminal() {
        return;
    }
    let progress = iceberg_exec::maintenance::MaintenanceProgress::new(|e| {
        const WIDTH: u64 = 30;
        let filled = (e.done * WIDTH).checked_div(e.total).unwrap_or(WIDTH);
        let bar = format!(
            "{}{}",
            "#".repeat(filled as usize),
            "-".repeat((WIDTH - filled.min(WIDTH)) as usize)
        );
        // A bar that cannot be drawn (stderr closed) is no reason to stop the statement.
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r{} [{bar}] {}/{} {}",
            e.procedure, e.done, e.total, e.unit
        );
        if e.done >= e.total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    });
    session
        .context()
        .state_ref()
        .write()
        .config_mut()
        .set_extension(std::sync::Arc::new(progress));
}

/// Runs each statement of `sql` in order, printing each result.
async fn run_statements(session: &IcebergSession, sql: &str, format: Format) -> Result<()> {
    let ctx = session.context();
    let statements = iceberg_exec::table::split_statements(sql);
    if statements.is_empty() {
        return Err(DataFusionError::Plan("no SQL statement given".into()));
    }
    for text in statements {
        // Statements DataFusion does not plan (ALTER TABLE, CALL, ...) run in the session's own
        // entry point.
        let df = match iceberg_exec::table::is_session_statement(&text) {
            true => session.sql(&text).await?,
            false => {
                let mut parsed = DFParser::parse_sql(&text)?;
                let statement = match (parsed.pop_front(), parsed.is_empty()) {
                    (Some(statement), true) => statement,
                    _ => {
                        return Err(DataFusionError::Plan(format!(
                            "expected one statement: {text}"
                        )))
                    }
                };
                let plan = ctx.state().statement_to_plan(statement).await?;
                ctx.execute_logical_plan(plan).await?
            }
        };
        let schema = df.schema().inner().clone();
        match format {
            // The aligned table needs every row for its widths.
            Format::Table => {
                let batches = df.collect().await?;
                print_batches(&schema, &batches, format)?;
            }
            // Rows go out as they come: a long result (the orphans of a removal, a big SELECT)
            // never waits in memory.
            Format::Csv | Format::Json => {
                let mut stream = df.execute_stream().await?;
                let mut first = true;
                while let Some(batch) = stream.next().await {
                    print_batch(&schema, &batch?, format, first)?;
                    first = false;
                }
                if first {
                    print_batch(
                        &schema,
                        &RecordBatch::new_empty(schema.clone()),
                        format,
                        true,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Prints a whole result: the aligned table, CSV with one header, or JSON lines.
pub(crate) fn print_batches(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    format: Format,
) -> Result<()> {
    if batches.is_empty() {
        return print_batch(
            schema,
            &RecordBatch::new_empty(schema.clone()),
            format,
            true,
        );
    }
    if format == Format::Table {
        return print_table(schema, batches);
    }
    for (i, batch) in batches.iter().enumerate() {
        print_batch(schema, batch, format, i == 0)?;
    }
    Ok(())
}

/// Prints one batch of a result: CSV (with the header when `first`), JSON lines, or a table of
/// its own.
fn print_batch(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batch: &RecordBatch,
    format: Format,
    first: bool,
) -> Result<()> {
    if schema.fields().is_empty() {
        return Ok(()); // DDL
    }
    match format {
        Format::Table => print_table(schema, std::slice::from_ref(batch))?,
        Format::Csv => {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(first)
                .build(std::io::stdout().lock());
            w.write(&nested_as_text(batch)?)?;
        }
        Format::Json => {
            let mut w = datafusion::arrow::json::LineDelimitedWriter::new(std::io::stdout().lock());
            w.write(&uuids_as_text(batch)?)?;
            w.finish()?;
        }
    }
    Ok(())
}

/// Prints batches as one aligned table, or the columns and "0 rows" when there are none.
fn print_table(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    if schema.fields().is_empty() {
        return Ok(()); // DDL
    }
    let batches = batches
        .iter()
        .map(nested_as_text)
        .collect::<Result<Vec<_>>>()?;
    let mut out = std::io::stdout().lock();
    if batches.iter().all(|b| b.num_rows() == 0) {
        let header: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        writeln!(out, "({}) 0 rows", header.join(", "))?;
    } else {
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?;
        writeln!(out, "{text}")?;
    }
    Ok(())
}

/// `batch` with its nested columns (struct, list, map, union) rendered as text the way
/// DataFusion's CLI shows them — `{a: 1, b: x}`, `[1, 2]`, `{k: v}`, NULL inside as `NULL` —
/// for the outputs that have no nested form (the aligned table and CSV), and its uuids (at any
/// depth) as their `8-4-4-4-12` text. A NULL value itself stays NULL.
fn nested_as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    as_text(batch, |f| {
        f.data_type().is_nested() || iceberg_exec::is_uuid(f)
    })
}

/// `batch` with its top-level uuids as their `8-4-4-4-12` text (JSON keeps nested values).
fn uuids_as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    as_text(batch, iceberg_exec::is_uuid)
}

/// `batch` with the columns `render` picks as text, extension types by their own formatters.
fn as_text(
    batch: &RecordBatch,
    render: impl Fn(&datafusion::arrow::datatypes::Field) -> bool,
) -> Result<RecordBatch> {
    use datafusion::arrow::array::{Array, ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::display::{ArrayFormatter, ArrayFormatterFactory, FormatOptions};
    use datafusion::logical_expr::extension_types::DFArrayFormatterFactory;
    use datafusion::logical_expr::registry::MemoryExtensionTypeRegistry;
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| render(f)) {
        return Ok(batch.clone());
    }
    let factory = DFArrayFormatterFactory::new(Arc::new(
        MemoryExtensionTypeRegistry::new_with_canonical_extension_types(),
    ));
    let options = FormatOptions::default()
        .with_null("NULL")
        .with_formatter_factory(Some(&factory));
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !render(field) {
            fields.push(Arc::clone(field));
            columns.push(Arc::clone(column));
            continue;
        }
        let formatter = match factory.create_array_formatter(
            column.as_ref(),
            &options,
            Some(field.as_ref()),
        )? {
            Some(f) => f,
            None => ArrayFormatter::try_new(column.as_ref(), &options)?,
        };
        let text: StringArray = (0..column.len())
            .map(|i| (!column.is_null(i)).then(|| formatter.value(i).to_string()))
            .collect();
        fields.push(Arc::new(Field::new(
            field.name(),
            datafusion::arrow::datatypes::DataType::Utf8,
            true,
        )));
        columns.push(Arc::new(text));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// An interactive shell: statements end with ';'. History is kept in ~/.iceberg_exec_history.
async fn shell(session: &IcebergSession, format: Format) -> Result<()> {
    use rustyline::error::ReadlineError;
    let mut editor = rustyline::DefaultEditor::new()
        .map_err(|e| DataFusionError::Execution(format!("cannot open the shell: {e}")))?;
    let history =
        std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".iceberg_exec_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    println!(
        "iceberg-exec {} — end statements with ';', \\q to quit",
        env!("CARGO_PKG_VERSION")
    );
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "iceberg> "
        } else {
            "     ..> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if buffer.is_empty() && matches!(trimmed, "\\q" | "quit" | "exit") {
                    break;
                }
                buffer.push_str(&line);
                buffer.push('\n');
                if trimmed.ends_with(';') {
                    let sql = std::mem::take(&mut buffer);
                    let _ = editor.add_history_entry(sql.trim());
                    let started = Instant::now();
                    match run_statements(session, &sql, format).await {
                        Ok(()) => println!("({:.3}s)", started.elapsed().as_secs_f64()),
                        Err(e) => eprintln!("error: {}", one_line(&e)),
                    }
                }
            }
            Err(ReadlineError::Interrupted) => buffer.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(DataFusionError::Execution(format!("shell: {e}"))),
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}

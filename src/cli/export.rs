//! `tensorlift export`: write a self-contained operator library (`tensorlift::export`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Subcommand;
use tensorlift::IsaLevel;
use tensorlift::export::{
    ExportOptions, Library, ModelExport, Operator, export, export_model as export_model_to, operators,
};
use tensorlift::record::pretuned;

use super::common::{Format, WeightsChoice, user_records};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<ExportCommand>,
    /// A quantized ONNX model (QDQ or QOperator) exported whole as NAME_run(args, nargs): the
    /// graph's inputs, then its outputs (docs/export.md, "Exporting a model").
    model: Option<PathBuf>,
    /// Tuning database whose best records for this CPU give the compiled layers' schedules, as
    /// `tensorlift run --db` (the repository's pre-tuned records apply where it has none).
    #[arg(long)]
    db: Option<PathBuf>,
    #[command(flatten)]
    common: Option<ExportArgs>,
}

#[derive(Subcommand)]
enum ExportCommand {
    /// `matmul`: a tensorized u8 × i8 → i32 matmul on plain `A: u8[M,K]`, `B: i8[K,N]`,
    /// `C: i32[M,N]` of any sizes of at least 1 (B is packed inside the call, zero-padded to
    /// whole panels; A is copied with zeros where K is not a multiple of 4).
    Matmul {
        #[arg(long)]
        m: i64,
        #[arg(long)]
        n: i64,
        #[arg(long)]
        k: i64,
        #[command(flatten)]
        common: ExportArgs,
    },
    /// Every resnet-18 int8 layer (R1..R11, FC; NHWC, u8 output) as `<layer>` with its weight
    /// preparation `<layer>_prepare`.
    Resnet18 {
        /// The weights' range the library accepts: `full` ([-127, 127]) or `7bit` ([-64, 63]).
        #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
        weights: WeightsChoice,
        /// Take each layer's schedule from the best record of this tuning database for this CPU
        /// (`tune resnet18 --db`); the manifest carries the record. Default: `default_knobs`.
        /// The database must be whole: a missing file, a line that is not a tuning record, or a
        /// measured record whose knobs no schedule accepts is an error naming the file and line
        /// (nothing is exported).
        #[arg(long)]
        db: Option<PathBuf>,
        #[command(flatten)]
        common: ExportArgs,
    },
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Directory for lib<NAME>.so, lib<NAME>.a and <NAME>.h (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Library name: file names and the prefix of every symbol (a C identifier).
    #[arg(long)]
    name: Option<String>,
    /// Comma-separated ISA levels to compile (scalar, avx2, avx-vnni, avx512-vnni); calls run
    /// the best one the CPU supports. Default: every level.
    #[arg(long, value_delimiter = ',')]
    isa: Option<Vec<String>>,
    /// A model's thread counts, comma-separated: the network is scheduled for each, and a call
    /// runs the schedules of the largest one within the library's pool (TENSORLIFT_NUM_THREADS).
    /// Default: 1 and this machine's cores.
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

fn levels(args: &ExportArgs) -> Result<Vec<IsaLevel>, Box<dyn std::error::Error>> {
    match &args.isa {
        None => Ok(IsaLevel::ALL.to_vec()),
        Some(names) => Ok(names.iter().map(|n| IsaLevel::from_name(n.trim())).collect::<Result<_, _>>()?),
    }
}

pub fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let what = match (args.what, args.model, args.common) {
        (Some(what), _, _) => what,
        (None, Some(model), Some(common)) => return export_model(&model, args.db.as_deref(), common),
        _ => return Err("expected a model file (tensorlift export MODEL.onnx --out DIR) or a subcommand".into()),
    };
    let (ops, args, default_name): (Vec<Operator>, ExportArgs, &str) = match what {
        ExportCommand::Matmul { m, n, k, common } => {
            let levels = levels(&common)?;
            (vec![operators::matmul(m, n, k, &levels)?], common, "matmul")
        }
        ExportCommand::Resnet18 { weights, db, common } => {
            let levels = levels(&common)?;
            let bits = weights.bits();
            let records = match &db {
                Some(path) => tensorlift::record::Database::load_strict(path)?.records,
                None => Vec::new(),
            };
            let host = tensorlift::record::Host::this(IsaLevel::detect().unwrap_or(IsaLevel::Scalar));
            // The library's pool is sized where it runs: any thread count serves.
            let tuning = |layer| tensorlift::tune::record_for(&records, layer, bits, usize::MAX, &host).cloned();
            (operators::resnet18(&levels, bits, tuning)?, common, "resnet18")
        }
    };
    if args.threads.is_some() {
        return Err("--threads applies to a model (tensorlift export MODEL.onnx --threads LIST)".into());
    }
    let mut options = ExportOptions::new(args.name.as_deref().unwrap_or(default_name));
    options.levels = levels(&args)?;
    let lib = export(&ops, &options, &args.out)?;
    report(&lib, ops.len(), args.format)
}

/// `tensorlift export MODEL.onnx`: the whole network as `NAME_run`.
fn export_model(model: &Path, db: Option<&Path>, args: ExportArgs) -> Result<(), Box<dyn std::error::Error>> {
    let default_name = model.file_stem().and_then(|s| s.to_str()).unwrap_or("model").replace(['-', '.'], "_");
    let mut options = ExportOptions::new(args.name.as_deref().unwrap_or(&default_name));
    options.levels = levels(&args)?;
    let user = match db {
        Some(path) => user_records(path)?,
        None => Vec::new(),
    };
    let threads = args.threads.clone().unwrap_or_else(ModelExport::default_threads);
    let export = ModelExport { user, pretuned: pretuned()?.records, threads };
    let start = Instant::now();
    let lib = export_model_to(model, &export, &options, &args.out)?;
    let total = start.elapsed();
    for warning in &lib.warnings {
        eprintln!("warning: {warning}");
    }
    let size = std::fs::metadata(&lib.library.shared)?.len();
    match args.format {
        Format::Table => {
            report(&lib.library, 1, Format::Table)?;
            println!(
                "network     {} partitions, {:.1} MiB of prepared weights; plan {:.0} ms, export {:.0} ms in all",
                lib.library.manifest["partitions"].as_array().map_or(0, Vec::len),
                lib.weights_bytes as f64 / (1 << 20) as f64,
                lib.plan_time.as_secs_f64() * 1e3,
                total.as_secs_f64() * 1e3
            );
            println!(
                "threads     scheduled for {}; network functions per level: {}",
                lib.library.manifest["threads"], lib.library.manifest["thread_variants"]
            );
        }
        Format::Json => {
            let l = &lib.library;
            let json = serde_json::json!({
                "name": l.name,
                "shared": l.shared,
                "archive": l.archive,
                "header": l.header,
                "isa_levels": l.levels.iter().map(|l| l.name()).collect::<Vec<_>>(),
                "size_bytes": size,
                "weights_bytes": lib.weights_bytes,
                "threads": l.manifest["threads"],
                "thread_variants": l.manifest["thread_variants"],
                "plan_ms": lib.plan_time.as_secs_f64() * 1e3,
                "codegen_ms": l.codegen_time.as_secs_f64() * 1e3,
                "link_ms": l.link_time.as_secs_f64() * 1e3,
                "export_ms": total.as_secs_f64() * 1e3,
                "warnings": lib.warnings,
            });
            println!("{json}");
        }
    }
    Ok(())
}

fn report(lib: &Library, operators: usize, format: Format) -> Result<(), Box<dyn std::error::Error>> {
    let size = std::fs::metadata(&lib.shared)?.len();
    let levels: Vec<&str> = lib.levels.iter().map(|l| l.name()).collect();
    let (codegen_ms, link_ms) = (lib.codegen_time.as_secs_f64() * 1e3, lib.link_time.as_secs_f64() * 1e3);
    match format {
        Format::Table => {
            println!(
                "library     {} ({operators} operators x {} levels: {})",
                lib.name,
                levels.len(),
                levels.join(", ")
            );
            println!("shared      {} ({:.1} KiB)", lib.shared.display(), size as f64 / 1024.0);
            println!("static      {}", lib.archive.display());
            println!("header      {}", lib.header.display());
            println!("build       codegen {codegen_ms:.0} ms, C compile + link {link_ms:.0} ms");
        }
        Format::Json => {
            let json = serde_json::json!({
                "name": lib.name,
                "shared": lib.shared,
                "archive": lib.archive,
                "header": lib.header,
                "operators": operators,
                "isa_levels": levels,
                "size_bytes": size,
                "codegen_ms": codegen_ms,
                "link_ms": link_ms,
            });
            println!("{json}");
        }
    }
    Ok(())
}

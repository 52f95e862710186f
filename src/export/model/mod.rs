//! `export_model`: a quantized ONNX network as one library function, `NAME_run(args, nargs)`
//! with the graph's inputs then its outputs, on the engine's own plan.
//!
//! The model is imported and partitioned (`get_partitions(FusionWithoutSum)`: the C loops have
//! no fused residual add, so it stays a partition of its own) and compiled by the engine
//! (`engine::compile_with`, knobs from `RecordKnobs` as `tensorlift run` takes them): that fixes
//! which partition runs which kernel, the buffers, and the NHWC layout of 8-bit activations
//! between partitions. Then for every ISA level (`level`) each compiled convolution or product
//! is lowered again for the level (`layer::lower_qconv`, `lower_qdense`; the auto-scheduled
//! convolutions at the level's point, `lower_qconv_auto`) with its weights prepared for it, and
//! the native partitions become calls of the C loops in `native.c`. A partition the engine
//! leaves to the graph's reference is an `ExportError::UnsupportedPartition` naming it and why.
//! Schedules depend on the threads they are made for, so each level is lowered once per thread
//! count asked (`ModelExport::threads`; counts with the same code share it, and the smaller
//! counts keep the largest count's prepared weights), and the level's entry picks one by the
//! size of the library's pool at call time (`variants`).
//!
//! Prepared weights and constants are one read-only data object (`weights`). Intermediate
//! buffers live in one arena per calling thread, allocated on its first call and kept until it
//! exits (`native.c`): a call allocates nothing after a thread's first, and threads calling at
//! once each use their own.
//!
//! Files: `places` (where each buffer lives, the run operator's parameters), `level` (the steps
//! at one level and thread count), `variants` (a level's thread counts and their dispatch),
//! `weights` (the read-only data), `manifest` (the network's manifest keys),
//! `native.c` (the native partitions' loops).

mod level;
mod manifest;
mod places;
mod variants;
mod weights;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::create_build_dir;
use super::interface::io_error;
use super::object::{emit_data, emit_object};
use super::operator::{OpInfo, ParamInfo};
use super::{ExportError, ExportOptions, Library, Parts, check_library_name, levels_to_compile, link_library};
use crate::CompileOptions;
use crate::engine;
use crate::graph::{FinalizedGraph, PartitionPolicy};
use crate::record::{Host, Record};
use crate::tune::apply::RecordKnobs;
use manifest::manifest;
use places::places;
use variants::level_variants;
use weights::Weights;

/// The C loops of the native partitions.
const NATIVE: &str = include_str!("native.c");

/// What to export besides the library options: the tuning records (`RecordKnobs`' user and
/// pre-tuned ones) and the thread counts schedules are made for.
pub struct ModelExport {
    pub user: Vec<Record>,
    pub pretuned: Vec<Record>,
    /// Each a pool size (1 to `MAX_THREADS`) the network is scheduled for; a call runs the
    /// schedules of the largest count within the library's pool (the smallest count when none
    /// is). The weights are prepared for the largest count's schedules and stored once: a
    /// smaller count whose own schedules would prepare them otherwise runs schedules adapted to
    /// them (`variants`). `default_threads()`: 1 and this machine's cores.
    pub threads: Vec<usize>,
}

impl ModelExport {
    /// The largest pool the library's runtime starts (`runtime.c`).
    pub const MAX_THREADS: usize = 256;

    /// One thread and this machine's cores.
    pub fn default_threads() -> Vec<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut threads = vec![1, cores.min(Self::MAX_THREADS)];
        threads.dedup();
        threads
    }
}

/// What `export_model` wrote, and how long its phases took.
pub struct ModelLibrary {
    pub library: Library,
    /// Import, partitioning and the engine's compile.
    pub plan_time: Duration,
    /// Bytes of read-only data (prepared weights and constants).
    pub weights_bytes: usize,
    /// What the export went on without and the user should know: the engine's compile warnings
    /// (`CompiledGraph::warnings`) and, per level and thread count, each tuning record whose
    /// point was not applied.
    pub warnings: Vec<String>,
}

/// Writes `lib<NAME>.so`, `lib<NAME>.a`, `<NAME>.h` running the network of `model` (an ONNX
/// file) as `NAME_run`.
pub fn export_model(
    model: &Path,
    export: &ModelExport,
    options: &ExportOptions,
    out_dir: &Path,
) -> Result<ModelLibrary, ExportError> {
    let start = Instant::now();
    let imported = crate::onnx::load(model)
        .map_err(|e| ExportError::Model { path: model.to_path_buf(), message: e.to_string() })?;
    export_graph(imported.graph, model, export, options, out_dir, start)
}

/// `export_model` of a finalized graph (`model` names it in errors and the manifest; `start`:
/// when the export began, for `ModelLibrary::plan_time`).
pub fn export_graph(
    graph: FinalizedGraph,
    model: &Path,
    export: &ModelExport,
    options: &ExportOptions,
    out_dir: &Path,
    start: Instant,
) -> Result<ModelLibrary, ExportError> {
    let name = &options.name;
    check_library_name(name)?;
    let levels = levels_to_compile(&options.levels)?;
    let threads = thread_counts(&export.threads)?;
    let bad = |message: String| ExportError::Model { path: model.to_path_buf(), message };
    let partitions = graph.get_partitions(PartitionPolicy::FusionWithoutSum);
    let host = CompileOptions::default().target.level().map_err(|e| bad(e.to_string()))?;
    let knobs_at = |level, max_threads| RecordKnobs {
        user: export.user.clone(),
        pretuned: export.pretuned.clone(),
        host: Host::this(level),
        max_threads,
    };
    // The plan (kernels, buffers, layouts) does not depend on the threads.
    let host_records = knobs_at(host, threads[threads.len() - 1]);
    let knobs = |w: engine::Workload<'_>| host_records.knobs(w);
    let points = |spec: &crate::layer::QConvAutoSpec| host_records.auto_point(spec);
    let graph = engine::compile_tuned(graph, partitions, &CompileOptions::default(), &knobs, &points)
        .map_err(|e| bad(e.to_string()))?;
    let plan_time = start.elapsed();

    let start = Instant::now();
    let mut weights = Weights::default();
    let (places, op) = places(&graph, &mut weights)?;
    let mut codes = Vec::new();
    for &level in &levels {
        let records = |count| knobs_at(level, count);
        codes.push(level_variants(name, level, &graph, &places, (&records, &threads), &mut weights)?);
    }
    let build_dir = create_build_dir(out_dir, name)?;
    let mut objects = Vec::new();
    for (code, &level) in codes.iter().zip(&levels) {
        for (symbol, func) in &code.functions {
            let (bytes, _) = emit_object(func, symbol, level, options.opt_level)
                .map_err(|e| e.into_export(&format!("run ({symbol})"), level))?;
            objects.push(write(&build_dir, &format!("{symbol}.o"), &bytes)?);
        }
    }
    let weights_bytes = weights.bytes.len();
    let symbol = format!("tlx_{name}__weights");
    let data = emit_data(&symbol, weights.bytes, 64).map_err(|message| ExportError::Object {
        op: "run (weights)".into(),
        level: levels[0],
        message,
    })?;
    objects.push(write(&build_dir, "weights.o", &data)?);

    let mut source = format!(
        "\n/* ---- the network ---- */\n#define TL_NET_ARENA {}\nTL_HIDDEN extern const uint8_t {symbol}[];\n#define tl_weights {symbol}\n",
        places.arena.max(1)
    );
    source.push_str(NATIVE);
    for code in &codes {
        source.push_str(&code.source);
        source.push('\n');
    }
    let params = op.params.into_iter().map(|p| ParamInfo { ranges: vec![None; levels.len()], ..p }).collect();
    let op = OpInfo {
        params,
        entries: levels.iter().zip(&codes).map(|(&l, c)| (l, c.entry.clone())).collect(),
        checked: vec![Vec::new(); levels.len()],
        ..op
    };
    let mut warnings = graph.warnings().to_vec();
    warnings.extend(codes.iter().flat_map(|c| c.warnings.iter().cloned()));
    let manifest = manifest(model, &graph, (&levels, &threads), &codes, &op, weights_bytes);
    let parts = Parts { ops: vec![op], objects, source, manifest };
    let library = link_library(options, &levels, parts, (out_dir, &build_dir), start.elapsed())?;
    Ok(ModelLibrary { library, plan_time, weights_bytes, warnings })
}

/// `asked` sorted, each once: at least one, each within 1..=`MAX_THREADS`.
fn thread_counts(asked: &[usize]) -> Result<Vec<usize>, ExportError> {
    let mut threads = asked.to_vec();
    threads.sort_unstable();
    threads.dedup();
    if threads.is_empty() || threads[0] == 0 || threads[threads.len() - 1] > ModelExport::MAX_THREADS {
        return Err(ExportError::Threads { found: asked.to_vec(), max: ModelExport::MAX_THREADS });
    }
    Ok(threads)
}

fn write(dir: &Path, file: &str, bytes: &[u8]) -> Result<String, ExportError> {
    let path: PathBuf = dir.join(file);
    std::fs::write(&path, bytes).map_err(io_error(&path))?;
    Ok(file.to_string())
}

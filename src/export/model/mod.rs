//! `export_model`: a quantized ONNX network as one library function, `NAME_run(args, nargs)`
//! with the graph's inputs then its outputs, on the engine's own plan.
//!
//! The model is imported and partitioned (`get_partitions(Fusion)`) and compiled by the engine
//! (`engine::compile_with`, knobs from `RecordKnobs` as `tensorlift run` takes them): that fixes
//! which partition runs which kernel, the buffers, and the NHWC layout of 8-bit activations
//! between partitions. Then for every ISA level (`level`) each compiled convolution or product
//! is lowered again for the level (`layer::lower_qconv`, `lower_qdense`) with its weights
//! prepared for it, and the native partitions become calls of the C loops in `native.c`. A
//! partition the engine leaves to the graph's reference is an `ExportError`.
//!
//! Prepared weights and constants are one read-only data object (`weights`). Intermediate
//! buffers live in one arena per calling thread, allocated on its first call and kept until it
//! exits (`native.c`): a call allocates nothing after a thread's first, and threads calling at
//! once each use their own.

mod level;
mod weights;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::dlpack::dl_name;
use super::files::create_build_dir;
use super::interface::io_error;
use super::object::{emit_data, emit_object};
use super::operator::{OpInfo, ParamInfo};
use super::{ExportError, ExportOptions, Library, Parts, check_library_name, levels_to_compile, link_library};
use crate::CompileOptions;
use crate::engine::{self, CompiledGraph, Kernel};
use crate::graph::{DataType, FinalizedGraph, PartitionPolicy};
use crate::isa::IsaLevel;
use crate::record::{Host, Record};
use crate::tune::apply::RecordKnobs;
use level::{LevelCode, Places, level_code, step_name};
use weights::Weights;

/// The C loops of the native partitions.
const NATIVE: &str = include_str!("native.c");

/// What to export besides the library options: the tuning records (`RecordKnobs`' user and
/// pre-tuned ones) and the threads default knobs are chosen for.
pub struct ModelExport {
    pub user: Vec<Record>,
    pub pretuned: Vec<Record>,
    pub max_threads: usize,
}

/// What `export_model` wrote, and how long its phases took.
pub struct ModelLibrary {
    pub library: Library,
    /// Import, partitioning and the engine's compile.
    pub plan_time: Duration,
    /// Bytes of read-only data (prepared weights and constants).
    pub weights_bytes: usize,
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
    let bad = |message: String| ExportError::Model { path: model.to_path_buf(), message };
    let partitions = graph.get_partitions(PartitionPolicy::Fusion);
    let host = CompileOptions::default().target.level().map_err(|e| bad(e.to_string()))?;
    let knobs_at = |level| RecordKnobs {
        user: export.user.clone(),
        pretuned: export.pretuned.clone(),
        host: Host::this(level),
        max_threads: export.max_threads,
    };
    let host_records = knobs_at(host);
    let knobs = |w: engine::Workload<'_>| host_records.knobs(w);
    let graph =
        engine::compile_with(graph, partitions, &CompileOptions::default(), &knobs).map_err(|e| bad(e.to_string()))?;
    let plan_time = start.elapsed();

    let start = Instant::now();
    let mut weights = Weights::default();
    let (places, op) = places(&graph, &mut weights)?;
    let mut codes = Vec::new();
    for &level in &levels {
        codes.push(level_code(name, level, &graph, &places, (&knobs_at(level), export.max_threads), &mut weights)?);
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
    let manifest = manifest(model, &graph, &levels, &codes, &op, weights_bytes);
    let parts = Parts { ops: vec![op], objects, source, manifest };
    let library = link_library(options, &levels, parts, (out_dir, &build_dir), start.elapsed())?;
    Ok(ModelLibrary { library, plan_time, weights_bytes })
}

fn write(dir: &Path, file: &str, bytes: &[u8]) -> Result<String, ExportError> {
    let path: PathBuf = dir.join(file);
    std::fs::write(&path, bytes).map_err(io_error(&path))?;
    Ok(file.to_string())
}

/// The DType of a graph dtype at the ABI.
fn abi_dtype(d: DataType) -> ir::DType {
    match d {
        DataType::F16 => ir::DType::F16,
        DataType::Bf16 => ir::DType::BF16,
        DataType::F32 => ir::DType::F32,
        DataType::S32 => ir::DType::I32,
        DataType::S8 => ir::DType::I8,
        DataType::U8 => ir::DType::U8,
        DataType::Boolean => ir::DType::BOOL,
    }
}

/// Where every slot lives: graph inputs and outputs in the caller's arguments (4-D 8-bit ones,
/// which the engine keeps NHWC, in the arena, permuted from or into the arguments), constants in
/// the read-only data, the rest in the arena. Returns the places and the run operator (its
/// parameters; entries to fill).
fn places(graph: &CompiledGraph, weights: &mut Weights) -> Result<(Places, OpInfo), ExportError> {
    let slots = graph.slots();
    let (ins, outs) = graph.io_slots();
    let mut places = vec![String::new(); slots.len()];
    let mut params = Vec::new();
    let (mut arena, mut prologue, mut epilogue) = (0usize, String::new(), String::new());
    let names: Vec<String> = graph
        .graph()
        .graph()
        .inputs()
        .iter()
        .chain(graph.graph().graph().outputs())
        .map(|&t| graph.graph().tensor(t).map_or_else(|| format!("{t}"), |lt| lt.name.clone()))
        .collect();
    for (k, &s) in ins.iter().chain(&outs).enumerate() {
        let slot = &slots[s];
        let output = k >= ins.len();
        if !places[s].is_empty() {
            return Err(ExportError::UnsupportedModel {
                what: format!("graph tensor {}", names[k]),
                expected: "each graph input and output once".into(),
                found: "a tensor that is both, or listed twice".into(),
            });
        }
        if slot.nhwc {
            // Stored NHWC inside, as the engine stores it: permuted on the way in or out.
            let place = format!("(arena + {arena})");
            arena = (arena + slot.bytes.len()).next_multiple_of(64);
            let [n, c, h, w] = slot.nchw();
            let (from, to) =
                if output { (place.clone(), format!("args[{k}]")) } else { (format!("args[{k}]"), place.clone()) };
            let line = format!("    tl_n_permute({from}, {n}, {c}, {}, {}, {to});\n", h * w, i32::from(!output));
            if output {
                epilogue.push_str(&line)
            } else {
                prologue.push_str(&line)
            }
            places[s] = place;
        } else {
            places[s] = format!("((uint8_t *)args[{k}])");
        }
        let dtype = abi_dtype(slot.dtype);
        params.push(ParamInfo {
            name: names[k].clone(),
            dtype,
            shape: slot.dims.iter().map(|&d| d as i64).collect(),
            output,
            ranges: Vec::new(),
        });
    }
    let written: Vec<usize> = graph.steps().iter().flat_map(|s| s.outputs.iter().copied()).collect();
    for (s, slot) in slots.iter().enumerate() {
        if !places[s].is_empty() {
            continue;
        }
        if written.contains(&s) {
            places[s] = format!("(arena + {arena})");
            arena = (arena + slot.bytes.len()).next_multiple_of(64);
        } else {
            places[s] = format!("((uint8_t *)tl_weights + {})", weights.add(&slot.bytes));
        }
    }
    let op = OpInfo { name: "run".into(), params, entries: Vec::new(), checked: Vec::new(), tuning: None };
    Ok((Places { places, arena, prologue, epilogue }, op))
}

/// The manifest's network keys: `model`, `inputs`, `outputs`, `partitions`, `weights_bytes`.
fn manifest(
    model: &Path,
    graph: &CompiledGraph,
    levels: &[IsaLevel],
    codes: &[LevelCode],
    op: &OpInfo,
    weights_bytes: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let tensors = |output: bool| -> Vec<serde_json::Value> {
        op.params
            .iter()
            .filter(|p| p.output == output)
            .map(|p| json!({"name": p.name, "dtype": dl_name(p.dtype), "shape": p.shape}))
            .collect()
    };
    let partitions: Vec<_> = graph
        .steps()
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let ops: Vec<String> = step
                .partition
                .ops
                .iter()
                .filter_map(|&o| graph.graph().op(o))
                .map(|o| format!("{} {}", o.kind.name(), o.name))
                .collect();
            let mut entry = json!({
                "id": step.partition.id.to_string(),
                "name": step_name(graph, step),
                "kind": step.partition.kind.name(),
                "ops": ops,
                "kernel": kernel_kind(&step.kernel),
            });
            if step.spec.is_some() {
                let per_level = |f: &dyn Fn(&(usize, serde_json::Value, engine::Tuning)) -> serde_json::Value| {
                    levels
                        .iter()
                        .zip(codes)
                        .filter_map(|(l, c)| c.kernels[i].as_ref().map(|k| (l.name().to_string(), f(k))))
                        .collect::<serde_json::Map<_, _>>()
                };
                entry["function"] = per_level(&|k| json!(format!("k{}", k.0))).into();
                entry["tuning"] = per_level(&|k| json!({"source": k.2.name(), "knobs": k.1})).into();
            }
            entry
        })
        .collect();
    let mut keys = serde_json::Map::new();
    let file = model.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    keys.insert("model".into(), json!(file));
    keys.insert("inputs".into(), json!(tensors(false)));
    keys.insert("outputs".into(), json!(tensors(true)));
    keys.insert("partitions".into(), json!(partitions));
    keys.insert("weights_bytes".into(), json!(weights_bytes));
    keys
}

/// The kind of code that runs a partition, as the manifest names it.
fn kernel_kind(kernel: &Kernel) -> &'static str {
    match kernel {
        Kernel::Conv(_) => "compiled conv",
        Kernel::Dense(_) => "compiled dense",
        Kernel::Add { .. } => "native add",
        Kernel::MaxPool { .. } => "native max pool",
        Kernel::GlobalAvgPool { .. } => "native global avg pool",
        Kernel::Quantize { .. } => "native quantize",
        Kernel::Dequantize { .. } => "native dequantize",
        Kernel::Copy => "copy",
        Kernel::Reference { .. } => "reference",
    }
}

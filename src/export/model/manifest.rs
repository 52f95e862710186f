//! The keys an exported network adds to its library's manifest: the model, its inputs and
//! outputs, the prepared weights' size, and per engine step the partition, its kernel and, for
//! compiled kernels, each level's function and tuning.

use std::path::Path;

use serde_json::json;

use super::level::{LevelCode, step_name};
use crate::engine::{CompiledGraph, Kernel, Tuning};
use crate::export::dlpack::dl_name;
use crate::export::operator::OpInfo;
use crate::isa::IsaLevel;

/// The manifest's network keys: `model`, `inputs`, `outputs`, `partitions`, `weights_bytes`.
pub(super) fn manifest(
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
            if matches!(step.kernel, Kernel::Conv(_) | Kernel::Dense(_)) {
                let per_level = |f: &dyn Fn(&(usize, serde_json::Value, Tuning)) -> serde_json::Value| {
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
        Kernel::Auto(_) => "auto-scheduled conv",
        Kernel::Add { .. } => "native add",
        Kernel::MaxPool { .. } => "native max pool",
        Kernel::GlobalAvgPool { .. } => "native global avg pool",
        Kernel::Quantize { .. } => "native quantize",
        Kernel::Dequantize { .. } => "native dequantize",
        Kernel::Copy => "copy",
        Kernel::Reference { .. } => "reference",
    }
}

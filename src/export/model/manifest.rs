//! The keys an exported network adds to its library's manifest: the model, its inputs and
//! outputs, the prepared weights' size, the thread counts, and per engine step the partition, its
//! kernel and, for compiled kernels, each level's function and schedule per thread count (the
//! template's knobs and their tuning, or the auto-scheduler's point).

use std::path::Path;

use serde_json::json;

use super::level::{Compiled, Schedule, step_name};
use super::variants::LevelCode;
use crate::engine::{CompiledGraph, Kernel};
use crate::export::dlpack::dl_name;
use crate::export::operator::OpInfo;
use crate::isa::IsaLevel;

/// The manifest's network keys: `model`, `inputs`, `outputs`, `partitions`, `weights_bytes`,
/// `threads` (the counts asked) and `thread_variants` (per level, the counts with a network
/// function of their own; the others run a smaller count's, whose steps are the same).
/// A partition's `function`, `tuning` and `point` are keyed by level, then by thread count;
/// its `weights_of`, by level and count too, names the larger count whose weight layout a
/// count kept instead of its own choice of schedule (its `tuning` then the larger count's
/// knobs on its own threads and their source, or the larger count's function and schedule).
pub(super) fn manifest(
    model: &Path,
    graph: &CompiledGraph,
    (levels, threads): (&[IsaLevel], &[usize]),
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
            let per_level = |f: &dyn Fn(&Compiled) -> Option<serde_json::Value>| {
                let per_count = |c: &LevelCode| {
                    let counts: serde_json::Map<_, _> = c
                        .variants
                        .iter()
                        .filter_map(|v| v.kernels[i].as_ref().and_then(f).map(|x| (v.threads.to_string(), x)))
                        .collect();
                    Some(counts).filter(|m| !m.is_empty())
                };
                levels
                    .iter()
                    .zip(codes)
                    .filter_map(|(l, c)| per_count(c).map(|v| (l.name().to_string(), serde_json::Value::from(v))))
                    .collect::<serde_json::Map<_, _>>()
            };
            if codes.iter().any(|c| c.variants.iter().any(|v| v.kernels[i].is_some())) {
                entry["function"] = per_level(&|k| Some(json!(format!("k{}", k.function)))).into();
                let kept = per_level(&|k| k.weights_of.map(|n| json!(n)));
                if !kept.is_empty() {
                    entry["weights_of"] = kept.into();
                }
            }
            if matches!(step.kernel, Kernel::Conv(_) | Kernel::Dense(_)) {
                entry["tuning"] = per_level(&|k| match &k.schedule {
                    Schedule::Knobs(knobs, tuning) => Some(json!({"source": tuning.name(), "knobs": knobs})),
                    Schedule::Auto(..) => None,
                })
                .into();
            }
            if matches!(step.kernel, Kernel::Auto(_)) {
                entry["point"] = per_level(&|k| match &k.schedule {
                    Schedule::Auto(point, _) => Some(json!(point)),
                    Schedule::Knobs(..) => None,
                })
                .into();
                entry["tuning"] = per_level(&|k| match &k.schedule {
                    Schedule::Auto(point, tuning) => Some(json!({"source": tuning.name(), "point": point})),
                    Schedule::Knobs(..) => None,
                })
                .into();
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
    keys.insert("threads".into(), json!(threads));
    let own = |c: &LevelCode| -> Vec<usize> {
        c.variants.iter().filter(|v| v.runs_as == v.threads).map(|v| v.threads).collect()
    };
    let variants: serde_json::Map<_, _> =
        levels.iter().zip(codes).map(|(l, c)| (l.name().to_string(), json!(own(c)))).collect();
    keys.insert("thread_variants".into(), variants.into());
    keys
}

/// The kind of code that runs a partition, as the manifest names it (an auto-scheduled
/// convolution by its sketch, as `tensorlift run`'s table: "auto rules").
fn kernel_kind(kernel: &Kernel) -> String {
    let kind = match kernel {
        Kernel::Conv(_) => "compiled conv",
        Kernel::Dense(_) => "compiled dense",
        Kernel::Auto(c) => return format!("auto {}", c.point().sketch),
        Kernel::Sum { .. } => "compiled conv with native sum",
        Kernel::Add { .. } => "native add",
        Kernel::MaxPool { .. } => "native max pool",
        Kernel::GlobalAvgPool { .. } => "native global avg pool",
        Kernel::Quantize(_) => "native quantize",
        Kernel::Dequantize(_) => "native dequantize",
        Kernel::Copy => "copy",
        Kernel::Reference { .. } => "reference",
    };
    kind.to_string()
}

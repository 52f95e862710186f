//! Where an exported network's buffers live (`Places`): the graph's inputs and outputs in the
//! caller's arguments, constants in the read-only data, the other tensors in the per-thread
//! arena; and the run operator's parameters, the graph's inputs then its outputs.

use super::weights::Weights;
use crate::engine::CompiledGraph;
use crate::export::ExportError;
use crate::export::operator::{OpInfo, ParamInfo};
use crate::graph::DataType;

/// Where each slot lives in C (`places[slot]`, an `uint8_t *` expression), and the scratch
/// arena's size: what every level shares.
pub(super) struct Places {
    pub places: Vec<String>,
    pub arena: usize,
    /// C statements before the steps and after them (inputs and outputs stored NHWC).
    pub prologue: String,
    pub epilogue: String,
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
pub(super) fn places(graph: &CompiledGraph, weights: &mut Weights) -> Result<(Places, OpInfo), ExportError> {
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
            arena = (arena + slot.bytes.size()).next_multiple_of(64);
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
            arena = (arena + slot.bytes.size()).next_multiple_of(64);
        } else {
            places[s] = format!("((uint8_t *)tl_weights + {})", weights.add(&slot.bytes));
        }
    }
    let op = OpInfo { name: "run".into(), params, entries: Vec::new(), checked: Vec::new(), tuning: None };
    Ok((Places { places, arena, prologue, epilogue }, op))
}

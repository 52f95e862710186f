//! One ISA level and thread count of an exported network: the engine's steps as C — calls of
//! the compiled convolutions' and products' functions (the x86 template's, `layer::lower_qconv`,
//! `lower_qdense`, and the auto-scheduled ones, `lower_qconv_auto`: each lowered for the level
//! and the thread count, one per distinct function, on constants prepared for it) and of the
//! native loops (`native.c`) — the body of one of the level's network functions (`variants`).

use std::collections::HashMap;
use std::fmt::Write;

use schedules::auto::AutoPoint;
use schedules::x86_conv::Conv2dInt8Knobs;

use crate::engine::native::{Affine, Int8};
use crate::engine::{CompiledGraph, Kernel, Spec, Step, Tuning, auto_spec, partition_spec};
use crate::export::ExportError;
use crate::isa::IsaLevel;
use crate::layer::{LoweredAuto, LoweredQuantized, lower_qconv, lower_qconv_auto_at, lower_qdense};
use crate::runtime::{CheckedTensor, Tensor};
use crate::tune::apply::RecordKnobs;

use super::places::Places;
use super::weights::Weights;

/// The steps at one level and thread count: the C statements, and per step the compiled
/// kernel (manifest, and the schedule a smaller count's step keeps the weights of).
pub(super) struct StepsCode {
    pub body: String,
    /// Per step: a compiled kernel.
    pub kernels: Vec<Option<Compiled>>,
    /// What the user should know and the export went on without: a tuning record whose point
    /// the auto-scheduler's space rejects (the rules' point serves instead).
    pub warnings: Vec<String>,
}

/// A compiled step at one level and thread count.
#[derive(Clone)]
pub(super) struct Compiled {
    /// Index into the level's `Functions::list`.
    pub function: usize,
    pub schedule: Schedule,
    /// The larger count whose weight layout this count kept instead of its own choice of
    /// schedule, which would prepare the weights otherwise (`None`: its own choice).
    pub weights_of: Option<usize>,
    /// The C statement calling the function.
    line: String,
    /// The prepared constants (weights, compensation, parameters) the function reads.
    constants: Vec<Tensor>,
}

/// The largest thread count's steps, whose prepared weights the other counts keep.
#[derive(Clone, Copy)]
pub(super) struct Layout<'a> {
    pub threads: usize,
    pub steps: &'a StepsCode,
}

/// How a step's function was scheduled at a level.
#[derive(Clone)]
pub(super) enum Schedule {
    /// The x86 template's knobs and where they came from.
    Knobs(Conv2dInt8Knobs, Tuning),
    /// The auto-scheduler's point and where it came from (a record, else the rules': default).
    Auto(AutoPoint, Tuning),
}

/// The distinct functions of a level (over its thread counts) and the C calls of them.
#[derive(Default)]
pub(super) struct Functions {
    /// (symbol, function), each once.
    pub list: Vec<(String, ir::Func)>,
    by_key: HashMap<String, usize>,
}

impl Functions {
    /// The index of the function of `key` (`func` added under a symbol of `lib` and `tag`
    /// unless one of that key already was), and a C statement calling it on `src`, `constants`
    /// (added to `weights`) and `dst`. Each constant must lie in the range the function
    /// declares for its parameter: checked here once, as the engine checks at compile time.
    fn call(
        &mut self,
        (lib, tag): (&str, &str),
        (key, func): (String, ir::Func),
        (src, constants, dst): (String, &[Tensor], String),
        weights: &mut Weights,
    ) -> Result<(usize, String), String> {
        for (i, t) in constants.iter().enumerate() {
            if let Some(range) = func.params.get(1 + i).and_then(|p| p.value_range()) {
                CheckedTensor::new(t.clone(), range).map_err(|e| e.to_string())?;
            }
        }
        let next = self.list.len();
        let index = *self.by_key.entry(key).or_insert(next);
        if index == next {
            self.list.push((format!("tlx_{lib}__k{index}__{tag}"), func));
        }
        let mut args = vec![src];
        for t in constants {
            args.push(format!("(uint8_t *)tl_weights + {}", weights.add(t.as_bytes())));
        }
        args.push(dst);
        let line = format!(
            "    {{ void *const a[] = {{{}}}; st = {}(a); if (st) goto done; }}\n",
            args.join(", "),
            self.list[index].0
        );
        Ok((index, line))
    }
}

/// Whether two lists of constants hold the same bytes (would be stored as one copy).
fn same_bytes(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.as_bytes() == y.as_bytes())
}

fn float(x: f32) -> String {
    format!("tl_f32(0x{:08x}u)", x.to_bits())
}

fn s8(ty: Int8) -> i32 {
    i32::from(ty == Int8::S8)
}

/// The name of a step's partition in errors and the manifest: its id and its first op's name.
pub(super) fn step_name(graph: &CompiledGraph, step: &Step) -> String {
    let op = step.partition.ops.first().and_then(|&o| graph.graph().op(o)).map(|o| o.name.clone());
    format!("{} {}", step.partition.id, op.unwrap_or_default())
}

/// `lib`'s steps for `level` on `max_threads` threads: each step of `graph` as the engine binds
/// it, its compiled kernels lowered for `level` — the template's with the knobs `records` gives
/// there (else the defaults for `max_threads`), the auto-scheduled ones at the point of `records`
/// for the level, else the one `compile_qconv_auto` chooses there on `max_threads` — their
/// functions added to `functions` (the level's), their constants to `weights`. With the largest
/// count's steps (`layout`), a kernel whose own choice would prepare its weights otherwise than
/// the largest count's keeps the latter's weights: the largest count's knobs with the threads
/// lowered to `max_threads` where those prepare the same weights, else the largest count's
/// function itself (`Compiled::weights_of`). So no count adds weights the largest count did not.
pub(super) fn level_code(
    lib: &str,
    level: IsaLevel,
    graph: &CompiledGraph,
    places: &Places,
    (records, max_threads, layout): (&RecordKnobs, usize, Option<Layout<'_>>),
    (functions, weights): (&mut Functions, &mut Weights),
) -> Result<StepsCode, ExportError> {
    let tag = level.name().replace('-', "_");
    let mut body = String::new();
    let mut kernels = Vec::new();
    let mut warnings = Vec::new();
    let p = |s: usize| places.places[s].clone();
    for (i, step) in graph.steps().iter().enumerate() {
        let name = step_name(graph, step);
        let fail = |message: String| ExportError::Partition { partition: name.clone(), level, message };
        let slots = graph.slots();
        let (ins, out) = (&step.inputs, step.outputs.first().copied());
        let Some(out) = out.filter(|_| step.outputs.len() == 1) else {
            return Err(unsupported(step, &name, format!("{} outputs", step.outputs.len())));
        };
        let mut kernel = None;
        let spec = match &step.kernel {
            Kernel::Conv(_) | Kernel::Dense(_) => {
                Some(partition_spec(graph.graph(), &step.partition).map_err(|why| unsupported(step, &name, why))?)
            }
            _ => None,
        };
        // The largest count's kernel of this step, when this is a smaller count.
        let largest = layout.and_then(|l| l.steps.kernels[i].as_ref().map(|k| (l.threads, k)));
        let mut call = |(key, func): (String, ir::Func), constants: &[Tensor]| {
            functions.call((lib, &tag), (key, func), (p(ins[0]), constants, p(out)), weights).map_err(&fail)
        };
        match (&step.kernel, spec.as_ref()) {
            (Kernel::Conv(_) | Kernel::Dense(_), Some(spec)) => {
                let lower = |knobs: Option<Conv2dInt8Knobs>| {
                    match spec {
                        Spec::Conv(c) => lower_qconv(c, knobs, level, max_threads),
                        Spec::Dense(d) => lower_qdense(d, knobs, level),
                    }
                    .map_err(|e| fail(e.to_string()))
                };
                let (knobs, tuning) =
                    records.knobs(spec.workload()).map_or((None, Tuning::Default), |(k, t)| (Some(k), t));
                let own = lower(knobs)?;
                let mut compile = |lowered: LoweredQuantized, tuning, weights_of| {
                    let LoweredQuantized { func, key, knobs, weights: constants, .. } = lowered;
                    let (function, line) = call((key, func), &constants)?;
                    let schedule = Schedule::Knobs(knobs, tuning);
                    Ok::<_, ExportError>(Compiled { function, schedule, weights_of, line, constants })
                };
                let compiled = match largest {
                    Some((n, big)) if !same_bytes(&own.weights, &big.constants) => {
                        // The largest count's knobs on this count's threads, if their weights
                        // are the same (the threads play no part in them); else its function.
                        let Schedule::Knobs(big_knobs, big_tuning) = &big.schedule else {
                            return Err(fail("a template kernel whose largest count's is not one".into()));
                        };
                        let big_tuning = *big_tuning;
                        let fewer = Conv2dInt8Knobs { threads: big_knobs.threads.min(max_threads), ..*big_knobs };
                        let adapted = lower(Some(fewer))?;
                        if same_bytes(&adapted.weights, &big.constants) {
                            compile(adapted, big_tuning, Some(n))?
                        } else {
                            Compiled { weights_of: Some(n), ..big.clone() }
                        }
                    }
                    _ => compile(own, tuning, None)?,
                };
                body.push_str(&compiled.line);
                kernel = Some(compiled);
            }
            (Kernel::Auto(_), _) => {
                let spec = auto_spec(graph.graph(), &step.partition).map_err(|why| unsupported(step, &name, why))?;
                let asked = records.auto_point(&spec);
                let (own, rejected) = lower_qconv_auto_at(&spec, level, max_threads, asked.as_ref().map(|(p, _)| p))
                    .map_err(|e| fail(e.to_string()))?;
                let tuning = match (&asked, &rejected) {
                    (Some((_, tuning)), None) => *tuning,
                    _ => Tuning::Default,
                };
                if let Some(why) = rejected {
                    warnings.push(format!(
                        "{name} at {level}, {max_threads} threads: the tuning record is not applied ({why}): the rules' point"
                    ));
                }
                let compiled = match largest {
                    // The points' constants do not depend on the threads; were they to, the
                    // largest count's function keeps its weights.
                    Some((n, big)) if !same_bytes(&own.constants, &big.constants) => {
                        Compiled { weights_of: Some(n), ..big.clone() }
                    }
                    _ => {
                        let LoweredAuto { func, key, point, constants } = own;
                        let (function, line) = call((key, func), &constants)?;
                        Compiled {
                            function,
                            schedule: Schedule::Auto(point, tuning),
                            weights_of: None,
                            line,
                            constants,
                        }
                    }
                };
                body.push_str(&compiled.line);
                kernel = Some(compiled);
            }
            (Kernel::Add { params, ty, clamp }, _) => {
                let (ra, rb, fixed) = params.constants();
                writeln!(
                    body,
                    "    tl_n_add({}, {}, {}, {}, {}, {}, {}, {}, {}, {});",
                    p(ins[0]),
                    p(ins[1]),
                    slots[out].bytes.size(),
                    float(ra),
                    float(rb),
                    float(fixed),
                    clamp.0,
                    clamp.1,
                    s8(*ty),
                    p(out)
                )
                .unwrap();
            }
            (Kernel::MaxPool { window: w, ty }, _) => {
                let [n, c, h, wd] = slots[ins[0]].nchw();
                let [_, _, oh, ow] = slots[out].nchw();
                let win = [w.kernel, w.stride, w.pad_begin, w.dilation].concat();
                let win: Vec<String> = win.iter().map(usize::to_string).collect();
                writeln!(
                    body,
                    "    {{ static const int64_t w[8] = {{{}}}; tl_n_max_pool({}, {n}, {h}, {wd}, {c}, {oh}, {ow}, w, {}, {}); }}",
                    win.join(", "),
                    p(ins[0]),
                    s8(*ty),
                    p(out)
                )
                .unwrap();
            }
            (Kernel::GlobalAvgPool { x, y, ty }, _) => {
                let src = &slots[ins[0]];
                let (n, c, hw) = (src.dims[0], src.dims[1], src.dims[2..].iter().product::<usize>());
                let scale = x.0 / (y.0 * hw as f32);
                let bias = (x.1 as i64 * hw as i64) as i32;
                let (lo, hi) = ty.range();
                writeln!(
                    body,
                    "    tl_n_global_avg_pool({}, {n}, {hw}, {c}, {}, {bias}, {}, {}, {}, {}, {});",
                    p(ins[0]),
                    float(scale),
                    lo - y.1,
                    hi - y.1,
                    y.1,
                    s8(*ty),
                    p(out)
                )
                .unwrap();
            }
            (Kernel::Quantize(Affine { scale, zero_point, ty }), _) => {
                let o = &slots[out];
                let (n, c, plane) = extent(o.nhwc, &o.dims);
                writeln!(
                    body,
                    "    tl_n_quantize((const float *)({}), {n}, {c}, {plane}, {}, {}, {zero_point}, {}, {});",
                    p(ins[0]),
                    i32::from(o.nhwc),
                    float(*scale),
                    s8(*ty),
                    p(out)
                )
                .unwrap();
            }
            (Kernel::Dequantize(Affine { scale, zero_point, ty }), _) => {
                let src = &slots[ins[0]];
                let (n, c, plane) = extent(src.nhwc, &src.dims);
                writeln!(
                    body,
                    "    tl_n_dequantize({}, {n}, {c}, {plane}, {}, {}, {zero_point}, {}, (float *)({}));",
                    p(ins[0]),
                    i32::from(src.nhwc),
                    float(*scale),
                    s8(*ty),
                    p(out)
                )
                .unwrap();
            }
            (Kernel::Copy, _) => {
                writeln!(body, "    memcpy({}, {}, {});", p(out), p(ins[0]), slots[out].bytes.size()).unwrap();
            }
            (Kernel::Reference { why }, _) => return Err(unsupported(step, &name, why.clone())),
            // The export partitions with `FusionWithoutSum`: no residual reaches here.
            (Kernel::Sum { .. }, _) => {
                return Err(unsupported(step, &name, "a convolution with a fused residual add".into()));
            }
            (Kernel::Conv(_) | Kernel::Dense(_), None) => {
                return Err(unsupported(step, &name, "a compiled kernel without its definition".into()));
            }
        }
        kernels.push(kernel);
    }
    Ok(StepsCode { body, kernels, warnings })
}

/// `(n, c, plane)` of a 4-D NHWC buffer, or `(1, 1, elements)`.
fn extent(nhwc: bool, dims: &[usize]) -> (usize, usize, usize) {
    if nhwc { (dims[0], dims[1], dims[2] * dims[3]) } else { (1, 1, dims.iter().product()) }
}

fn unsupported(step: &Step, name: &str, why: String) -> ExportError {
    ExportError::UnsupportedPartition { partition: name.to_string(), kind: step.partition.kind.name().to_string(), why }
}

//! Stage classification: which stages of a definition are element-wise or injective (inlining
//! candidates), which are reductions, their spatial (S) and reduction (R) axes, and whether a
//! reduction's order is part of its value (floats: the interpreter sums in declaration order).

use ir::expr::ExprKind;
use ir::schedule::create_schedule;
use ir::te::{IterVar, Reducer, Tensor};

/// What a compute stage is, for the rules.
#[derive(Clone, Debug)]
pub enum StageKind {
    /// No reduction: each output element is a function of input elements.
    Injective,
    /// A reduction over `reduce` axes.
    Reduction {
        /// The fold's order changes its value (a float reduction): its axes keep their
        /// declaration order and are never vectorized.
        ordered: bool,
    },
}

/// One compute stage of a definition.
#[derive(Clone, Debug)]
pub struct StageInfo {
    pub tensor: Tensor,
    pub kind: StageKind,
    pub spatial: Vec<IterVar>,
    pub reduce: Vec<IterVar>,
    /// How many stages read this one.
    pub consumers: usize,
    pub is_output: bool,
    /// Expression nodes of the body: what inlining duplicates per read.
    pub body_size: usize,
}

/// The compute stages of the definition with these outputs, producers first.
pub fn stages(outputs: &[Tensor]) -> Vec<StageInfo> {
    let refs: Vec<&Tensor> = outputs.iter().collect();
    let s = create_schedule(&refs);
    let mut out = Vec::new();
    for &stage in s.order() {
        let data = s.stage_data(stage);
        let Some(body) = &data.body else { continue };
        let kind = match body.kind() {
            ExprKind::Reduce(r) => {
                let ordered = body.dtype().is_float() || matches!(r.reducer, Reducer::Custom(_));
                StageKind::Reduction { ordered }
            }
            _ => StageKind::Injective,
        };
        let mut body_size = 0;
        body.for_each(&mut |_| body_size += 1);
        out.push(StageInfo {
            tensor: data.tensor.clone(),
            kind,
            spatial: data.axes.clone(),
            reduce: data.reduce_axes.clone(),
            consumers: s.consumers(stage).len(),
            is_output: data.is_output,
            body_size,
        });
    }
    out
}

//! Built-in operator definitions by kind and shape: what `tensorlift tune op KIND` and the
//! auto-scheduler's suite build. Each `OpSpec` builds a fresh `Definition` (new tensor ids every
//! call) whose workload key depends only on the kind, the shape and the dtypes.

mod batch_matmul;
mod conv2d;
mod pool;
mod requantized;

use ir::te::{placeholder, placeholder_vec};
use ir::{DType, TeError, Tensor};
use serde::{Deserialize, Serialize};

pub use batch_matmul::batch_matmul_int8;
pub use conv2d::conv2d_nhwc_int8;
pub use pool::max_pool_nhwc;
pub use requantized::requantized;

use crate::nn;
use crate::quant::Param;

/// The element type of `matmul`'s operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulDtype {
    /// u8 × i8 → i32, exact.
    U8,
    /// f32 × f32 → f32, the reduction in increasing `k`.
    F32,
}

/// A built-in operator at one shape. The serialized form is what candidates and records carry:
/// `{"kind": "matmul", "m": 64, ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OpSpec {
    /// `C[m, n] = Σ_k A[m, k]·B[k, n]`: u8 × i8 → i32, or f32.
    Matmul { m: i64, n: i64, k: i64, dtype: MatmulDtype },
    /// NHWC int8 convolution, batch 1: `src: u8[1, h, w, ic]`, `weights: i8[oc, kh, kw, ic/groups]`
    /// → `i32[1, oh, ow, oc]`, zero padding; depthwise when `groups = ic = oc`.
    Conv2d { ic: i64, oc: i64, h: i64, w: i64, kh: i64, kw: i64, stride: i64, pad: i64, groups: i64 },
    /// `C[b, m, n] = Σ_k A[b, m, k]·B[b, k, n]`, u8 × i8 → i32.
    BatchMatmul { b: i64, m: i64, n: i64, k: i64 },
    /// u8 max pooling of `src: [1, h, w, c]` (NHWC), a `k × k` window at `stride`, no padding.
    Pool { c: i64, h: i64, w: i64, k: i64, stride: i64 },
    /// f32 softmax over the last axis of `[rows, cols]` (`nn::softmax`).
    Softmax { rows: i64, cols: i64 },
    /// f32 layer normalization over the last axis of `[rows, cols]` (`nn::layernorm`, eps 1e-5).
    Layernorm { rows: i64, cols: i64 },
    /// An int8 contraction (`of`: a u8 `matmul` or a `conv2d`) ending as the quantized layers
    /// end (`requantized`): its i32 accumulator requantized to u8.
    Requantized { of: Box<OpSpec> },
}

/// A definition built from an `OpSpec`: its inputs (in call order) and outputs.
#[derive(Clone, Debug)]
pub struct Definition {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    /// The inputs known when the function is compiled (a layer's weights): the auto-scheduler
    /// may prepare them once, outside the call (`auto::Space::with_constants`). Empty: every
    /// input is a runtime input.
    pub constants: Vec<Tensor>,
    /// Arithmetic operations of one evaluation (a multiply-add is 2), for GOPS.
    pub ops: f64,
    /// The inputs whose contents the definition fixes, as a layer binds them (a requantization's
    /// per-channel scale, zero point and lower bound): measurement binds these values rather
    /// than a pattern. Empty for most kinds.
    pub params: Vec<Param>,
}

impl Definition {
    /// The call's arguments: the inputs, then the outputs.
    pub fn args(&self) -> Vec<Tensor> {
        self.inputs.iter().chain(&self.outputs).cloned().collect()
    }

    /// This definition with every input a runtime input (no constants).
    pub fn with_runtime_inputs(mut self) -> Definition {
        self.constants.clear();
        self
    }

    /// The outputs as references, as `create_schedule` and `workload_key` take them.
    pub fn output_refs(&self) -> Vec<&Tensor> {
        self.outputs.iter().collect()
    }
}

impl OpSpec {
    /// The kind as the CLI spells it (`matmul`, `conv2d`, `batch-matmul`, `pool`, `softmax`,
    /// `layernorm`).
    pub fn kind(&self) -> &'static str {
        match self {
            OpSpec::Matmul { .. } => "matmul",
            OpSpec::Conv2d { .. } => "conv2d",
            OpSpec::BatchMatmul { .. } => "batch-matmul",
            OpSpec::Pool { .. } => "pool",
            OpSpec::Softmax { .. } => "softmax",
            OpSpec::Layernorm { .. } => "layernorm",
            OpSpec::Requantized { of } => of.kind(),
        }
    }

    /// A short readable name with the shape, e.g. `matmul 512x512x512 f32`.
    pub fn label(&self) -> String {
        match self {
            OpSpec::Matmul { m, n, k, dtype } => {
                format!("matmul {m}x{n}x{k} {}", if *dtype == MatmulDtype::U8 { "u8" } else { "f32" })
            }
            OpSpec::Conv2d { ic, oc, h, w, kh, kw, stride, pad, groups } => {
                format!("conv2d {h}x{w} {ic}->{oc} {kh}x{kw} s{stride} p{pad} g{groups}")
            }
            OpSpec::BatchMatmul { b, m, n, k } => format!("batch-matmul {b}x{m}x{n}x{k}"),
            OpSpec::Pool { c, h, w, k, stride } => format!("pool {h}x{w}x{c} k{k} s{stride}"),
            OpSpec::Softmax { rows, cols } => format!("softmax {rows}x{cols}"),
            OpSpec::Layernorm { rows, cols } => format!("layernorm {rows}x{cols}"),
            OpSpec::Requantized { of } => format!("{} requantized u8", of.label()),
        }
    }

    /// A fresh definition. Errors (typed, naming the op) for a shape the definition rejects.
    pub fn build(&self) -> Result<Definition, TeError> {
        match *self {
            OpSpec::Requantized { ref of } => requantized(of),
            OpSpec::Matmul { m, n, k, dtype } => {
                let (ad, bd, out) = match dtype {
                    MatmulDtype::U8 => (DType::U8, DType::I8, DType::I32),
                    MatmulDtype::F32 => (DType::F32, DType::F32, DType::F32),
                };
                let a = placeholder([m, k], ad, "A")?;
                let b = placeholder([k, n], bd, "B")?;
                let c = nn::matmul(&a, &b, out, "C")?;
                let constants = vec![b.clone()];
                Ok(Definition {
                    inputs: vec![a, b],
                    outputs: vec![c],
                    constants,
                    ops: 2.0 * (m * n * k) as f64,
                    params: vec![],
                })
            }
            OpSpec::Conv2d { ic, oc, h, w, kh, kw, stride, pad, groups } => {
                let src = placeholder([1, h, w, ic], DType::U8, "src")?;
                let icg = if groups > 0 && ic % groups == 0 { ic / groups } else { ic };
                let weights = placeholder([oc, kh, kw, icg], DType::I8, "weights")?;
                let out = conv2d_nhwc_int8(&src, &weights, stride, pad, groups, "conv")?;
                let ops = 2.0 * out.shape().iter().product::<i64>() as f64 * (kh * kw * icg) as f64;
                let constants = vec![weights.clone()];
                Ok(Definition { inputs: vec![src, weights], outputs: vec![out], constants, ops, params: vec![] })
            }
            OpSpec::BatchMatmul { b, m, n, k } => {
                let a = placeholder([b, m, k], DType::U8, "A")?;
                let bt = placeholder([b, k, n], DType::I8, "B")?;
                let c = batch_matmul_int8(&a, &bt, "C")?;
                Ok(Definition {
                    inputs: vec![a, bt],
                    outputs: vec![c],
                    constants: vec![],
                    ops: 2.0 * (b * m * n * k) as f64,
                    params: vec![],
                })
            }
            OpSpec::Pool { c, h, w, k, stride } => {
                let src = placeholder([1, h, w, c], DType::U8, "src")?;
                let out = max_pool_nhwc(&src, k, stride, "pool")?;
                let ops = out.shape().iter().product::<i64>() as f64 * (k * k) as f64;
                Ok(Definition { inputs: vec![src], outputs: vec![out], constants: vec![], ops, params: vec![] })
            }
            OpSpec::Softmax { rows, cols } => {
                let x = placeholder([rows, cols], DType::F32, "x")?;
                let sm = nn::softmax(&x, "softmax")?;
                // max, subtract + exp (counted as one), sum, divide.
                Ok(Definition {
                    inputs: vec![x],
                    outputs: vec![sm.output],
                    constants: vec![],
                    ops: 4.0 * (rows * cols) as f64,
                    params: vec![],
                })
            }
            OpSpec::Layernorm { rows, cols } => {
                let x = placeholder([rows, cols], DType::F32, "x")?;
                let gamma = placeholder_vec(vec![cols], DType::F32, "gamma")?;
                let beta = placeholder_vec(vec![cols], DType::F32, "beta")?;
                let ln = nn::layernorm(&x, &gamma, &beta, 1e-5, "layernorm")?;
                // sum, centered square (3), normalize (4).
                Ok(Definition {
                    inputs: vec![x, gamma, beta],
                    outputs: vec![ln.output],
                    constants: vec![],
                    ops: 8.0 * (rows * cols) as f64,
                    params: vec![],
                })
            }
        }
    }

    /// The suite of operators without a hand schedule, at their target shapes.
    pub fn suite() -> Vec<OpSpec> {
        vec![
            OpSpec::Conv2d { ic: 32, oc: 32, h: 112, w: 112, kh: 3, kw: 3, stride: 1, pad: 1, groups: 32 },
            OpSpec::BatchMatmul { b: 12, m: 128, n: 64, k: 128 },
            OpSpec::Conv2d { ic: 256, oc: 64, h: 56, w: 56, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 },
            OpSpec::Conv2d { ic: 128, oc: 128, h: 28, w: 28, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
            OpSpec::Matmul { m: 512, n: 512, k: 512, dtype: MatmulDtype::F32 },
            OpSpec::Softmax { rows: 1024, cols: 1024 },
            OpSpec::Layernorm { rows: 512, cols: 768 },
            OpSpec::Pool { c: 64, h: 112, w: 112, k: 3, stride: 2 },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_op_builds_with_a_stable_key() {
        for spec in OpSpec::suite() {
            let a = spec.build().unwrap();
            let b = spec.build().unwrap();
            let (ka, kb) = (ir::workload::workload_key(&a.output_refs()), ir::workload::workload_key(&b.output_refs()));
            assert_eq!(ka, kb, "{}", spec.label());
            assert!(a.ops > 0.0);
        }
    }

    #[test]
    fn specs_round_trip_through_json() {
        let spec = OpSpec::Conv2d { ic: 32, oc: 32, h: 112, w: 112, kh: 3, kw: 3, stride: 1, pad: 1, groups: 32 };
        let text = serde_json::to_string(&spec).unwrap();
        assert!(text.starts_with("{\"kind\":\"conv2d\""), "{text}");
        assert_eq!(serde_json::from_str::<OpSpec>(&text).unwrap(), spec);
    }
}

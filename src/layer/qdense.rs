//! `QDenseSpec`: a quantized matrix product as an imported network gives it (onnxruntime's
//! QGemm or QLinearMatMul with constant weights), and `compile_qdense`, which runs it as the
//! 1×1 convolution of `compile_qconv` over one row of `M` pixels.
//!
//! Semantics, for row `m` and column `n`:
//!
//! ```text
//! acc[m, n] = Σ_k (src[m, k] − zp_src) · w[k, n]
//! dst[m, n] = sat(round(f32(acc + bias[n]) · S[n]) + zp_dst),  S[n] = ((alpha · scale_src) · scale_w[n]) / scale_dst
//! ```
//!
//! with `max(·, zp_dst)` before saturating where `relu` is set (QGemm's order of the scales;
//! QLinearMatMul's is the same with `alpha = 1`).

use schedules::resnet18::DenseLayer;
use schedules::x86_conv::{Conv2dInt8Knobs, default_dense_knobs};

use super::error::{LayerError, SpecError};
use super::kernel_cache::KernelCache;
use super::qcompiled::CompiledQuantized;
use super::qconv::{
    ActQuant, QConvSpec, build_as_conv, check_act, check_output_scales, check_weight_scales, lower_as_conv,
};
use super::qlowered::LoweredQuantized;
use crate::isa::IsaLevel;
use crate::runtime::CompileOptions;

/// A quantized `[M, K] × [K, N]` product with constant s8 weights.
#[derive(Clone, Debug, PartialEq)]
pub struct QDenseSpec {
    /// Names the operator in errors and in the compiled function.
    pub name: String,
    pub src: ActQuant,
    /// Rows of the source (1 for a network's classifier).
    pub m: i64,
    pub k: i64,
    pub n: i64,
    /// i8 `[K, N]`, row-major (ONNX MatMul's B), or `[N, K]` where `weights_transposed` (a Gemm
    /// with `transB = 1`: the 1×1 convolution's own order, which then shares them uncopied).
    pub weights: crate::shared::Shared<i8>,
    /// The weights are `[N, K]`.
    pub weights_transposed: bool,
    /// One scale, or `N` (per column).
    pub weight_scales: Vec<f32>,
    /// i32 `[N]`, quantized with scale `alpha · scale_src · scale_w[n]` and zero point 0.
    pub bias: Option<Vec<i32>>,
    /// QGemm's `alpha` (1 for QLinearMatMul), finite and positive.
    pub alpha: f32,
    pub dst: ActQuant,
    pub relu: bool,
}

impl QDenseSpec {
    /// Operations (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        [self.m, self.k, self.n].iter().fold(2u64, |n, &d| n.saturating_mul(d.max(0) as u64))
    }

    fn error(&self, what: &str, expected: impl Into<String>, found: impl Into<String>) -> SpecError {
        SpecError { op: self.op(), what: what.to_string(), expected: expected.into(), found: found.into() }
    }

    fn op(&self) -> String {
        format!("quantized matmul {}", self.name)
    }

    /// Every field against the others (what `compile_qdense` checks first).
    pub fn check(&self) -> Result<(), SpecError> {
        const MAX: i64 = 1 << 20;
        if let Some((what, v)) =
            [("m", self.m), ("k", self.k), ("n", self.n)].iter().find(|(_, v)| !(1..=MAX).contains(v))
        {
            return Err(self.error(what, format!("in 1..={MAX}"), v.to_string()));
        }
        check_act(&self.op(), "the source", &self.src)?;
        check_act(&self.op(), "the destination", &self.dst)?;
        if self.weights.len() as i64 != self.k * self.n {
            let expected = format!("{} values ([{}, {}])", self.k * self.n, self.k, self.n);
            return Err(self.error("the weights", expected, format!("{} values", self.weights.len())));
        }
        check_weight_scales(&self.op(), &self.weight_scales, self.n)?;
        if let Some(b) = &self.bias
            && b.len() as i64 != self.n
        {
            return Err(self.error("the bias", format!("{} values", self.n), format!("{} values", b.len())));
        }
        let scale = self.alpha * self.src.scale;
        if !(self.alpha.is_finite() && self.alpha > 0.0 && scale.is_finite() && scale > 0.0) {
            return Err(self.error("alpha", "finite and positive, times the source scale too", self.alpha.to_string()));
        }
        check_output_scales(&self.op(), scale, &self.weight_scales, self.dst.scale)
    }

    /// The 1×1 convolution over `[1, 1, M, K]` that computes it: weights `[N, K, 1, 1]` (the
    /// transposed weights shared as they are, the others transposed), and
    /// `alpha · scale_src` as the source scale (QGemm forms `alpha · scale_src` first).
    fn as_conv(&self) -> QConvSpec {
        let (k, n) = (self.k as usize, self.n as usize);
        let weights = if self.weights_transposed {
            self.weights.clone()
        } else {
            super::transpose::transpose_i8(&self.weights, k, n).into()
        };
        QConvSpec {
            name: self.name.clone(),
            src: ActQuant { scale: self.alpha * self.src.scale, ..self.src },
            h: 1,
            w: self.m,
            ic: self.k,
            oc: self.n,
            kh: 1,
            kw: 1,
            stride: (1, 1),
            pads: [0; 4],
            weights,
            weight_scales: self.weight_scales.clone(),
            bias: self.bias.clone(),
            dst: self.dst,
            relu: self.relu,
            sum: None,
        }
    }
}

/// Compiles `spec` (`compile_qconv` of its 1×1 convolution) with `knobs` (default:
/// `default_dense_knobs` on its `M` rows), its weights prepared once. `run` takes `[M, K]` and
/// gives `[M, N]`. Errors: the spec's (`QDenseSpec::check`), knobs, code generation.
pub fn compile_qdense(
    spec: &QDenseSpec,
    knobs: Option<Conv2dInt8Knobs>,
    options: &CompileOptions,
) -> Result<CompiledQuantized, LayerError> {
    compile_qdense_in(&KernelCache::new(), spec, knobs, options)
}

/// `compile_qdense` with the per-call function from `cache` where possible (`compile_qconv_in`).
pub fn compile_qdense_in(
    cache: &KernelCache,
    spec: &QDenseSpec,
    knobs: Option<Conv2dInt8Knobs>,
    options: &CompileOptions,
) -> Result<CompiledQuantized, LayerError> {
    spec.check()?;
    let layer = DenseLayer { name: "qdense", in_features: spec.k, out_features: spec.n };
    let knobs = knobs.unwrap_or_else(|| default_dense_knobs(&layer, spec.m));
    build_as_conv(cache, &spec.as_conv(), knobs, options, spec.ops(), (spec.m, spec.k, spec.n))
}

/// `compile_qdense`'s definition lowered for `level` with its weights prepared, without
/// compiling (`LoweredQuantized`; knobs default as `compile_qdense`'s).
pub fn lower_qdense(
    spec: &QDenseSpec,
    knobs: Option<Conv2dInt8Knobs>,
    level: IsaLevel,
) -> Result<LoweredQuantized, LayerError> {
    spec.check()?;
    let layer = DenseLayer { name: "qdense", in_features: spec.k, out_features: spec.n };
    let knobs = knobs.unwrap_or_else(|| default_dense_knobs(&layer, spec.m));
    lower_as_conv(&spec.as_conv(), knobs, level, (spec.m, spec.k, spec.n))
}

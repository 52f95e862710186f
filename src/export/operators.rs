//! Ready-made operators for `export` (what `tensorlift export` builds).

use ir::{DType, LowerError, ScheduleError, TeError};
use schedules::nn::{gemm_source, matmul_packed, pack_b_vnni};
use schedules::ops::{GemmOperands, Layout};
use schedules::quant::QuantError;
use schedules::resnet18::{self, Layer, WeightBits};
use schedules::x86::{GemmInt8Knobs, schedule_gemm_int8, schedule_gemm_source};
use schedules::x86_conv::{Conv2dInt8Error, Conv2dInt8Knobs, CoreRate, Packing, default_knobs, table_layer};
use thiserror::Error;

use super::Operator;
use crate::build::lower_at;
use crate::isa::IsaLevel;
use crate::layer::{LayerData, NotInTable};
use crate::record::Record;

/// Errors from defining an operator for export.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OperatorError {
    #[error("{what}: expected {expected}, found {found}")]
    Size { what: &'static str, expected: &'static str, found: i64 },
    #[error(transparent)]
    Te(#[from] TeError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Conv(#[from] Conv2dInt8Error),
    #[error(transparent)]
    NotInTable(#[from] NotInTable),
}

/// `matmul`: `C: i32[M, N] = A: u8[M, K] · B: i8[K, N]`, exact, with plain row-major operands
/// of any positive sizes. Inside one call `B` is packed into VNNI panels of `nr` columns, the
/// last padded with zero columns, and zero rows up to a multiple of 4 (`nn::pack_b_vnni`); where
/// `K` is not a multiple of 4, `A` is copied with zero columns up to one (`nn::gemm_source`);
/// then `schedules::x86` tensorizes the product into the best micro-kernel of the level
/// (`vpdpbusd`, or exact widening on AVX2, or the loop nest). Tiles are
/// `GemmInt8Knobs::for_shape`'s, which divide `C` wherever a divisor allows (a tile sticking
/// out of `C` runs loops instead of the kernel), so the shapes that `8 × 32` divides keep it.
pub fn matmul(m: i64, n: i64, k: i64, levels: &[IsaLevel]) -> Result<Operator, OperatorError> {
    for (what, v) in [("M", m), ("N", n), ("K", k)] {
        if v <= 0 {
            return Err(OperatorError::Size { what, expected: "a positive size", found: v });
        }
    }
    let knobs = GemmInt8Knobs::for_shape(m, n, false);
    let a = ir::te::placeholder([m, k], DType::U8, "A")?;
    let b = ir::te::placeholder([k, n], DType::I8, "B")?;
    let packed = pack_b_vnni(&b, knobs.nr, "Bp")?;
    let source = gemm_source(&a, 4, DType::U8, "A4")?;
    let c = matmul_packed(source.as_ref().unwrap_or(&a), &packed, n, DType::I32, "C")?;
    let mut s = ir::schedule::create_schedule(&[&c]);
    s.parallel(&packed, &packed.axis(0))?;
    if let Some(source) = &source {
        schedule_gemm_source(&mut s, source, true)?;
    }
    schedule_gemm_int8(&mut s, &c, knobs)?;
    Ok(Operator::per_level("matmul", levels, |level| lower_at(&s, &[&a, &b, &c], "matmul", level))?)
}

/// The threads a library's layer runs on: its pool is sized where the library loads
/// (`TENSORLIFT_NUM_THREADS`, else every CPU), so a layer's knobs only say whether its loops
/// run on the pool (`Conv2dInt8Knobs::threads` above 1) or not.
const LIBRARY_THREADS: usize = usize::MAX;

/// The knobs of `layer` at `level` for weights in `weights`' range, and the GEMM operands they
/// give: the tuning record's knobs, else `default_knobs` for the level (the library loads on
/// CPUs not known here: `avx512-vnni` as on 512-bit units); the kernel family by level and
/// range with the weights packed as bytes at every level (`Packing::Bytes`), so that one
/// preparation serves every level.
fn layer_knobs(
    layer: Layer,
    level: IsaLevel,
    weights: WeightBits,
    tuning: Option<&Record>,
) -> (Conv2dInt8Knobs, GemmOperands) {
    let rate = match level {
        IsaLevel::Amx => CoreRate::Tiles,
        _ if level.has_avx512() => CoreRate::FullZmmVnni,
        _ => CoreRate::Slower,
    };
    // The panel width shapes the prepared weights, an argument every level shares: the tile
    // defaults keep the other levels' `nr`.
    let shared_nr = default_knobs(layer, CoreRate::FullZmmVnni, LIBRARY_THREADS).nr;
    let knobs = tuning
        .and_then(|r| r.schedule.knobs)
        .unwrap_or_else(|| Conv2dInt8Knobs { nr: shared_nr, ..default_knobs(layer, rate, LIBRARY_THREADS) });
    let knobs = Conv2dInt8Knobs { packing: Packing::Bytes, ..knobs };
    (knobs, knobs.operands(level.has_vnni(), weights.range()))
}

/// Layer `layer` of the resnet-18 table, with the quantization `tensorlift resnet18` runs it
/// with (`layer::LayerData::quantization`), as two operators, named after the layer in lower
/// case:
/// * `<layer>_prepare(weights, packed, compensation)`: the weight preparation
///   (`x86_conv::prepare_conv2d_int8`), run once per set of weights;
/// * `<layer>(src, packed, compensation, bias, multipliers, out)`: the layer, NHWC
///   (`x86_conv::conv2d_int8`, FC: `x86_conv::dense_int8` on `[1, IC]`), u8 output.
///
/// The weights must lie in `weights`' range (checked on every call of the layer, as the code
/// of some levels relies on it). A prepared set of weights is valid for the level that
/// prepared it, i.e. on the machine (and `TENSORLIFT_ISA`) that runs the layer. With a
/// `tuning` record (`record::Record`), both take its knobs and carry it into the manifest.
pub fn resnet18_layer(
    layer: Layer,
    levels: &[IsaLevel],
    weights: WeightBits,
    tuning: Option<&Record>,
) -> Result<[Operator; 2], OperatorError> {
    let quant = resnet18::quantization(layer, LayerData::seed(layer)?)?;
    let name = layer.name().to_ascii_lowercase();
    let lower = |level, prepare: bool| -> Result<ir::Func, OperatorError> {
        let (knobs, operands) = layer_knobs(layer, level, weights, tuning);
        let (prep, run) = table_layer(layer, &quant, knobs, operands, Layout::Nhwc, &name)?;
        Ok(if prepare {
            lower_at(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), &format!("{name}_prepare"), level)?
        } else {
            lower_at(&run.schedule, &run.args.iter().collect::<Vec<_>>(), &name, level)?
        })
    };
    let prepare = Operator::per_level(&format!("{name}_prepare"), levels, |level| lower(level, true))?;
    let run = Operator::per_level(&name, levels, |level| lower(level, false))?;
    let record = tuning.map(|r| serde_json::to_value(r).expect("records serialize"));
    Ok([Operator { tuning: record.clone(), ..prepare }, Operator { tuning: record, ..run }])
}

/// Every layer of the resnet-18 table (R1..R11, FC), each as `resnet18_layer`'s two operators,
/// with `tuning(layer)`'s record where it gives one.
pub fn resnet18(
    levels: &[IsaLevel],
    weights: WeightBits,
    tuning: impl Fn(Layer) -> Option<Record>,
) -> Result<Vec<Operator>, OperatorError> {
    let mut ops = Vec::new();
    for layer in resnet18::layers() {
        ops.extend(resnet18_layer(layer, levels, weights, tuning(layer).as_ref())?);
    }
    Ok(ops)
}

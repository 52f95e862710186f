//! `Operator`, what `export` takes: one lowered function per ISA level (ready-made ones are in
//! `operators`); and `OpInfo`, an operator as the C side sees it, with the checks that every
//! level's function takes the same parameters and that the ABI can pass them.

use std::collections::BTreeMap;

use ir::DType;

use super::{ExportError, MAX_ARGS};
use crate::isa::IsaLevel;

/// One operator to export: a lowered function (`ir::lower`) per ISA level. Every level's function
/// takes the same parameters (names, dtypes, shapes); declared value ranges may differ.
#[derive(Clone, Debug)]
pub struct Operator {
    /// The exported symbol is `<library name>_<name>`: a C identifier.
    pub name: String,
    pub funcs: BTreeMap<IsaLevel, ir::Func>,
    /// The tuning record the schedule came from, copied into the manifest.
    pub tuning: Option<serde_json::Value>,
}

impl Operator {
    /// The same function on every level in `levels`.
    pub fn portable(name: &str, func: &ir::Func, levels: &[IsaLevel]) -> Operator {
        Operator { name: name.to_string(), funcs: levels.iter().map(|&l| (l, func.clone())).collect(), tuning: None }
    }

    /// `lower(level)` on every level in `levels` (schedules that pick kernels by level).
    pub fn per_level<E>(
        name: &str,
        levels: &[IsaLevel],
        mut lower: impl FnMut(IsaLevel) -> Result<ir::Func, E>,
    ) -> Result<Operator, E> {
        let mut funcs = BTreeMap::new();
        for &level in levels {
            funcs.insert(level, lower(level)?);
        }
        Ok(Operator { name: name.to_string(), funcs, tuning: None })
    }
}

/// Where a parameter's value goes, from the manifest's point of view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParamInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// Generated code of some level stores to it.
    pub output: bool,
    /// Per compiled level (in `levels` order), the range that level's code relies on.
    pub ranges: Vec<Option<(i64, i64)>>,
}

/// An operator ready for the C side: parameters and, per level, the entry symbol.
pub(crate) struct OpInfo {
    pub name: String,
    pub params: Vec<ParamInfo>,
    pub entries: Vec<(IsaLevel, String)>,
    /// Per level (as `entries`), the tensors whose gathers are checked at run time, numbered as
    /// the generated code's `STATUS_INDEX_OUT_OF_BOUNDS + n` numbers them.
    pub checked: Vec<Vec<String>>,
    pub tuning: Option<serde_json::Value>,
}

/// A range the code relies on that the dtype does not already guarantee.
fn checked_range(dtype: DType, range: Option<(i64, i64)>) -> Option<(i64, i64)> {
    range.filter(|&(lo, hi)| {
        !dtype.scalar.int_range().is_some_and(|(min, max)| i128::from(lo) <= min && max <= i128::from(hi))
    })
}

/// The parameters of `func`, a function of operator `op` whose code stores to the parameters
/// `stored` says, as the manifest sees them; errors for what the ABI cannot pass.
pub(super) fn level_params(op: &str, func: &ir::Func, stored: Vec<bool>) -> Result<Vec<ParamInfo>, ExportError> {
    let this: Vec<ParamInfo> = func
        .params
        .iter()
        .zip(stored)
        .map(|(p, output)| ParamInfo {
            name: p.name().to_string(),
            dtype: p.dtype(),
            shape: p.shape().to_vec(),
            output,
            ranges: vec![checked_range(p.dtype(), p.value_range())],
        })
        .collect();
    if let Some(p) = this.iter().find(|p| p.dtype.is_vector()) {
        return Err(ExportError::VectorParameter { op: op.to_string(), param: p.name.clone(), dtype: p.dtype });
    }
    if this.len() > MAX_ARGS {
        return Err(ExportError::TooManyParameters { op: op.to_string(), count: this.len(), max: MAX_ARGS });
    }
    Ok(this)
}

/// Adds `this`, the parameters of operator `op`'s function for `level`, to `params`, those of its
/// functions so far (with the first one's level): every level's must have the same names, dtypes
/// and shapes; a parameter is an output if any level stores to it, and keeps each level's range.
pub(super) fn merge_params(
    params: &mut Option<(IsaLevel, Vec<ParamInfo>)>,
    op: &str,
    level: IsaLevel,
    this: Vec<ParamInfo>,
) -> Result<(), ExportError> {
    match params {
        None => *params = Some((level, this)),
        Some((first, known)) => {
            let same = |a: &ParamInfo, b: &ParamInfo| a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
            if known.len() != this.len() || known.iter().zip(&this).any(|(a, b)| !same(a, b)) {
                let show = |ps: &[ParamInfo]| {
                    ps.iter().map(|p| format!("{}: {}{:?}", p.name, p.dtype, p.shape)).collect::<Vec<_>>().join(", ")
                };
                return Err(ExportError::ParameterMismatch {
                    op: op.to_string(),
                    level,
                    first: *first,
                    detail: format!("({}) vs ({})", show(&this), show(known)),
                });
            }
            for (k, p) in known.iter_mut().zip(this) {
                k.output |= p.output;
                k.ranges.extend(p.ranges);
            }
        }
    }
    Ok(())
}

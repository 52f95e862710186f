//! Object emission: each operator's function per level translated by the JIT's code generator
//! (`codegen::translate`) into a position-independent ELF object (`cranelift-object`), its entry
//! hidden, written into the build directory.

use std::path::Path;

use cranelift_module::{DataDescription, Linkage, Module, default_libcall_names};
use cranelift_object::{ObjectBuilder, ObjectModule};

use super::interface::io_error;
use super::operator::{OpInfo, ParamInfo, level_params, merge_params};
use super::{ExportError, Operator, is_c_identifier};
use crate::codegen::build_object_isa;
use crate::codegen::translate;
use crate::error::CompileError;
use crate::isa::IsaLevel;
use crate::target::OptLevel;

/// Every operator of the library `name` translated at every level of `levels` into an object file
/// in `build_dir`: returns the operators as the C side sees them and the object files' names (in
/// `build_dir`), in link order.
pub(super) fn emit_objects(
    operators: &[Operator],
    name: &str,
    levels: &[IsaLevel],
    opt: OptLevel,
    build_dir: &Path,
) -> Result<(Vec<OpInfo>, Vec<String>), ExportError> {
    let asked = levels.iter().map(|l| l.name()).collect::<Vec<_>>().join(",");
    let mut ops = Vec::new();
    let mut objects = Vec::new();
    for op in operators {
        if !is_c_identifier(&op.name) {
            return Err(ExportError::BadName { what: "operator name", found: op.name.clone() });
        }
        if ops.iter().any(|o: &OpInfo| o.name == op.name) {
            return Err(ExportError::DuplicateOperator { name: op.name.clone() });
        }
        let mut params: Option<(IsaLevel, Vec<ParamInfo>)> = None;
        let mut entries = Vec::new();
        let mut checked = Vec::new();
        for &level in levels {
            let func = op.funcs.get(&level).ok_or_else(|| ExportError::MissingLevel {
                op: op.name.clone(),
                level,
                asked: asked.clone(),
            })?;
            let symbol = format!("tlx_{name}__{}__{}", op.name, level.name().replace('-', "_"));
            let (bytes, stored) = emit_object(func, &symbol, level, opt).map_err(|e| e.into_export(&op.name, level))?;
            let file = format!("{}__{}.o", op.name, level.name().replace('-', "_"));
            let path = build_dir.join(&file);
            std::fs::write(&path, bytes).map_err(io_error(&path))?;
            objects.push(file);
            entries.push((level, symbol));
            checked.push(ir::passes::checked_buffers(func).iter().map(|b| b.name().to_string()).collect());
            let this = level_params(&op.name, func, stored)?;
            merge_params(&mut params, &op.name, level, this)?;
        }
        let params = params.map(|(_, p)| p).unwrap_or_default();
        ops.push(OpInfo { name: op.name.clone(), params, entries, checked, tuning: op.tuning.clone() });
    }
    Ok((ops, objects))
}

/// A translation failure, before the operator's name is known.
pub(super) enum EmitError {
    Compile(CompileError),
    Object(String),
}

impl EmitError {
    pub(super) fn into_export(self, op: &str, level: IsaLevel) -> ExportError {
        match self {
            EmitError::Compile(source) => ExportError::Compile { op: op.to_string(), level, source },
            EmitError::Object(message) => ExportError::Object { op: op.to_string(), level, message },
        }
    }
}

/// The ELF object of `func` compiled for `level`, its entry named `symbol` (hidden), and which
/// parameters it stores to.
pub(super) fn emit_object(
    func: &ir::Func,
    symbol: &str,
    level: IsaLevel,
    opt: OptLevel,
) -> Result<(Vec<u8>, Vec<bool>), EmitError> {
    let isa = build_object_isa(level, opt).map_err(EmitError::Compile)?;
    let builder = ObjectBuilder::new(isa, symbol.as_bytes().to_vec(), default_libcall_names())
        .map_err(|e| EmitError::Object(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let mut func = func.clone();
    func.name = symbol.to_string();
    let translation = translate(&mut module, &func, Linkage::Hidden, level).map_err(EmitError::Compile)?;
    let bytes = module.finish().emit().map_err(|e| EmitError::Object(e.to_string()))?;
    Ok((bytes, translation.stored_params))
}

/// An ELF object holding `bytes` as read-only data under the hidden symbol `symbol`, aligned to
/// `align` bytes.
pub(super) fn emit_data(symbol: &str, bytes: Vec<u8>, align: u64) -> Result<Vec<u8>, String> {
    let isa = build_object_isa(IsaLevel::Scalar, OptLevel::None).map_err(|e| e.to_string())?;
    let builder =
        ObjectBuilder::new(isa, symbol.as_bytes().to_vec(), default_libcall_names()).map_err(|e| e.to_string())?;
    let mut module = ObjectModule::new(builder);
    let id = module.declare_data(symbol, Linkage::Hidden, false, false).map_err(|e| e.to_string())?;
    let mut data = DataDescription::new();
    data.define(bytes.into_boxed_slice());
    data.set_align(align);
    module.define_data(id, &data).map_err(|e| e.to_string())?;
    module.finish().emit().map_err(|e| e.to_string())
}

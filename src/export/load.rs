//! Loading an exported library from Rust (`libloading`): the manifest, and calls on `Tensor`s or
//! on raw `DLTensor`s.

use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};

use ir::DType;
use thiserror::Error;

use super::ErrorCode;
use super::dlpack::{DL_CPU, DLDevice, DLTensor, dl_dtype, from_dl_name};
use crate::runtime::Tensor;

/// Errors from loading and calling an exported library.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("{path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("{path}: expected a file named lib<NAME>.so")]
    FileName { path: PathBuf },
    #[error("manifest of {name}: {message}")]
    Manifest { name: String, message: String },
    #[error("library {library} has no operator {op:?} (it has: {available})")]
    NoOperator { library: String, op: String, available: String },
    /// The library's own error: its code and `NAME_last_error()`.
    #[error("{op}: error {code:?}: {message}")]
    Call { op: String, code: Option<ErrorCode>, raw: i32, message: String },
}

/// One argument as the manifest describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub output: bool,
}

type OpFn = unsafe extern "C" fn(*const *mut DLTensor, i32) -> i32;
type TextFn = unsafe extern "C" fn() -> *const c_char;

struct LoadedOp {
    name: String,
    args: Vec<ArgSpec>,
    func: OpFn,
}

/// An exported library, loaded.
pub struct LoadedLibrary {
    name: String,
    manifest: serde_json::Value,
    ops: Vec<LoadedOp>,
    last_error: TextFn,
    // Last: the function pointers above point into it.
    _lib: libloading::Library,
}

fn text(f: TextFn) -> String {
    // SAFETY: the library's text functions return NUL-terminated strings that live as long as
    // the library (the manifest) or until this thread's next call (the last error).
    unsafe { CStr::from_ptr(f()) }.to_string_lossy().into_owned()
}

impl LoadedLibrary {
    /// Loads `lib<NAME>.so` and reads its manifest.
    pub fn open(path: &Path) -> Result<LoadedLibrary, LoadError> {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        let name = file
            .strip_prefix("lib")
            .and_then(|f| f.strip_suffix(".so"))
            .filter(|n| !n.is_empty())
            .ok_or_else(|| LoadError::FileName { path: path.to_path_buf() })?
            .to_string();
        let open = |message: String| LoadError::Open { path: path.to_path_buf(), message };
        // SAFETY: an exported tensorlift library runs no initializers with preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| open(e.to_string()))?;
        let symbol = |s: &str| -> Result<*const c_void, LoadError> {
            // SAFETY: only the address is taken; it is cast to the ABI's signature below.
            unsafe { lib.get::<*const c_void>(s.as_bytes()) }.map(|f| *f).map_err(|e| open(e.to_string()))
        };
        // SAFETY: these symbols have the ABI's signatures (`export` module doc).
        let manifest_fn: TextFn = unsafe { std::mem::transmute(symbol(&format!("{name}_manifest"))?) };
        let last_error: TextFn = unsafe { std::mem::transmute(symbol(&format!("{name}_last_error"))?) };
        let bad = |message: String| LoadError::Manifest { name: name.clone(), message };
        let manifest: serde_json::Value = serde_json::from_str(&text(manifest_fn)).map_err(|e| bad(e.to_string()))?;
        let mut ops = Vec::new();
        for op in manifest["operators"].as_array().ok_or_else(|| bad("no operators array".into()))? {
            let op_name = op["name"].as_str().ok_or_else(|| bad("an operator without a name".into()))?.to_string();
            let mut args = Vec::new();
            for a in op["args"].as_array().ok_or_else(|| bad(format!("{op_name}: no args")))? {
                let dtype =
                    a["dtype"].as_str().and_then(from_dl_name).ok_or_else(|| bad(format!("{op_name}: dtype")))?;
                let shape = a["shape"]
                    .as_array()
                    .and_then(|s| s.iter().map(serde_json::Value::as_i64).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| bad(format!("{op_name}: shape")))?;
                args.push(ArgSpec {
                    name: a["name"].as_str().unwrap_or_default().to_string(),
                    dtype,
                    shape,
                    output: a["role"] == "output",
                });
            }
            // SAFETY: every manifest operator is exported with the ABI's operator signature.
            let func: OpFn = unsafe { std::mem::transmute(symbol(&format!("{name}_{op_name}"))?) };
            ops.push(LoadedOp { name: op_name, args, func });
        }
        Ok(LoadedLibrary { name, manifest, ops, last_error, _lib: lib })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The manifest `NAME_manifest()` returned.
    pub fn manifest(&self) -> &serde_json::Value {
        &self.manifest
    }

    /// The ISA level calls run at on this CPU.
    pub fn selected_isa(&self) -> &str {
        self.manifest["selected_isa"].as_str().unwrap_or("none")
    }

    /// Operator names, in manifest order.
    pub fn operators(&self) -> Vec<&str> {
        self.ops.iter().map(|o| o.name.as_str()).collect()
    }

    /// The arguments of operator `op`, in call order.
    pub fn args(&self, op: &str) -> Result<&[ArgSpec], LoadError> {
        Ok(&self.op(op)?.args)
    }

    fn op(&self, op: &str) -> Result<&LoadedOp, LoadError> {
        self.ops.iter().find(|o| o.name == op).ok_or_else(|| LoadError::NoOperator {
            library: self.name.clone(),
            op: op.to_string(),
            available: self.operators().join(", "),
        })
    }

    /// Calls `op` on tensors (compact, CPU). The library checks them: a mismatch is its error.
    pub fn call(&self, op: &str, args: &mut [&mut Tensor]) -> Result<(), LoadError> {
        let mut shapes: Vec<Vec<i64>> = args.iter().map(|t| t.shape().to_vec()).collect();
        let mut tensors: Vec<DLTensor> = args
            .iter_mut()
            .zip(&mut shapes)
            .map(|(t, shape)| DLTensor {
                data: t.data_ptr().cast(),
                device: DLDevice { device_type: DL_CPU, device_id: 0 },
                ndim: shape.len() as i32,
                dtype: dl_dtype(t.dtype()),
                shape: shape.as_mut_ptr(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            })
            .collect();
        let mut pointers: Vec<*mut DLTensor> = tensors.iter_mut().map(|t| t as *mut DLTensor).collect();
        // SAFETY: every DLTensor describes a live `Tensor` borrowed mutably for the call.
        unsafe { self.call_raw(op, &mut pointers, args.len() as i32) }
    }

    /// Calls `op` with `inputs` as its input arguments (in order) and returns its outputs,
    /// allocated as the manifest describes them (Python's `lib.run(x)`): a network library's
    /// `run(&[&x])`. A wrong count, dtype or shape is the library's error.
    pub fn call_inputs(&self, op: &str, inputs: &[&Tensor]) -> Result<Vec<Tensor>, LoadError> {
        let specs = self.args(op)?;
        let mut given = inputs.iter();
        let mut args: Vec<Tensor> = Vec::with_capacity(specs.len().max(inputs.len()));
        let mut outputs = Vec::new();
        for (i, a) in specs.iter().enumerate() {
            if a.output {
                let t = Tensor::zeros(a.dtype, &a.shape)
                    .map_err(|e| LoadError::Manifest { name: self.name.clone(), message: format!("{op}: {e}") })?;
                outputs.push(i);
                args.push(t);
            } else if let Some(t) = given.next() {
                args.push((*t).clone());
            }
        }
        args.extend(given.map(|t| (*t).clone()));
        let mut refs: Vec<&mut Tensor> = args.iter_mut().collect();
        self.call(op, &mut refs)?;
        let mut args: Vec<Option<Tensor>> = args.into_iter().map(Some).collect();
        Ok(outputs.iter().filter_map(|&i| args[i].take()).collect())
    }

    /// `call_inputs` of the operator `run`: a whole exported network.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, LoadError> {
        self.call_inputs("run", inputs)
    }

    /// Calls `op` on raw DLPack arguments, passing `nargs` as given.
    ///
    /// # Safety
    /// Every non-null pointer in `args` must point to a `DLTensor` whose non-null `shape` and
    /// `strides` hold `ndim` elements and whose data holds what its shape and dtype say. The
    /// library checks everything else (counts, NULLs, dtypes, shapes, strides, overlap).
    pub unsafe fn call_raw(&self, op: &str, args: &mut [*mut DLTensor], nargs: i32) -> Result<(), LoadError> {
        let op = self.op(op)?;
        // SAFETY: the caller guarantees the pointers (see above).
        let raw = unsafe { (op.func)(args.as_ptr(), nargs) };
        if raw == 0 {
            return Ok(());
        }
        Err(LoadError::Call {
            op: op.name.clone(),
            code: ErrorCode::from_i32(raw),
            raw,
            message: text(self.last_error),
        })
    }
}

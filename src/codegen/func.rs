//! The per-function translator: statements, loops, outlined parallel bodies, scratch buffers.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    AbiParam, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Type, UserFuncName, Value,
    types,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::{CodegenError, Context};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{FuncId, Linkage, Module, ModuleError};
use ir::expr::VarId;
use ir::stmt::BufferId;
use ir::{Buffer, ForKind, Stmt, StmtKind, Var};

use super::DefinedFunction;
use super::analysis::{self, Promotion};
use super::clif::Clif;
use super::cse::{ExprCache, loop_invariants};
use super::host;
use super::idiom;
use super::intrin::KernelKey;
use super::regalloc;
use super::types::{Val, lane_type, piece_type};
use crate::abi::{ALIGN, HostFn, STATUS_INDEX_OUT_OF_BOUNDS, STATUS_OK, STATUS_OUT_OF_MEMORY};
use crate::error::CompileError;
use crate::isa::IsaLevel;

/// Largest `Allocate` placed in a stack slot; bigger ones go to the heap. Large enough for a
/// row of a convolution's accumulators (R1: 112 pixels × 64 channels × 4 bytes), allocated
/// once per row where a heap allocation per row would cost more than the row's requantization.
const MAX_STACK_BUFFER: i64 = 32 * 1024;
/// Stack bytes one generated function may use for scratch buffers in total.
const STACK_BUDGET: i64 = 64 * 1024;

/// State shared by every Cranelift function generated for one `ir::Func`.
pub(crate) struct ModuleCtx<'m, M: Module> {
    pub module: &'m mut M,
    /// Name of the entry function; outlined bodies are named after it.
    pub name: String,
    pub outlined: usize,
    /// CLIF of every function, as generated (before Cranelift's own passes).
    pub clif: Clif,
    pub host: HashMap<HostFn, FuncId>,
    /// Buffers no statement stores to: their loads may be hoisted and merged.
    pub readonly: HashSet<BufferId>,
    /// Hand-assembled kernels tensor intrinsics may call.
    pub level: IsaLevel,
    /// Every function defined so far.
    pub functions: Vec<DefinedFunction>,
    /// Kernels defined so far.
    pub kernels: HashMap<KernelKey, FuncId>,
    /// Buffers of `BoundsCheck`s, numbered as `ir::passes::checked_buffers` numbers them.
    pub checked: Vec<BufferId>,
    /// The module's ISA with the single-pass register allocator, once a function needs it
    /// (`regalloc`).
    pub single_pass: Option<OwnedTargetIsa>,
}

impl<'m, M: Module> ModuleCtx<'m, M> {
    pub fn new(module: &'m mut M, func: &ir::Func, level: IsaLevel) -> Result<Self, CompileError> {
        let call_conv = module.target_config().default_call_conv;
        let mut host = HashMap::default();
        for f in HostFn::ALL {
            let id = module
                .declare_function(f.symbol(), Linkage::Import, &host::signature(f, call_conv))
                .map_err(|e| module_error(&func.name, e))?;
            host.insert(f, id);
        }
        let stored = analysis::stored_buffers(&func.body);
        let readonly = func.params.iter().map(Buffer::id).filter(|id| !stored.contains(id)).collect();
        Ok(ModuleCtx {
            module,
            name: func.name.clone(),
            outlined: 0,
            clif: Clif::default(),
            host,
            readonly,
            level,
            functions: Vec::new(),
            kernels: HashMap::default(),
            checked: ir::passes::checked_buffers(func).iter().map(Buffer::id).collect(),
            single_pass: None,
        })
    }

    pub fn unsupported(&self, what: impl Into<String>) -> CompileError {
        CompileError::Unsupported { func: self.name.clone(), what: what.into() }
    }
}

pub(crate) fn module_error(func: &str, err: ModuleError) -> CompileError {
    CompileError::Cranelift { func: func.to_string(), message: err.to_string() }
}

/// Where the elements of a buffer live.
#[derive(Clone)]
pub(crate) enum BufLoc {
    /// In memory at this address.
    Memory(Value),
    /// In SSA variables, one per piece or per element (see `analysis::promotion`).
    Promoted { pieces: bool, vars: Vec<Variable> },
}

/// Translates one Cranelift function.
pub(crate) struct FnTx<'f, 'c, 'm, M: Module> {
    pub cx: &'c mut ModuleCtx<'m, M>,
    pub b: FunctionBuilder<'f>,
    pub env: HashMap<VarId, Val>,
    pub buffers: HashMap<BufferId, BufLoc>,
    host_refs: HashMap<HostFn, FuncRef>,
    /// Heap scratch buffers live at the current point, outermost first, to free on failure.
    heap_live: Vec<(Value, i64)>,
    stack_bytes: i64,
    pub cache: ExprCache,
    /// Whether loop nests that fill or copy one contiguous range become libc calls (`idiom`):
    /// in the entry function, where the call lets a function whose other loops make calls take
    /// the single-pass allocator; a parallel body keeps its loops (its fills are a row each).
    pub memory_idioms: bool,
}

/// Builds, records and defines the function `id` with signature `sig`; `fill` emits its body
/// (it must leave the builder in a terminated block).
pub(crate) fn build_function<M: Module>(
    cx: &mut ModuleCtx<'_, M>,
    id: FuncId,
    name: &str,
    sig: Signature,
    fill: impl FnOnce(&mut FnTx<'_, '_, '_, M>) -> Result<(), CompileError>,
) -> Result<(), CompileError> {
    let mut ctx: Context = cx.module.make_context();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let mut fctx = FunctionBuilderContext::new();
    let config = cx.module.target_config();
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let mut tx = FnTx {
            cx: &mut *cx,
            b,
            env: HashMap::default(),
            buffers: HashMap::default(),
            host_refs: HashMap::default(),
            heap_live: Vec::new(),
            stack_bytes: 0,
            cache: ExprCache::default(),
            memory_idioms: false,
        };
        fill(&mut tx)?;
        tx.b.seal_all_blocks();
        tx.b.finalize(config);
    }
    cx.clif.push(name, &ctx.func);
    let defined = if regalloc::single_pass_suffices(&ctx.func) {
        if cx.single_pass.is_none() {
            cx.single_pass = Some(regalloc::single_pass_isa(cx.module.isa())?);
        }
        let isa = cx.single_pass.as_deref().expect("set just above");
        regalloc::define_function_with(cx.module, isa, id, &mut ctx).map_err(|e| *e)
    } else {
        cx.module.define_function(id, &mut ctx)
    };
    defined.map_err(|err| match err {
        ModuleError::Compilation(CodegenError::Verifier(errors)) => CompileError::Cranelift {
            func: name.to_string(),
            message: cranelift_codegen::print_errors::pretty_verifier_error(&ctx.func, None, errors),
        },
        other => module_error(name, other),
    })?;
    let size = ctx.compiled_code().map_or(0, |c| c.code_buffer().len());
    cx.functions.push(DefinedFunction { name: name.to_string(), id, origin: "cranelift".into(), kernel: None, size });
    Ok(())
}

/// Declares and defines the entry function of `func`: `fn(args: *const *mut u8) -> i32`,
/// where `args[k]` points at the data of parameter `k`.
pub(crate) fn define_entry<M: Module>(
    cx: &mut ModuleCtx<'_, M>,
    func: &ir::Func,
    linkage: Linkage,
) -> Result<FuncId, CompileError> {
    let ptr = cx.module.target_config().pointer_type();
    if ptr != types::I64 {
        return Err(cx.unsupported(format!("pointer type {ptr} (only 64-bit targets are supported)")));
    }
    let mut sig = Signature::new(cx.module.target_config().default_call_conv);
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I32));
    let id = cx.module.declare_function(&func.name, linkage, &sig).map_err(|e| module_error(&func.name, e))?;
    build_function(cx, id, &func.name, sig, |tx| {
        let entry = tx.b.create_block();
        tx.b.append_block_params_for_function_params(entry);
        tx.b.switch_to_block(entry);
        let args = tx.b.block_params(entry)[0];
        let flags = MemFlagsData::trusted().with_readonly().with_can_move();
        for (k, param) in func.params.iter().enumerate() {
            let p = tx.b.ins().load(types::I64, flags, args, (k * 8) as i32);
            tx.buffers.insert(param.id(), BufLoc::Memory(p));
        }
        tx.memory_idioms = true;
        tx.stmt(&func.body)?;
        tx.ret_status(STATUS_OK);
        Ok(())
    })?;
    Ok(id)
}

/// One value captured by an outlined loop body, at a byte offset in its closure block.
enum Capture {
    Buffer { id: BufferId, offset: i32 },
    Var { id: VarId, pieces: bool, parts: Vec<(Type, i32)> },
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    pub fn unsupported(&self, what: impl Into<String>) -> CompileError {
        self.cx.unsupported(what)
    }

    pub fn iconst(&mut self, ty: Type, value: i64) -> Value {
        self.b.ins().iconst(ty, value)
    }

    /// Calls a runtime function and returns its results.
    pub fn call_host(&mut self, f: HostFn, args: &[Value]) -> Vec<Value> {
        let fref = match self.host_refs.get(&f) {
            Some(r) => *r,
            None => {
                let r = self.cx.module.declare_func_in_func(self.cx.host[&f], self.b.func);
                self.host_refs.insert(f, r);
                r
            }
        };
        let inst = self.b.ins().call(fref, args);
        self.b.inst_results(inst).to_vec()
    }

    fn ret_status(&mut self, status: i64) {
        let s = self.iconst(types::I32, status);
        self.b.ins().return_(&[s]);
    }

    /// Continues in a new block when `failed` is zero; otherwise frees the live heap buffers
    /// and returns `status` (an i32).
    fn fail_if(&mut self, failed: Value, status: impl FnOnce(&mut Self) -> Value) {
        let fail = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(failed, fail, &[], cont, &[]);
        self.b.switch_to_block(fail);
        self.b.set_cold_block(fail);
        let status = status(self);
        for (ptr, size) in self.heap_live.clone().into_iter().rev() {
            let size = self.iconst(types::I64, size);
            self.call_host(HostFn::Free, &[ptr, size]);
        }
        self.b.ins().return_(&[status]);
        self.b.switch_to_block(cont);
    }

    pub fn stmt(&mut self, stmt: &Stmt) -> Result<(), CompileError> {
        let writes_memory =
            matches!(stmt.kind(), StmtKind::For { .. } | StmtKind::Store { .. } | StmtKind::Call { .. });
        self.translate_stmt(stmt)?;
        if writes_memory {
            self.cache.memory_changed();
        }
        Ok(())
    }

    fn translate_stmt(&mut self, stmt: &Stmt) -> Result<(), CompileError> {
        match stmt.kind() {
            StmtKind::For { var, extent, kind, body } => {
                if self.memory_idioms
                    && let Some(idiom) = idiom::recognize(stmt)
                    && self.emit_idiom(&idiom)?
                {
                    return Ok(());
                }
                match kind {
                    ForKind::Parallel if *extent > 1 => self.parallel_loop(var, *extent, body),
                    ForKind::Serial | ForKind::Parallel => self.serial_loop(var, *extent, body),
                    other => Err(self.unsupported(format!("loop kind {other:?} of {}", var.name()))),
                }
            }
            StmtKind::Let { var, value, body } => {
                let v = self.expr(value)?;
                // Sibling lets may bind the same variable (unrolled copies): values computed
                // from this binding must not outlive its body.
                let previous = self.env.insert(var.id(), v);
                let res = self.scoped(|cx| cx.stmt(body));
                match previous {
                    Some(p) => self.env.insert(var.id(), p),
                    None => self.env.remove(&var.id()),
                };
                res
            }
            StmtKind::Store { buffer, indices, value } => self.store(buffer, indices, value),
            StmtKind::BoundsCheck { cond, buffer } => {
                if !cond.dtype().is_bool() {
                    return Err(self.unsupported(format!("bounds check condition of type {}", cond.dtype())));
                }
                let position = self
                    .cx
                    .checked
                    .iter()
                    .position(|&id| id == buffer.id())
                    .expect("checked_buffers lists every check");
                let v = self.expr(cond)?;
                // Every lane must hold (bool lanes are bytes 0 or 1).
                let lanes = self.lanes(&v, cond.dtype());
                let ok = lanes.into_iter().reduce(|a, b| self.b.ins().band(a, b)).expect("a condition has a lane");
                let failed = self.b.ins().icmp_imm_u(IntCC::Equal, ok, 0);
                self.fail_if(failed, |tx| tx.iconst(types::I32, STATUS_INDEX_OUT_OF_BOUNDS + position as i64));
                Ok(())
            }
            StmtKind::Call { intrin, operands, reset, fallback, range } => {
                self.call_intrin(intrin, operands, *reset, fallback, range.as_ref())
            }
            StmtKind::If { cond, then_case, else_case } => {
                if !cond.dtype().is_bool() || cond.dtype().is_vector() {
                    return Err(self.unsupported(format!("If condition of type {}", cond.dtype())));
                }
                let c = self.expr(cond)?.as_scalar();
                let then_block = self.b.create_block();
                let merge = self.b.create_block();
                let else_block = if else_case.is_some() { self.b.create_block() } else { merge };
                self.b.ins().brif(c, then_block, &[], else_block, &[]);
                self.b.switch_to_block(then_block);
                self.scoped(|tx| tx.stmt(then_case))?;
                self.b.ins().jump(merge, &[]);
                if let Some(else_case) = else_case {
                    self.b.switch_to_block(else_block);
                    self.scoped(|tx| tx.stmt(else_case))?;
                    self.b.ins().jump(merge, &[]);
                }
                self.b.switch_to_block(merge);
                Ok(())
            }
            StmtKind::Seq(stmts) => stmts.iter().try_for_each(|s| self.stmt(s)),
            StmtKind::Allocate { buffer, body } => self.allocate(buffer, body),
        }
    }

    /// Runs `f` in a region whose computed values are forgotten afterwards.
    fn scoped(&mut self, f: impl FnOnce(&mut Self) -> Result<(), CompileError>) -> Result<(), CompileError> {
        self.cache.push_scope();
        let r = f(self);
        self.cache.pop_scope();
        r
    }

    /// `for var in 0..extent` as a bottom-tested loop; extent 1 binds the variable to 0.
    fn serial_loop(&mut self, var: &Var, extent: i64, body: &Stmt) -> Result<(), CompileError> {
        if extent <= 0 {
            return Ok(());
        }
        if extent == 1 {
            let zero = self.iconst(types::I64, 0);
            self.env.insert(var.id(), Val::scalar(zero));
            let res = self.scoped(|tx| tx.stmt(body));
            self.env.remove(&var.id());
            return res;
        }
        // The preheader computes what every iteration would recompute.
        for e in loop_invariants(body, var.id(), &self.cx.readonly) {
            self.expr(&e)?;
        }
        let header = self.b.create_block();
        let exit = self.b.create_block();
        let i = self.b.append_block_param(header, types::I64);
        let zero = self.iconst(types::I64, 0);
        self.b.ins().jump(header, &[zero.into()]);
        self.b.switch_to_block(header);
        self.env.insert(var.id(), Val::scalar(i));
        self.scoped(|tx| tx.stmt(body))?;
        self.env.remove(&var.id());
        let next = self.b.ins().iadd_imm_s(i, 1);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, next, extent);
        self.b.ins().brif(more, header, &[next.into()], exit, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// Outlines `body` into `fn(closure, index) -> i32` and runs it through the runtime's
    /// `parallel_for`. The closure is a stack block holding captured buffer addresses and
    /// the Cranelift values of captured variables.
    fn parallel_loop(&mut self, var: &Var, extent: i64, body: &Stmt) -> Result<(), CompileError> {
        let caps = analysis::captures(body);
        let mut captures = Vec::new();
        let mut stores = Vec::new();
        let mut offset: i32 = 0;
        for buffer in &caps.buffers {
            match self.buffers.get(&buffer.id()) {
                Some(BufLoc::Memory(ptr)) => stores.push((*ptr, offset)),
                // `analysis::promotion` never promotes a buffer used in a parallel body.
                Some(BufLoc::Promoted { .. }) => panic!("promoted buffer {} used in a parallel loop", buffer.name()),
                None => return Err(self.unsupported(format!("buffer {} is not in scope", buffer.name()))),
            }
            captures.push(Capture::Buffer { id: buffer.id(), offset });
            offset += 8;
        }
        for v in caps.vars.iter().filter(|v| *v != var) {
            let Some(val) = self.env.get(&v.id()).cloned() else {
                return Err(self.unsupported(format!("variable {} is not in scope", v.name())));
            };
            let mut parts = Vec::new();
            for &p in val.parts() {
                let ty = self.b.func.dfg.value_type(p);
                let size = ty.bytes() as i32;
                offset = (offset + size.min(16) - 1) / size.min(16) * size.min(16);
                stores.push((p, offset));
                parts.push((ty, offset));
                offset += size;
            }
            captures.push(Capture::Var { id: v.id(), pieces: matches!(val, Val::Pieces(_)), parts });
        }

        let body_id = outline(self.cx, var, body, &captures)?;

        let slot =
            self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, offset.max(8) as u32, 4));
        let closure = self.b.ins().stack_addr(types::I64, slot, 0);
        for (v, off) in stores {
            self.b.ins().store(MemFlagsData::trusted(), v, closure, off);
        }
        let fref = self.cx.module.declare_func_in_func(body_id, self.b.func);
        let body_ptr = self.b.ins().func_addr(types::I64, fref);
        let n = self.iconst(types::I64, extent);
        let status = self.call_host(HostFn::ParallelFor, &[body_ptr, closure, n])[0];
        self.fail_if(status, |_| status);
        Ok(())
    }

    /// Scratch memory for `body`: SSA variables when every access is constant-indexed, a stack
    /// slot when small, otherwise the runtime's aligned heap allocator.
    fn allocate(&mut self, buffer: &Buffer, body: &Stmt) -> Result<(), CompileError> {
        let scalar = buffer.dtype().scalar;
        if let Some(promotion) = analysis::promotion(buffer, body) {
            let (pieces, count, ty) = match promotion {
                Promotion::Pieces(n) => (true, n, piece_type(scalar)),
                Promotion::Elements(n) => (false, n, lane_type(scalar)),
            };
            let zero = self.zero(ty);
            let vars: Vec<Variable> = (0..count)
                .map(|_| {
                    let var = self.b.declare_var(ty);
                    // Defined up front so SSA construction never reaches the function entry.
                    self.b.def_var(var, zero);
                    var
                })
                .collect();
            self.buffers.insert(buffer.id(), BufLoc::Promoted { pieces, vars });
            self.stmt(body)?;
            self.buffers.remove(&buffer.id());
            return Ok(());
        }
        let bytes = buffer
            .len()
            .checked_mul(scalar.bytes() as i64)
            .ok_or_else(|| self.unsupported(format!("buffer {} is too large", buffer.name())))?;
        // At least 16 bytes: a clamped access to an empty buffer still reads element 0.
        let size = bytes.max(16);
        // 64-byte aligned, as heap scratch and tensors are: the stack pointer is only 16-byte
        // aligned, so the slot has room to round its address up. (A row of accumulators off a
        // cache line makes every zmm load and store of the kernels split two lines.)
        let align = ALIGN as i64;
        let slot_size = size + align - 16;
        if size <= MAX_STACK_BUFFER && self.stack_bytes + slot_size <= STACK_BUDGET {
            self.stack_bytes += slot_size;
            let slot =
                self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, slot_size as u32, 4));
            let base = self.b.ins().stack_addr(types::I64, slot, 0);
            let rounded = self.b.ins().iadd_imm_s(base, align - 1);
            let ptr = self.b.ins().band_imm_s(rounded, -align);
            self.buffers.insert(buffer.id(), BufLoc::Memory(ptr));
            self.stmt(body)?;
            self.buffers.remove(&buffer.id());
            return Ok(());
        }
        let size_v = self.iconst(types::I64, size);
        let ptr = self.call_host(HostFn::Alloc, &[size_v])[0];
        let is_null = self.b.ins().icmp_imm_s(IntCC::Equal, ptr, 0);
        self.fail_if(is_null, |tx| tx.iconst(types::I32, STATUS_OUT_OF_MEMORY));
        self.heap_live.push((ptr, size));
        self.buffers.insert(buffer.id(), BufLoc::Memory(ptr));
        self.stmt(body)?;
        self.buffers.remove(&buffer.id());
        self.heap_live.pop();
        let size_v = self.iconst(types::I64, size);
        self.call_host(HostFn::Free, &[ptr, size_v]);
        Ok(())
    }

    /// The zero of a lane or piece type.
    pub fn zero(&mut self, ty: Type) -> Value {
        if ty.is_vector() {
            self.vconst(ty, [0; 16])
        } else if ty == types::F32 {
            self.b.ins().f32const(0.0)
        } else if ty == types::F64 {
            self.b.ins().f64const(0.0)
        } else {
            self.iconst(ty, 0)
        }
    }
}

/// Defines the outlined body of a parallel loop and returns its id.
fn outline<M: Module>(
    cx: &mut ModuleCtx<'_, M>,
    var: &Var,
    body: &Stmt,
    captures: &[Capture],
) -> Result<FuncId, CompileError> {
    let name = format!("{}__par{}", cx.name, cx.outlined);
    cx.outlined += 1;
    let mut sig = Signature::new(cx.module.target_config().default_call_conv);
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I32));
    let id = cx.module.declare_function(&name, Linkage::Local, &sig).map_err(|e| module_error(&name, e))?;
    build_function(cx, id, &name, sig, |tx| {
        let entry = tx.b.create_block();
        tx.b.append_block_params_for_function_params(entry);
        tx.b.switch_to_block(entry);
        let closure = tx.b.block_params(entry)[0];
        let index = tx.b.block_params(entry)[1];
        // The closure is written before the loop starts and never changes while it runs.
        let flags = MemFlagsData::trusted().with_readonly().with_can_move();
        for capture in captures {
            match capture {
                Capture::Buffer { id, offset } => {
                    let p = tx.b.ins().load(types::I64, flags, closure, *offset);
                    tx.buffers.insert(*id, BufLoc::Memory(p));
                }
                Capture::Var { id, pieces, parts } => {
                    let values = parts.iter().map(|&(ty, off)| tx.b.ins().load(ty, flags, closure, off)).collect();
                    let val = if *pieces { Val::Pieces(values) } else { Val::Lanes(values) };
                    tx.env.insert(*id, val);
                }
            }
        }
        tx.env.insert(var.id(), Val::scalar(index));
        tx.stmt(body)?;
        tx.ret_status(STATUS_OK);
        Ok(())
    })?;
    Ok(id)
}

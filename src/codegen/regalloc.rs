//! The register allocator of each generated function. Cranelift's single-pass allocator compiles
//! in about half the time of its backtracking one, but keeps every value that crosses a block
//! boundary in a stack slot: a loop Cranelift's own code runs hot (f32 matmul, softmax, copies,
//! even a scalar loop whose index and addresses then go through memory) runs up to several times
//! slower. A function in which every loop makes a call spends its time in the callees
//! (hand-assembled kernels, the thread pool, the runtime's helpers), and a call clobbers the
//! registers that allocator would have kept anyway, so such a function is allocated in a single
//! pass; every other function keeps the backtracking allocator.

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::Function;
use cranelift_codegen::isa::{self, OwnedTargetIsa, TargetIsa};
use cranelift_codegen::loop_analysis::{Loop, LoopAnalysis};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_entity::SecondaryMap;
use cranelift_module::{FuncId, Module, ModuleError, ModuleReloc};

use crate::error::CompileError;

/// Whether every loop of `func` contains a call (true for a function without loops).
pub(crate) fn single_pass_suffices(func: &Function) -> bool {
    let cfg = ControlFlowGraph::with_function(func);
    let domtree = DominatorTree::with_function(func, &cfg);
    let mut loops = LoopAnalysis::new();
    loops.compute(func, &cfg, &domtree);
    let mut calls: SecondaryMap<Loop, bool> = SecondaryMap::new();
    for block in func.layout.blocks() {
        let Some(innermost) = loops.innermost_loop(block) else { continue };
        if !func.layout.block_insts(block).any(|inst| func.dfg.insts[inst].opcode().is_call()) {
            continue;
        }
        // A call in a loop is in every loop around it too.
        let mut lp = Some(innermost);
        while let Some(l) = lp.filter(|&l| !calls[l]) {
            calls[l] = true;
            lp = loops.loop_parent(l);
        }
    }
    loops.loops().all(|l| calls[l])
}

/// `isa` with the same settings but Cranelift's single-pass register allocator.
pub(crate) fn single_pass_isa(isa: &dyn TargetIsa) -> Result<OwnedTargetIsa, CompileError> {
    let error = |e: &dyn std::fmt::Display| CompileError::Isa { message: e.to_string() };
    let mut flags = settings::builder();
    for value in isa.flags().iter() {
        flags.set(value.name, &value.value_string()).map_err(|e| error(&e))?;
    }
    flags.set("regalloc_algorithm", "single_pass").map_err(|e| error(&e))?;
    let mut builder = isa::lookup(isa.triple().clone()).map_err(|e| error(&e))?;
    for value in isa.isa_flags() {
        builder.set(value.name, &value.value_string()).map_err(|e| error(&e))?;
    }
    builder.finish(settings::Flags::new(flags)).map_err(|e| error(&e))
}

/// Compiles `ctx.func` for `isa` and defines it as `id` in `module`, as `Module::define_function`
/// does for the module's own ISA (the error boxed: it is large, and rare).
pub(crate) fn define_function_with<M: Module>(
    module: &mut M,
    isa: &dyn TargetIsa,
    id: FuncId,
    ctx: &mut Context,
) -> Result<(), Box<ModuleError>> {
    let alignment = ctx
        .compile(isa, &mut ControlPlane::default())
        .map_err(|e| Box::new(ModuleError::Compilation(e.inner)))?
        .buffer
        .alignment;
    let compiled = ctx.compiled_code().expect("compiled just above");
    let relocs: Vec<ModuleReloc> =
        compiled.buffer.relocs().iter().map(|reloc| ModuleReloc::from_mach_reloc(reloc, &ctx.func, id)).collect();
    module.define_function_bytes(id, u64::from(alignment), compiled.code_buffer(), &relocs).map_err(Box::new)
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::condcodes::IntCC;
    use cranelift_codegen::ir::{
        AbiParam, ExtFuncData, ExternalName, InstBuilder, MemFlagsData, Signature, UserExternalNameRef, types,
    };
    use cranelift_codegen::isa::CallConv;
    use cranelift_codegen::settings::RegallocAlgorithm;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::*;
    use crate::codegen::build_isa;
    use crate::isa::IsaLevel;
    use crate::target::{OptLevel, Target};

    fn frontend_config() -> cranelift_codegen::isa::TargetFrontendConfig {
        build_isa(Target::Level(IsaLevel::Scalar), OptLevel::None).unwrap().0.frontend_config()
    }

    /// What the loop of `counted_loop` does besides counting.
    struct Shape {
        /// Whether the loop carries an f32x4 accumulator.
        accumulator: bool,
        /// Whether the loop calls a function.
        call: bool,
    }

    /// `fn(p: i64)` whose loop of 8 iterations stores an f32x4 at `p + 16 i` (a zero splat, plus
    /// `shape`'s accumulator), or without the loop a single such store.
    fn counted_loop(shape: Shape) -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(Default::default(), sig.clone());
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let callee_sig = b.import_signature(sig);
        let callee = b.import_function(ExtFuncData {
            name: ExternalName::User(UserExternalNameRef::from_u32(0)),
            signature: callee_sig,
            colocated: false,
            patchable: false,
        });
        let (entry, header, exit) = (b.create_block(), b.create_block(), b.create_block());
        b.append_block_params_for_function_params(entry);
        b.append_block_param(header, types::I64);
        if shape.accumulator {
            b.append_block_param(header, types::F32X4);
        }
        b.switch_to_block(entry);
        let p = b.block_params(entry)[0];
        let zero = b.ins().f32const(0.0);
        let zero = b.ins().splat(types::F32X4, zero);
        let start = b.ins().iconst(types::I64, 0);
        let mut args = vec![start.into()];
        if shape.accumulator {
            args.push(zero.into());
        }
        b.ins().jump(header, &args);
        b.switch_to_block(header);
        let i = b.block_params(header)[0];
        let offset = b.ins().imul_imm_s(i, 16);
        let addr = b.ins().iadd(p, offset);
        let mut value = zero;
        if shape.accumulator {
            let acc = b.block_params(header)[1];
            value = b.ins().fadd(value, acc);
        }
        b.ins().store(MemFlagsData::trusted(), value, addr, 0);
        if shape.call {
            b.ins().call(callee, &[addr]);
        }
        let next = b.ins().iadd_imm_s(i, 1);
        let more = b.ins().icmp_imm_s(IntCC::SignedLessThan, next, 8);
        let mut args = vec![next.into()];
        if shape.accumulator {
            args.push(value.into());
        }
        b.ins().brif(more, header, &args, exit, &[]);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend_config());
        func
    }

    #[test]
    fn a_loop_without_a_call_keeps_the_backtracking_allocator() {
        assert!(!single_pass_suffices(&counted_loop(Shape { accumulator: false, call: false })));
        assert!(!single_pass_suffices(&counted_loop(Shape { accumulator: true, call: false })));
    }

    #[test]
    fn loops_that_call_are_allocated_in_a_single_pass() {
        assert!(single_pass_suffices(&counted_loop(Shape { accumulator: false, call: true })));
        assert!(single_pass_suffices(&counted_loop(Shape { accumulator: true, call: true })));
    }

    #[test]
    fn a_function_without_loops_is_allocated_in_a_single_pass() {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(Default::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry)[0];
        let zero = b.ins().f32const(0.0);
        b.ins().store(MemFlagsData::trusted(), zero, p, 0);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend_config());
        assert!(single_pass_suffices(&func));
    }

    #[test]
    fn the_single_pass_isa_keeps_every_other_setting() {
        let (isa, _) = build_isa(Target::Level(IsaLevel::Scalar), OptLevel::None).unwrap();
        let single = single_pass_isa(&*isa).unwrap();
        assert_eq!(isa.flags().regalloc_algorithm(), RegallocAlgorithm::Backtracking);
        assert_eq!(single.flags().regalloc_algorithm(), RegallocAlgorithm::SinglePass);
        let others = |isa: &dyn TargetIsa| {
            let shared = isa.flags().iter().filter(|v| v.name != "regalloc_algorithm");
            shared.chain(isa.isa_flags()).map(|v| (v.name, v.value_string())).collect::<Vec<_>>()
        };
        assert_eq!(others(&*isa), others(&*single));
        assert_eq!(isa.triple(), single.triple());
    }
}

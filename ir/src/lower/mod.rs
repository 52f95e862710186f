//! Lowering: schedule → loop IR, as one literal, ordered list of passes.
//!
//! Read `lower_with_hook` top to bottom: it is the whole compiler up to code generation. The
//! verifier checks the IR after the last step, and in debug builds (CI's tests) after every step
//! (a failure is a compiler bug and panics naming the pass; a release build skips the
//! intermediate checks, which add up over a network's functions, as it skips Cranelift's
//! verifier). The caller's hook sees the result of every step, which is how `TENSORLIFT_DUMP_IR`
//! is built.

pub mod build_loop_nests;
pub mod infer_bounds;
pub mod inline_stages;

use rustc_hash::FxHashSet as HashSet;

use crate::error::LowerError;
use crate::passes::{
    check_gathers::check_gathers,
    flatten_buffers::flatten_buffers,
    fuse_epilogues::fuse_epilogues,
    guard_accesses::guard_accesses,
    partition_loops::partition_loops,
    remove_no_ops::remove_no_ops,
    simplify::simplify,
    unroll_loops::unroll_loops,
    vectorize_loops::vectorize_loops,
    verify::{VerifyLevel, verify},
    zero_segment_range::zero_segment_range,
};
use crate::schedule::Schedule;
use crate::stmt::Func;
use crate::te::Tensor;

use build_loop_nests::build_loop_nests;
use infer_bounds::infer_bounds;
use inline_stages::inline_stages;

/// What the code generator that will compile the result has, which some passes depend on.
/// The default lowers for any code generator.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LowerOptions {
    /// It implements `IntrinKind::GemmMap` with kernels of its own: `fuse_epilogues` runs.
    pub fuse_epilogues: bool,
    /// Its GEMM kernels take a segment range at run time (`StmtKind::Call::range`):
    /// `zero_segment_range` runs.
    pub segment_ranges: bool,
}

/// Lowers `schedule` into a function taking `args` (inputs and outputs, in call order).
pub fn lower(schedule: &Schedule, args: &[&Tensor], name: &str) -> Result<Func, LowerError> {
    lower_with_hook(schedule, args, name, &LowerOptions::default(), &mut |_, _| {})
}

/// `lower` with `options`.
pub fn lower_with(
    schedule: &Schedule,
    args: &[&Tensor],
    name: &str,
    options: &LowerOptions,
) -> Result<Func, LowerError> {
    lower_with_hook(schedule, args, name, options, &mut |_, _| {})
}

/// `lower_with`, calling `after_pass(pass_name, func)` after every pass.
pub fn lower_with_hook(
    schedule: &Schedule,
    args: &[&Tensor],
    name: &str,
    options: &LowerOptions,
    after_pass: &mut dyn FnMut(&str, &Func),
) -> Result<Func, LowerError> {
    check_args(schedule, args)?;
    let mut step = |pass: &str, func: Func, level: VerifyLevel| -> Func {
        let checked = cfg!(debug_assertions) || level == VerifyLevel::Final;
        if let Err(errors) = if checked { verify(&func, level) } else { Ok(()) } {
            let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            panic!("internal error: IR is invalid after {pass}:\n{}\n{func}", list.join("\n"));
        }
        after_pass(pass, &func);
        func
    };

    let bodies = inline_stages(schedule);
    let regions = infer_bounds(schedule, &bodies);
    let func =
        step("build_loop_nests", build_loop_nests(schedule, &bodies, &regions, args, name), VerifyLevel::Lowered);
    let func = step("simplify", simplify(&func), VerifyLevel::Lowered);
    let func = step("check_gathers", check_gathers(&func), VerifyLevel::Lowered);
    let func = step("flatten_buffers", flatten_buffers(&func), VerifyLevel::Lowered);
    let func = step("partition_loops", partition_loops(&func), VerifyLevel::Lowered);
    let func = step("simplify", simplify(&func), VerifyLevel::Lowered);
    let func = match options.fuse_epilogues {
        true => step("fuse_epilogues", fuse_epilogues(&func), VerifyLevel::Lowered),
        false => func,
    };
    let func = match options.segment_ranges {
        true => step("zero_segment_range", zero_segment_range(&func), VerifyLevel::Lowered),
        false => func,
    };
    let func = step("vectorize_loops", vectorize_loops(&func), VerifyLevel::Lowered);
    let func = step("unroll_loops", unroll_loops(&func), VerifyLevel::Lowered);
    let func = step("simplify", simplify(&func), VerifyLevel::Lowered);
    let func = step("remove_no_ops", remove_no_ops(&func), VerifyLevel::Lowered);
    let func = step("guard_accesses", guard_accesses(&func), VerifyLevel::Final);
    Ok(func)
}

/// Arguments must be exactly the schedule's inputs and outputs, each once.
fn check_args(schedule: &Schedule, args: &[&Tensor]) -> Result<(), LowerError> {
    let arg_list = || args.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
    let mut seen = HashSet::default();
    for arg in args {
        if !seen.insert(arg.id()) {
            return Err(LowerError::DuplicateArgument { tensor: arg.name().to_string() });
        }
        // A placeholder the computation never reads is still a legal (unused) parameter.
        let usable = arg.is_placeholder() || schedule.stage_of(arg).is_ok_and(|s| schedule.stage_data(s).is_output);
        if !usable {
            return Err(LowerError::UnusedArgument { tensor: arg.name().to_string() });
        }
    }
    for &stage in schedule.order() {
        let data = schedule.stage_data(stage);
        if seen.contains(&data.tensor.id()) {
            continue;
        }
        if data.is_placeholder() {
            return Err(LowerError::MissingArgument { tensor: data.name().to_string(), args: arg_list() });
        }
        if data.is_output {
            return Err(LowerError::MissingOutput { tensor: data.name().to_string(), args: arg_list() });
        }
    }
    Ok(())
}

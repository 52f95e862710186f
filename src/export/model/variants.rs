//! A level's network functions, one per thread count asked: generated code is scheduled for a
//! number of threads (the template's default knobs, the auto-scheduler's point), and a schedule
//! made for more threads than the library's pool has runs slower there. Each count's steps are
//! lowered (`level_code`), the largest count's first: the smaller counts keep its prepared
//! weights (a schedule that would prepare them otherwise gives way to the largest count's), so
//! the weights are stored once whatever the counts. A count whose steps are those of another
//! count (the same functions on the same constants) shares that count's function. The level's entry `tl_net_<level>`
//! dispatches at call time on the pool's size to the largest count that fits (the smallest
//! count when none does).

use std::fmt::Write;

use crate::engine::CompiledGraph;
use crate::export::ExportError;
use crate::isa::IsaLevel;
use crate::tune::apply::RecordKnobs;

use super::level::{Compiled, Functions, Layout, level_code};
use super::places::Places;
use super::weights::Weights;

/// A level's code: the entry, the C text (network functions and dispatch), the functions to
/// emit as objects, and the thread counts.
pub(super) struct LevelCode {
    pub entry: String,
    pub source: String,
    /// (symbol, function), each once.
    pub functions: Vec<(String, ir::Func)>,
    /// Per thread count asked (ascending).
    pub variants: Vec<Variant>,
    /// The counts' `StepsCode::warnings`, largest count's first.
    pub warnings: Vec<String>,
}

/// One thread count at a level.
pub(super) struct Variant {
    pub threads: usize,
    /// The count whose network function runs this one: itself, or a smaller count with the same
    /// steps.
    pub runs_as: usize,
    /// Per step: a compiled kernel.
    pub kernels: Vec<Option<Compiled>>,
}

/// `lib`'s code for `level` on each of `threads` (ascending, distinct), the records of
/// `records(count)` applied: the network function of each count with its own steps, and the
/// entry that picks one by the pool's size.
pub(super) fn level_variants(
    lib: &str,
    level: IsaLevel,
    graph: &CompiledGraph,
    places: &Places,
    (records, threads): (&dyn Fn(usize) -> RecordKnobs, &[usize]),
    weights: &mut Weights,
) -> Result<LevelCode, ExportError> {
    let tag = level.name().replace('-', "_");
    let entry = format!("tl_net_{tag}");
    let mut functions = Functions::default();
    let mut variants: Vec<Variant> = Vec::new();
    let mut bodies: Vec<(usize, String)> = Vec::new();
    let mut source = String::new();
    let (&largest, smaller) = threads.split_last().expect("at least one thread count");
    let big = level_code(lib, level, graph, places, (&records(largest), largest, None), (&mut functions, weights))?;
    let mut steps = Vec::new();
    for &count in smaller {
        let layout = Some(Layout { threads: largest, steps: &big });
        steps.push(level_code(lib, level, graph, places, (&records(count), count, layout), (&mut functions, weights))?);
    }
    let mut warnings = big.warnings.clone();
    warnings.extend(steps.iter().flat_map(|s| s.warnings.iter().cloned()));
    steps.push(big);
    for (&count, steps) in threads.iter().zip(steps) {
        let runs_as = match bodies.iter().find(|(_, body)| *body == steps.body) {
            Some(&(same, _)) => same,
            None => {
                writeln!(
                    source,
                    "TL_HIDDEN int32_t {entry}_t{count}(void *const *args) {{\n    \
                     uint8_t *arena = tl_net_arena();\n    \
                     if (!arena) return TL_STATUS_OUT_OF_MEMORY;\n    int32_t st = 0;\n{}{}{}done:\n    \
                     return st;\n}}",
                    places.prologue, steps.body, places.epilogue
                )
                .unwrap();
                bodies.push((count, steps.body));
                count
            }
        };
        variants.push(Variant { threads: count, runs_as, kernels: steps.kernels });
    }
    let mut declarations = String::new();
    for (symbol, _) in &functions.list {
        writeln!(declarations, "TL_HIDDEN int32_t {symbol}(void *const *args);").unwrap();
    }
    source.insert_str(0, &declarations);
    writeln!(source, "{}", dispatch(&entry, &variants)).unwrap();
    Ok(LevelCode { entry, source, functions: functions.list, variants, warnings })
}

/// The entry: on a pool of `n` threads, the function of the largest count ≤ `n`, else the
/// smallest count's.
fn dispatch(entry: &str, variants: &[Variant]) -> String {
    let mut c = format!("TL_HIDDEN int32_t {entry}(void *const *args) {{\n");
    if variants.iter().any(|v| v.runs_as != variants[0].runs_as) {
        c.push_str("    int64_t threads = tl_pool_threads();\n");
        for v in variants.iter().skip(1).rev() {
            writeln!(c, "    if (threads >= {}) return {entry}_t{}(args);", v.threads, v.runs_as).unwrap();
        }
    }
    writeln!(c, "    return {entry}_t{}(args);\n}}", variants[0].runs_as).unwrap();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(threads: usize, runs_as: usize) -> Variant {
        Variant { threads, runs_as, kernels: Vec::new() }
    }

    #[test]
    fn the_entry_takes_the_largest_count_within_the_pool() {
        let c = dispatch("tl_net_avx2", &[variant(1, 1), variant(2, 2), variant(4, 1)]);
        let four = c.find("threads >= 4) return tl_net_avx2_t1").expect("4 threads run the 1-thread steps");
        let two = c.find("threads >= 2) return tl_net_avx2_t2").expect("2 threads");
        assert!(four < two, "larger counts are tested first: {c}");
        assert!(c.contains("    return tl_net_avx2_t1(args);\n}"), "{c}");
    }

    #[test]
    fn one_function_needs_no_pool_size() {
        let c = dispatch("tl_net_scalar", &[variant(1, 1), variant(2, 1)]);
        assert!(!c.contains("tl_pool_threads"), "{c}");
        assert!(c.contains("return tl_net_scalar_t1(args);"), "{c}");
    }
}

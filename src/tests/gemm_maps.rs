//! `GemmMap` calls (`passes::fuse_epilogues`, `kernels::gemm_map`): a resetting GEMM call into
//! an accumulator, then a requantizing `Map` of it, fused by the pass; the fused kernel, the
//! unfused pair of kernels and the interpreter (running the composite declaration, and the
//! unfused calls) agree bit for bit over tiles with row and column tails, one and three
//! segments, u8 and i8 outputs, with and without an `[m, n]` add input.

use ir::composite::call_nest;
use ir::expr::select;
use ir::interp::{Array, run_func};
use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::passes::fuse_epilogues;
use ir::te::{Tensor as TeTensor, compute, placeholder_vec};
use ir::{Buffer, DType, Expr, Func, Operand, Stmt, StmtKind};

use super::{check_with, skip};
use crate::isa::IsaLevel;
use crate::runtime::CompileOptions;
use crate::target::Target;

/// One case: tile `m × n`, `segments` of `k`, the output dtype, an add input or not; the Map
/// over the tile's first `cols` columns (`n`, or fewer: the last panel of a wider output).
#[derive(Clone, Copy, Debug)]
struct Case {
    m: i64,
    n: i64,
    cols: i64,
    segments: i64,
    k: i64,
    out: DType,
    add: bool,
}

fn f32c(v: f32) -> Expr {
    Expr::float(DType::F32, f64::from(v))
}

/// `sat(max(round(f32(acc - comp[c]) · scale[c]) + 3 (+ 0.75 · f32(sum[p, c])), lower))`,
/// onnxruntime's requantization order (the add fused), over `[m, cols]`.
fn requantize(case: Case) -> TensorIntrin {
    let Case { m, cols: n, out, add, .. } = case;
    let acc = placeholder_vec(vec![m, n], DType::I32, "acc").unwrap();
    let comp = placeholder_vec(vec![n], DType::I32, "comp").unwrap();
    let scale = placeholder_vec(vec![n], DType::F32, "scale").unwrap();
    let sum = placeholder_vec(vec![m, n], DType::U8, "sum").unwrap();
    let lower = if out == DType::U8 { 3.0 } else { -128.0 };
    let y = compute(
        [m, n],
        |i| {
            let (p, c) = (&i[0], &i[1]);
            let centered = (acc.at([p, c]) - comp.at([c])).cast(DType::F32);
            let mut q = (centered * scale.at([c])).round() + f32c(3.0);
            if add {
                q = f32c(0.75).fma(&sum.at([p, c]).cast(DType::F32), &q);
            }
            select(f32c(lower).lt(&q), q, f32c(lower)).saturating_cast(out)
        },
        "y",
    )
    .unwrap();
    let mut inputs: Vec<&TeTensor> = vec![&acc, &comp, &scale];
    if add {
        inputs.push(&sum);
    }
    decl_tensor_intrin(&format!("rq_{m}x{n}"), IntrinKind::Map { m, n }, &y, &inputs).unwrap()
}

/// `allocate acc { call reset gemm(A, B, acc); call map(acc, …, out) }` over buffers with
/// rows that are not dense (A's segments and rows, B's k groups, the sum's and output's rows).
fn unfused(case: Case) -> Func {
    let Case { m, n, cols, segments, k, out, add } = case;
    let gemm = schedules::intrin::int8_gemm_segmented_microkernel(m, n, segments, k, DType::U8, false).unwrap();
    let map = requantize(case);
    let (lds, ldb, ld_sum, ld_out) = (k + 4, 4 * n + 16, n + 8, n + 5);
    let lda = segments * lds + 8;
    let a = Buffer::new("A", DType::U8, vec![m * lda]);
    let b = Buffer::new("B", DType::I8, vec![segments * k / 4 * ldb]);
    let comp = Buffer::new("comp", DType::I32, vec![cols]);
    let scale = Buffer::new("scale", DType::F32, vec![cols]);
    let sum = Buffer::new("sum", DType::U8, vec![m * ld_sum]);
    let y = Buffer::new("y", out, vec![m * ld_out]);
    let acc = Buffer::new("acc", DType::I32, vec![m, n]);
    let at =
        |buffer: &Buffer, strides: Vec<i64>| Operand { buffer: buffer.clone(), origin: vec![Expr::index(0)], strides };
    let a_strides = if segments > 1 { vec![lda, lds, 1] } else { vec![lda, 1] };
    let gemm_operands = vec![at(&a, a_strides), at(&b, vec![ldb, 4, 1]), at(&acc, vec![n, 1])];
    let mut map_operands = vec![at(&acc, vec![n, 1]), at(&comp, vec![1]), at(&scale, vec![1])];
    if add {
        map_operands.push(at(&sum, vec![ld_sum, 1]));
    }
    map_operands.push(at(&y, vec![ld_out, 1]));
    let gemm_fallback = call_nest(&gemm, &gemm_operands, true).unwrap();
    let map_fallback = call_nest(&map, &map_operands, false).unwrap();
    let body = Stmt::allocate(
        acc,
        Stmt::seq(vec![
            Stmt::call(gemm, gemm_operands, true, gemm_fallback),
            Stmt::call(map, map_operands, false, map_fallback),
        ]),
    );
    let mut params = vec![a, b, comp, scale];
    if add {
        params.push(sum);
    }
    params.push(y);
    Func { name: "gemm_map".into(), params, body }
}

/// Arguments: A and B over their whole ranges, compensations and scales that spread the
/// results over the output's range and past it.
fn args(func: &Func) -> Vec<Array> {
    func.params
        .iter()
        .enumerate()
        .map(|(s, p)| {
            let len = p.len();
            let raw = |i: i64| (i * 7919 + s as i64 * 104_729) % 20_011;
            match p.name() {
                "A" | "sum" => {
                    Array::from_i64(p.dtype(), p.shape(), &(0..len).map(|i| raw(i) % 256).collect::<Vec<_>>())
                }
                "B" => Array::from_i64(p.dtype(), p.shape(), &(0..len).map(|i| raw(i) % 256 - 128).collect::<Vec<_>>()),
                "comp" => Array::from_i64(p.dtype(), p.shape(), &(0..len).map(|i| raw(i) - 10_000).collect::<Vec<_>>()),
                "scale" => Array::from_f64(
                    p.dtype(),
                    p.shape(),
                    &(0..len).map(|i| 1e-4 * (1 + raw(i) % 97) as f64).collect::<Vec<_>>(),
                ),
                _ => Array::zeros(p.dtype(), p.shape()),
            }
        })
        .collect()
}

fn gemm_map_calls(func: &Func) -> usize {
    let mut count = 0;
    ir::mutator::for_each_stmt(&func.body, &mut |s| {
        count += matches!(s.kind(), StmtKind::Call { intrin, .. } if matches!(intrin.kind, IntrinKind::GemmMap { .. }))
            as usize;
    });
    count
}

/// `case` unfused, then after `fuse_epilogues` (checked to make one `GemmMap` call), and the
/// arguments they ran on: the interpreter gives the two the same output, bit for bit (the
/// composite declaration equals the two calls).
fn fused_as_interpreted(case: Case) -> (Func, Func, Vec<Array>) {
    let before = unfused(case);
    let after = fuse_epilogues(&before);
    assert_eq!(gemm_map_calls(&after), 1, "{case:?}:\n{after}");
    let inputs = args(&before);
    let (mut want, mut got) = (inputs.clone(), inputs.clone());
    run_func(&before, &mut want).unwrap();
    run_func(&after, &mut got).unwrap();
    let output = want.len() - 1;
    assert!(got[output].bits_eq(&want[output]), "{case:?}: interpreter");
    (before, after, inputs)
}

#[test]
fn fused_kernels_equal_the_unfused_pair_and_the_interpreter() {
    let Some(&level) = skip::levels_here_for([IsaLevel::Avx512Vnni], "GemmMap kernels").first() else { return };
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    let mut fused_kernels = 0;
    for m in 1..=9 {
        for n in [16, 32, 48, 40] {
            for (segments, k) in [(1, 36), (3, 8)] {
                for out in [DType::U8, DType::I8] {
                    for add in [false, true] {
                        let case = Case { m, n, cols: n, segments, k, out, add };
                        let (before, after, inputs) = fused_as_interpreted(case);
                        // Each compiled function against the interpreter (`check_with`).
                        let fused = check_with(&after, &inputs, &options);
                        let pair = check_with(&before, &inputs, &options);
                        let origins = |f: &crate::runtime::CompiledFunc| {
                            f.machine_code().iter().map(|c| c.origin.clone()).collect::<Vec<_>>()
                        };
                        let uses_fused = origins(&fused).iter().any(|o| o.contains("epilogue"));
                        assert!(origins(&pair).iter().any(|o| o.contains("map kernel")), "{case:?}");
                        // Every tile that is one register block of the zmm VNNI kernel is fused.
                        assert!(uses_fused || m > 8, "{case:?}: {:?}", origins(&fused));
                        if uses_fused {
                            // `acc - comp` is the accumulators' start: one `vpsubd` per column
                            // vector before the k loop (of each row block in a taller tile),
                            // none per register after it.
                            let code = crate::disasm::disassemble(fused.machine_code());
                            let (subs, vectors) = (code.matches("vpsubd").count(), (n as usize).div_ceil(16));
                            assert!(subs == vectors || (m > 8 && subs % vectors == 0), "{case:?}\n{code}");
                        }
                        fused_kernels += uses_fused as usize;
                    }
                }
            }
        }
    }
    assert!(fused_kernels >= 8 * 4 * 2 * 2 * 2);
}

#[test]
fn an_accumulator_read_elsewhere_is_not_fused() {
    let case = Case { m: 4, n: 16, cols: 16, segments: 1, k: 8, out: DType::U8, add: false };
    let before = unfused(case);
    let StmtKind::Allocate { buffer, body } = before.body.kind() else { unreachable!("built as an allocation") };
    // A store of an accumulator element to the output after the map: `acc` is read elsewhere.
    let y = before.params.last().unwrap().clone();
    let read = Expr::load(buffer, vec![Expr::index(0)]).cast(DType::U8);
    let extra = Stmt::store(&y, vec![Expr::index(0)], read);
    let body = Stmt::allocate(buffer.clone(), Stmt::seq(vec![body.clone(), extra]));
    let before = Func { body, ..before };
    let after = fuse_epilogues(&before);
    assert_eq!(after.to_string(), before.to_string());
    assert_eq!(gemm_map_calls(&after), 0);
}

/// A Map over the first columns of the GEMM's tile (the last panel of an output whose columns
/// are not a whole number of panels) fuses: the kernel maps and stores those columns only
/// (the last vector under a mask), equal to the unfused pair, the call's fallback and the
/// interpreter, whose output past them stays as it was.
#[test]
fn a_map_of_the_first_columns_of_the_tile_is_fused() {
    let Some(&level) = skip::levels_here_for([IsaLevel::Avx512Vnni], "GemmMap kernels").first() else { return };
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    for (m, n, cols) in [(1, 16, 8), (1, 16, 1), (3, 32, 20), (4, 48, 33), (2, 48, 47), (5, 32, 16)] {
        for add in [false, true] {
            let case = Case { m, n, cols, segments: 1, k: 36, out: DType::U8, add };
            let (before, after, inputs) = fused_as_interpreted(case);
            let fused = check_with(&after, &inputs, &options);
            check_with(&before, &inputs, &options);
            // The fallback (below AVX-512 the call runs the two calls on a temporary tile).
            check_with(&after, &inputs, &CompileOptions { target: Target::Level(IsaLevel::Avx2), ..options });
            let origins: Vec<String> = fused.machine_code().iter().map(|c| c.origin.clone()).collect();
            assert!(origins.iter().any(|o| o.contains("epilogue")), "{case:?}: {origins:?}");
        }
    }
}

/// Sets `range` on every `GemmMap` call of `func`.
fn with_range(func: &Func, range: (i64, i64)) -> Func {
    struct SetRange(ir::stmt::SegmentRange);
    impl ir::mutator::Mutator for SetRange {
        fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
            let walked = ir::mutator::walk_stmt(self, stmt);
            match walked.kind() {
                StmtKind::Call { intrin, operands, reset, fallback, .. }
                    if matches!(intrin.kind, IntrinKind::GemmMap { .. }) =>
                {
                    let range = Some(self.0.clone());
                    Stmt::call_in_range(intrin.clone(), operands.clone(), *reset, fallback.clone(), range)
                }
                _ => walked,
            }
        }
    }
    let range = ir::stmt::SegmentRange { first: Expr::index(range.0), last: Expr::index(range.1) };
    let body = ir::mutator::Mutator::mutate_stmt(&mut SetRange(range), &func.body);
    Func { body, ..func.clone() }
}

/// A `GemmMap` call with a segment range: the fused kernel with a run-time segment count
/// maps the sums of the segments in the range only (the zero tile for an empty one), as the
/// interpreter does, on A that is not zero outside the range.
#[test]
fn a_ranged_gemm_map_maps_the_segments_in_the_range() {
    let Some(&level) = skip::levels_here_for([IsaLevel::Avx512Vnni], "GemmMap kernels").first() else { return };
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    // The last three: tiles of row blocks, each block's epilogue in the next one's first steps
    // (k = 36) or before them (k = 8: fewer steps than one unrolled iteration).
    for (m, n, k) in [(1, 16, 8), (4, 40, 8), (6, 64, 8), (14, 32, 36), (9, 48, 36), (16, 40, 8)] {
        for add in [false, true] {
            let case = Case { m, n, cols: n, segments: 3, k, out: DType::U8, add };
            let (_, after, inputs) = fused_as_interpreted(case);
            let mut outputs = Vec::new();
            for range in [(0, 3), (1, 3), (0, 2), (1, 2), (2, 2), (3, 0), (-1, 9)] {
                let ranged = with_range(&after, range);
                let fused = check_with(&ranged, &inputs, &options);
                let origins: Vec<String> = fused.machine_code().iter().map(|c| c.origin.clone()).collect();
                assert!(origins.iter().any(|o| o.contains("a run-time count of")), "{case:?} {range:?}: {origins:?}");
                let mut got = inputs.clone();
                run_func(&ranged, &mut got).unwrap();
                outputs.push(got.pop().unwrap());
            }
            // The ranges compute different sums; the full one and one past the ends the same.
            assert!(outputs[0].bits_eq(&outputs[6]) && !outputs[0].bits_eq(&outputs[1]), "{case:?}");
            assert!(outputs[4].bits_eq(&outputs[5]) && !outputs[4].bits_eq(&outputs[3]), "{case:?}");
        }
    }
}

/// Tiles taller than one register block (`gemm_map::assemble_row_blocks`): row blocks whose
/// epilogues run within the next block's k steps, equal to the unfused pair and the
/// interpreter, over row and column tails, short and long segments, u8 and i8, with and
/// without the add input; where a block has a whole unrolled iteration of k steps, a store of
/// the block before it comes before the last multiply-add.
#[test]
fn a_tile_of_row_blocks_maps_each_block_within_the_next_ones_steps() {
    let Some(&level) = skip::levels_here_for([IsaLevel::Avx512Vnni], "GemmMap kernels").first() else { return };
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    for (m, n) in [(14, 32), (13, 32), (9, 48), (12, 64), (16, 40), (25, 16)] {
        for (segments, k) in [(1, 36), (3, 64), (3, 8)] {
            for (out, add) in [(DType::U8, false), (DType::I8, true), (DType::U8, true)] {
                let case = Case { m, n, cols: n, segments, k, out, add };
                let (before, after, inputs) = fused_as_interpreted(case);
                let fused = check_with(&after, &inputs, &options);
                check_with(&before, &inputs, &options);
                let kernel = fused
                    .machine_code()
                    .iter()
                    .find(|c| c.origin.contains("epilogue"))
                    .unwrap_or_else(|| panic!("{case:?}: no fused kernel"));
                let code = crate::disasm::disassemble(std::slice::from_ref(kernel));
                let first_store = code.find(if out == DType::U8 { "vpmovusdb" } else { "vpmovsdb" });
                let last_product = code.rfind("vpdpbusd");
                assert!(first_store.is_some() && last_product.is_some(), "{case:?}\n{code}");
                if k / 4 >= 4 {
                    assert!(first_store < last_product, "{case:?}: no epilogue within the k steps\n{code}");
                }
            }
        }
    }
}

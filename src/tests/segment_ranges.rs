//! GEMM calls with a segment range (`StmtKind::Call::range`): the kernels that loop over a
//! run-time count of segments (`kernels::gemm::assemble_gemm_ranged`), with `A` and `B` moved
//! to the first one, against the interpreter (which zeroes `A` outside the range) bit for bit,
//! on data that is not zero outside the range, for every range of a few segments: empty
//! (including `first > last`), partial, full, and bounds outside `[0, S]` (clamped).

use ir::composite::call_nest;
use ir::interp::Array;
use ir::intrin::TensorIntrin;
use ir::stmt::SegmentRange;
use ir::{Buffer, DType, Expr, ForKind, Func, Operand, Stmt, Var};

use super::{check_with, skip};
use crate::isa::IsaLevel;
use crate::runtime::CompileOptions;
use crate::target::Target;

/// `for f in 0..S+2 { for l in 0..S+2 { call gemm(A, B, C[(f·(S+2) + l)·m·ldc]) segments
/// [f - 1, l - 1) } }`: every range of bounds from -1 to S, each into a tile of its own.
fn ranged(intrin: &TensorIntrin, (m, n, segments, k): (i64, i64, i64, i64), a_dtype: DType, reset: bool) -> Func {
    let pack = if a_dtype == DType::I16 { 2 } else { 4 };
    let (lds, lda, ldb, ldc) = (k + 4, segments * (k + 4) + 8, pack * n + 16, n + 3);
    let ranges = segments + 2;
    let a = Buffer::new("A", a_dtype, vec![m * lda]);
    let b_dtype = if a_dtype == DType::I16 { DType::I16 } else { DType::I8 };
    let b = Buffer::new("B", b_dtype, vec![segments * k / pack * ldb]);
    let c = Buffer::new("C", DType::I32, vec![ranges * ranges * m * ldc]);
    let (f, l) = (Var::index("f"), Var::index("l"));
    let tile = (f.to_expr() * ranges + l.to_expr()) * (m * ldc);
    let operands = vec![
        Operand { buffer: a.clone(), origin: vec![Expr::index(0)], strides: vec![lda, lds, 1] },
        Operand { buffer: b.clone(), origin: vec![Expr::index(0)], strides: vec![ldb, pack, 1] },
        Operand { buffer: c.clone(), origin: vec![tile], strides: vec![ldc, 1] },
    ];
    let fallback = call_nest(intrin, &operands, reset).unwrap();
    let range = SegmentRange { first: f.to_expr() - 1, last: l.to_expr() - 1 };
    let call = Stmt::call_in_range(intrin.clone(), operands, reset, fallback, Some(range));
    let body = Stmt::for_loop(f, ranges, ForKind::Serial, Stmt::for_loop(l, ranges, ForKind::Parallel, call));
    Func { name: "ranged".into(), params: vec![a, b, c], body }
}

/// Nonzero data everywhere: A and B over their dtypes' ranges, C (accumulated into) too.
fn args(func: &Func) -> Vec<Array> {
    func.params
        .iter()
        .enumerate()
        .map(|(s, p)| {
            let raw = |i: i64| (i * 7919 + s as i64 * 104_729) % 20_011;
            let values: Vec<i64> = (0..p.len())
                .map(|i| match p.dtype() {
                    DType::U8 => 1 + raw(i) % 255,
                    DType::I8 => raw(i) % 255 - 127,
                    // i16 and i32.
                    _ => raw(i) - 10_000,
                })
                .collect();
            Array::from_i64(p.dtype(), p.shape(), &values)
        })
        .collect()
}

#[test]
fn ranged_kernels_compute_the_segments_in_the_range_only() {
    let levels = skip::levels_here_for([IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512Vnni], "ranged kernels");
    for level in levels {
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        for (m, n, segments, k) in [(3, 16, 3, 8), (7, 40, 3, 12), (2, 8, 4, 4), (13, 64, 2, 36)] {
            for a_dtype in [DType::U8, DType::I8, DType::I16] {
                let intrin = match a_dtype {
                    DType::I16 => schedules::intrin::int16_gemm_segmented_microkernel(m, n, segments, k).unwrap(),
                    _ => schedules::intrin::int8_gemm_segmented_microkernel(m, n, segments, k, a_dtype, false).unwrap(),
                };
                for reset in [true, false] {
                    let func = ranged(&intrin, (m, n, segments, k), a_dtype, reset);
                    let compiled = check_with(&func, &args(&func), &options);
                    let origins: Vec<String> = compiled.machine_code().iter().map(|c| c.origin.clone()).collect();
                    assert!(
                        origins.iter().any(|o| o.contains("run-time count")),
                        "{level} {a_dtype} {m}x{n}x{segments}x{k}: {origins:?}"
                    );
                }
            }
        }
    }
}

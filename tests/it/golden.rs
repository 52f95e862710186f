//! Golden tests of the printed, fully lowered IR: one per schedule primitive.
//!
//! Expectations live in `tests/golden/<name>.lir` and are written by the tool, never by hand:
//! rerun with `TENSORLIFT_BLESS=1` to accept a change, then review the diff in git.

use std::path::PathBuf;

use ir::DType;
use ir::schedule::{Schedule, create_schedule};
use ir::te::{Tensor, compute, placeholder, reduce_axis, sum};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.lir"))
}

#[track_caller]
fn check_golden(name: &str, schedule: &Schedule, args: &[&Tensor]) {
    let func = ir::lower::lower(schedule, args, name).expect("golden schedules lower");
    check_golden_text(name, &func.to_string());
}

#[track_caller]
fn check_golden_text(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("TENSORLIFT_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("write golden file");
        crate::skip::skip(name, "TENSORLIFT_BLESS=1: the golden file was rewritten, not compared");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let diff = similar::TextDiff::from_lines(expected.as_str(), actual);
        panic!(
            "lowered IR of `{name}` differs from {}:\n{}\nrerun with TENSORLIFT_BLESS=1 to accept it",
            path.display(),
            diff.unified_diff().header("expected", "actual")
        );
    }
}

/// A small u8 × i8 → i32 matmul: `A: [10, 12]`, `B: [12, 6]`, `C: [10, 6]`.
fn matmul() -> (Tensor, Tensor, Tensor) {
    let a = placeholder([10, 12], DType::U8, "A").unwrap();
    let b = placeholder([12, 6], DType::I8, "B").unwrap();
    let c = schedules::nn::matmul(&a, &b, DType::I32, "C").unwrap();
    (a, b, c)
}

/// `P = 2·X`, `Q[i, j] = P[i, j] + P[i + 1, j + 1]`, a two-stage stencil.
fn stencil() -> (Tensor, Tensor, Tensor) {
    let x = placeholder([9, 9], DType::I16, "X").unwrap();
    let p = compute([9, 9], |i| x.at([&i[0], &i[1]]) * 2, "P").unwrap();
    let q = compute([8, 8], |i| p.at([&i[0], &i[1]]) + p.at([&(&i[0] + 1), &(&i[1] + 1)]), "Q").unwrap();
    (x, p, q)
}

#[test]
fn golden_default() {
    let (a, b, c) = matmul();
    check_golden("default", &create_schedule(&[&c]), &[&a, &b, &c]);
}

#[test]
fn golden_split_dividing_and_not() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    s.split(&c, &c.axis(0), 5).unwrap();
    s.split(&c, &c.axis(1), 4).unwrap();
    check_golden("split", &s, &[&a, &b, &c]);
}

#[test]
fn golden_split_nparts() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    s.split_nparts(&c, &c.axis(0), 3).unwrap();
    check_golden("split_nparts", &s, &[&a, &b, &c]);
}

#[test]
fn golden_split_reduction() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    let (ko, ki) = s.split(&c, &k, 4).unwrap();
    s.reorder(&c, &[&ko, &c.axis(0), &ki]).unwrap();
    check_golden("split_reduction", &s, &[&a, &b, &c]);
}

#[test]
fn golden_tile() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    s.tile(&c, &c.axis(0), &c.axis(1), 2, 3).unwrap();
    check_golden("tile", &s, &[&a, &b, &c]);
}

#[test]
fn golden_fuse() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    s.fuse(&c, &c.axis(0), &c.axis(1)).unwrap();
    check_golden("fuse", &s, &[&a, &b, &c]);
}

#[test]
fn golden_reorder() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    s.reorder(&c, &[&k, &c.axis(1), &c.axis(0)]).unwrap();
    check_golden("reorder", &s, &[&a, &b, &c]);
}

#[test]
fn golden_vectorize() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    s.reorder(&c, &[&c.axis(0), &k, &c.axis(1)]).unwrap();
    s.vectorize(&c, &c.axis(1)).unwrap();
    check_golden("vectorize", &s, &[&a, &b, &c]);
}

#[test]
fn golden_vectorize_reduction() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    let (_, ki) = s.split(&c, &k, 4).unwrap();
    s.vectorize(&c, &ki).unwrap();
    check_golden("vectorize_reduction", &s, &[&a, &b, &c]);
}

#[test]
fn golden_vectorize_nested_reduction() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    let (ko, ki) = s.split(&c, &k, 4).unwrap();
    let (jo, ji) = s.split(&c, &c.axis(1), 3).unwrap();
    s.reorder(&c, &[&c.axis(0), &jo, &ko, &ji, &ki]).unwrap();
    s.vectorize(&c, &ji).unwrap();
    s.vectorize(&c, &ki).unwrap();
    check_golden("vectorize_nested_reduction", &s, &[&a, &b, &c]);
}

/// The VPDPBUSD schedule: `B` packed 4 `k` per column (`B[k/4, n, k%4]`), 4 columns × the 4 `k`
/// of a group vectorized as one 16-lane reduction into 4 lanes of `C`.
#[test]
fn golden_vectorize_dot() {
    let a = placeholder([3, 8], DType::U8, "A").unwrap();
    let b = placeholder([2, 8, 4], DType::I8, "B").unwrap();
    let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
    let c = compute(
        [3, 8],
        |i| {
            let k = &ko * 4 + &ki;
            let product =
                a.at([&i[0], &k]).cast(DType::I32) * b.at([&ko.to_expr(), &i[1], &ki.to_expr()]).cast(DType::I32);
            sum(DType::I32, &[&ko, &ki], product)
        },
        "C",
    )
    .unwrap();
    let mut s = create_schedule(&[&c]);
    let (jo, ji) = s.split(&c, &c.axis(1), 4).unwrap();
    s.reorder(&c, &[&c.axis(0), &jo, &ko, &ji, &ki]).unwrap();
    s.vectorize(&c, &ji).unwrap();
    s.vectorize(&c, &ki).unwrap();
    check_golden("vectorize_dot", &s, &[&a, &b, &c]);
}

#[test]
fn golden_unroll() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let (_, ji) = s.split(&c, &c.axis(1), 3).unwrap();
    s.unroll(&c, &ji).unwrap();
    check_golden("unroll", &s, &[&a, &b, &c]);
}

#[test]
fn golden_parallel() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    s.parallel(&c, &c.axis(0)).unwrap();
    check_golden("parallel", &s, &[&a, &b, &c]);
}

#[test]
fn golden_compute_at() {
    let (x, p, q) = stencil();
    let mut s = create_schedule(&[&q]);
    let (qo, _) = s.split(&q, &q.axis(0), 4).unwrap();
    s.compute_at(&p, &q, &qo).unwrap();
    check_golden("compute_at", &s, &[&x, &q]);
}

#[test]
fn golden_compute_inline() {
    let (x, p, q) = stencil();
    let mut s = create_schedule(&[&q]);
    s.compute_inline(&p).unwrap();
    check_golden("compute_inline", &s, &[&x, &q]);
}

#[test]
fn golden_compute_root() {
    let (x, p, q) = stencil();
    let mut s = create_schedule(&[&q]);
    s.compute_inline(&p).unwrap();
    s.compute_root(&p).unwrap();
    check_golden("compute_root", &s, &[&x, &q]);
}

#[test]
fn golden_cache_read() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let b_local = s.cache_read(&b, &[&c]).unwrap();
    s.compute_at(&b_local, &c, &c.axis(0)).unwrap();
    check_golden("cache_read", &s, &[&a, &b, &c]);
}

#[test]
fn golden_cache_write() {
    let (a, b, c) = matmul();
    let mut s = create_schedule(&[&c]);
    let c_local = s.cache_write(&c).unwrap();
    let (io, _) = s.split(&c, &c.axis(0), 2).unwrap();
    s.compute_at(&c_local, &c, &io).unwrap();
    check_golden("cache_write", &s, &[&a, &b, &c]);
}

/// How the GEMM calls of `epilogue_func` walk their `4 × 16` tiles.
#[derive(Clone, Copy, PartialEq)]
enum TileLoops {
    /// `for i.outer in 0..2 { for j.outer in 0..2 { … } }`, one `Map` call over all rows.
    Nested,
    /// One parallel loop `f in 0..4` fusing both, its tile at `f / 2`, `f % 2` (with the
    /// unused `let` lowering leaves), and a parallel `Map` nest over the two row blocks.
    Fused,
    /// `Fused` with the row term dropped: two tiles land on the same accumulator cells.
    FusedOverlapping,
    /// `for j.outer in 0..2 { for i.outer in 0..2 { … } }`, one `Map` call over all rows and
    /// the first 24 columns: the last panel's tiles map 8 of their 16 columns.
    PartialPanel,
    /// `Nested` with the `Map` of `PartialPanel`: the partial tiles are every other one.
    PartialInner,
}

/// An `[8, 32]` accumulator filled by 2 × 2 resetting `4 × 16` GEMM calls (one segment of 8)
/// walked as `tiles` says, then requantized with a residual add by `Map` calls.
fn epilogue_func(tiles: TileLoops) -> ir::Func {
    use ir::composite::call_nest;
    use ir::expr::select;
    use ir::intrin::{IntrinKind, decl_tensor_intrin};
    use ir::te::placeholder_vec;
    use ir::{Buffer, Expr, ForKind, Func, Operand, Stmt, Var};

    let (m, n, k, mr, nr) = (8, 32, 8, 4, 16);
    // The `Map` covers all rows, or one row block per call.
    let map_m = if matches!(tiles, TileLoops::Fused | TileLoops::FusedOverlapping) { mr } else { m };
    let map_n = if matches!(tiles, TileLoops::PartialPanel | TileLoops::PartialInner) { 24 } else { n };
    let gemm = schedules::intrin::int8_gemm_segmented_microkernel(mr, nr, 1, k, DType::U8, false).unwrap();
    let acc = placeholder_vec(vec![map_m, map_n], DType::I32, "acc").unwrap();
    let comp = placeholder_vec(vec![map_n], DType::I32, "comp").unwrap();
    let sum = placeholder_vec(vec![map_m, map_n], DType::U8, "sum").unwrap();
    let f32c = |v: f64| Expr::float(DType::F32, v);
    let y = compute(
        [map_m, map_n],
        |i| {
            let q = (acc.at([&i[0], &i[1]]) - comp.at([&i[1]])).cast(DType::F32) * f32c(0.01);
            let q = q.round() + sum.at([&i[0], &i[1]]).cast(DType::F32);
            select(f32c(0.0).lt(&q), q, f32c(0.0)).saturating_cast(DType::U8)
        },
        "y",
    )
    .unwrap();
    let map = decl_tensor_intrin(
        &format!("rq_{map_m}x{map_n}"),
        IntrinKind::Map { m: map_m, n: map_n },
        &y,
        &[&acc, &comp, &sum],
    )
    .unwrap();
    let a = Buffer::new("A", DType::U8, vec![m, k]);
    let b = Buffer::new("B", DType::I8, vec![k / 4, n, 4]);
    let (comp_b, sum_b, y_b) = (
        Buffer::new("comp", DType::I32, vec![n]),
        Buffer::new("sum", DType::U8, vec![m, n]),
        Buffer::new("y", DType::U8, vec![m, n]),
    );
    let acc_b = Buffer::new("acc", DType::I32, vec![m, n]);
    let at = |buffer: &Buffer, origin: Expr, strides: Vec<i64>| Operand {
        buffer: buffer.clone(),
        origin: vec![origin],
        strides,
    };
    let (io, jo, f) = (Var::index("i.outer"), Var::index("j.outer"), Var::index("f"));
    let (row, column) = match tiles {
        TileLoops::Nested | TileLoops::PartialPanel | TileLoops::PartialInner => (io.to_expr(), jo.to_expr()),
        TileLoops::Fused | TileLoops::FusedOverlapping => (f.to_expr() / 2, f.to_expr() % 2),
    };
    let acc_row = if tiles == TileLoops::FusedOverlapping { Expr::index(0) } else { row.clone() * (mr * n) };
    let gemm_operands = vec![
        at(&a, row.clone() * (mr * k), vec![k, 1]),
        at(&b, column.clone() * (nr * 4), vec![n * 4, 4, 1]),
        at(&acc_b, acc_row + column * nr, vec![n, 1]),
    ];
    let gemm_call =
        Stmt::call(gemm.clone(), gemm_operands.clone(), true, call_nest(&gemm, &gemm_operands, true).unwrap());
    let u = Var::index("u");
    let block = match tiles {
        TileLoops::Fused | TileLoops::FusedOverlapping => u.to_expr() * (mr * n),
        _ => Expr::index(0),
    };
    let map_operands = vec![
        at(&acc_b, block.clone(), vec![n, 1]),
        at(&comp_b, Expr::index(0), vec![1]),
        at(&sum_b, block.clone(), vec![n, 1]),
        at(&y_b, block, vec![n, 1]),
    ];
    let map_call = Stmt::call(map.clone(), map_operands.clone(), false, call_nest(&map, &map_operands, false).unwrap());
    let (tile_nest, map_nest) = match tiles {
        TileLoops::Nested | TileLoops::PartialInner => (
            Stmt::for_loop(io, m / mr, ForKind::Serial, Stmt::for_loop(jo, n / nr, ForKind::Serial, gemm_call)),
            map_call,
        ),
        TileLoops::PartialPanel => (
            Stmt::for_loop(jo, n / nr, ForKind::Serial, Stmt::for_loop(io, m / mr, ForKind::Serial, gemm_call)),
            map_call,
        ),
        TileLoops::Fused | TileLoops::FusedOverlapping => (
            Stmt::for_loop(
                f.clone(),
                4,
                ForKind::Parallel,
                Stmt::let_stmt(Var::index("i.1"), f.to_expr() / 2, gemm_call),
            ),
            Stmt::for_loop(u, m / mr, ForKind::Parallel, map_call),
        ),
    };
    let body = Stmt::allocate(acc_b, Stmt::seq(vec![tile_nest, map_nest]));
    Func { name: "fuse_epilogues".into(), params: vec![a, b, comp_b, sum_b, y_b], body }
}

/// `fuse_epilogues` of `func`, checked by the verifier and against the interpreter: the same
/// output as `func` on the same inputs (the interpreter runs the composite declaration).
fn fuse_and_check(func: &ir::Func) -> ir::Func {
    let fused = ir::passes::fuse_epilogues(func);
    assert_eq!(ir::passes::verify(&fused, ir::passes::VerifyLevel::Lowered), Ok(()));
    let inputs: Vec<ir::interp::Array> = func
        .params
        .iter()
        .enumerate()
        .map(|(s, p)| {
            let values: Vec<i64> = (0..p.len()).map(|i| (i * 7919 + s as i64 * 331) % 251 - 120).collect();
            let values: Vec<i64> =
                if p.dtype() == DType::U8 { values.iter().map(|v| v.rem_euclid(256)).collect() } else { values };
            ir::interp::Array::from_i64(p.dtype(), p.shape(), &values)
        })
        .collect();
    let (mut want, mut got) = (inputs.clone(), inputs);
    ir::interp::run_func(func, &mut want).unwrap();
    ir::interp::run_func(&fused, &mut got).unwrap();
    assert!(got[4].bits_eq(&want[4]));
    fused
}

/// `fuse_epilogues` on `epilogue_func(Nested)`: each GEMM call becomes a `GemmMap` call whose
/// per-column operands move by the tile's column and whose `[m, n]` ones by its row and
/// column, and the accumulator goes.
#[test]
fn golden_fuse_epilogues() {
    let fused = fuse_and_check(&epilogue_func(TileLoops::Nested));
    check_golden_text("fuse_epilogues", &fused.to_string());
}

/// `fuse_epilogues` on one fused parallel tile loop indexed by `/ 2` and `% 2`
/// (`epilogue_func(Fused)`, the form of a parallel conv's tiles): the tiles, enumerated, cover
/// the `Map` nest's blocks once each, so the calls fuse, with each operand's block given by
/// the quotient and its column by the remainder; where two tiles overlap
/// (`FusedOverlapping`), nothing changes.
#[test]
fn golden_fuse_epilogues_fused_loop() {
    let fused = fuse_and_check(&epilogue_func(TileLoops::Fused));
    assert!(!fused.to_string().contains("acc"), "{fused}");
    check_golden_text("fuse_epilogues_fused_loop", &fused.to_string());
    let overlapping = epilogue_func(TileLoops::FusedOverlapping);
    assert_eq!(ir::passes::fuse_epilogues(&overlapping).to_string(), overlapping.to_string());
}

/// `fuse_epilogues` where the `Map` reads the first 24 of the accumulator's 32 columns
/// (`epilogue_func(PartialPanel)`, the form of a dense layer whose outputs are not a whole
/// number of panels): the outermost tile loop's last iteration, whose tiles map 8 of their
/// 16 columns, is peeled into `GemmMap` calls of its own with the Map resized to `4 × 8`.
/// Where the partial tiles are not that iteration's (`PartialInner`), nothing changes.
#[test]
fn golden_fuse_epilogues_partial_panel() {
    let fused = fuse_and_check(&epilogue_func(TileLoops::PartialPanel));
    let text = fused.to_string();
    assert!(text.contains("_tile_4x8(") && text.contains("_tile_4x16(") && !text.contains("acc"), "{text}");
    check_golden_text("fuse_epilogues_partial_panel", &text);
    let inner = epilogue_func(TileLoops::PartialInner);
    assert_eq!(ir::passes::fuse_epilogues(&inner).to_string(), inner.to_string());
}

/// `zero_segment_range` on a 3×3, pad 1, stride 1 convolution of a u8 source with zero point 0
/// (onnxruntime's order: the padding is a literal 0), lowered at AVX-512 VNNI with the panels
/// outermost (one panel): one GEMM call (fused with its requantization) in the row loop, whose
/// segment range, from the row, leaves out padded row 0 for output row 0 and padded row 5 for
/// output row 3.
#[test]
fn golden_zero_segment_range() {
    use schedules::x86_conv::{Accumulate, Conv2dInt8Knobs, Packing, TileOrder};
    use tensorlift::IsaLevel;
    use tensorlift::layer::{ActQuant, QConvSpec, lower_qconv};
    let (ic, oc) = (8, 16);
    let spec = QConvSpec {
        name: "skip".into(),
        src: ActQuant { dtype: DType::U8, scale: 0.5, zero_point: 0 },
        h: 4,
        w: 4,
        ic,
        oc,
        kh: 3,
        kw: 3,
        stride: (1, 1),
        pads: [1; 4],
        weights: (0..oc * ic * 9).map(|i| (i % 7 - 3) as i8).collect(),
        weight_scales: vec![0.25; oc as usize],
        bias: None,
        dst: ActQuant { dtype: DType::U8, scale: 1.0, zero_point: 0 },
        relu: false,
        sum: None,
    };
    let knobs = Conv2dInt8Knobs {
        mr: 4,
        nr: 16,
        lanes: 16,
        order: TileOrder::ChannelsOuter,
        threads: 1,
        packing: Packing::Bytes,
        accumulation: Accumulate::Whole,
    };
    let lowered = lower_qconv(&spec, Some(knobs), IsaLevel::Avx512Vnni, 1).unwrap();
    let text = lowered.func.to_string();
    assert!(text.contains(") segments ["), "{text}");
    check_golden_text("zero_segment_range", &text);
}

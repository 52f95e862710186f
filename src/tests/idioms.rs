//! Loop nests that fill or copy one contiguous range (`codegen::idiom`): translated as libc
//! calls where they qualify, as loops where they do not, and equal to the interpreter either way.

use super::*;

/// A padded copy as a convolution's source is made: `out` is `rows + 2` rows of `cols`
/// elements of `dtype`, its first and last rows filled with `fill`, the rows between copied
/// from `src`, each by 16-lane stores (`stride` apart: 16 for contiguous stores).
fn padded(dtype: DType, rows: i64, cols: i64, fill: Expr, stride: i64) -> Func {
    let src = Buffer::new("src", dtype, vec![rows * cols]);
    let out = Buffer::new("out", dtype, vec![(rows + 2) * cols]);
    let lanes = 16;
    let blocks = cols / stride;
    let at = |start: Expr| vec![Expr::ramp(start, Expr::index(1), lanes)];
    let fill_row = |name: &str, row: i64| {
        let c = Var::index(name);
        let start = Expr::var(&c) * stride + row * cols;
        Stmt::for_loop(c, blocks, ForKind::Serial, Stmt::store(&out, at(start), Expr::broadcast(fill.clone(), lanes)))
    };
    let (r, c) = (Var::index("r"), Var::index("c"));
    let copy = Stmt::for_loop(
        r.clone(),
        rows,
        ForKind::Serial,
        Stmt::for_loop(
            c.clone(),
            blocks,
            ForKind::Serial,
            Stmt::store(
                &out,
                at(Expr::var(&r) * cols + Expr::var(&c) * stride + cols),
                Expr::load(&src, at(Expr::var(&r) * cols + Expr::var(&c) * stride)),
            ),
        ),
    );
    let body = Stmt::seq(vec![fill_row("c0", 0), copy, fill_row("c1", rows + 1)]);
    Func { name: format!("padded_{dtype}_{stride}"), params: vec![src, out], body }
}

fn args(dtype: DType, rows: i64, cols: i64) -> [Array; 2] {
    let n = (rows * cols) as usize;
    let values: Vec<f64> = (0..n).map(|i| ((i * 37) % 251) as f64 - 100.0).collect();
    let src = Array::from_f64(dtype, &[rows * cols], &values.iter().map(|v| v.abs()).collect::<Vec<_>>());
    // Anything but the result, so that an element the code misses shows.
    let out = Array::from_f64(dtype, &[(rows + 2) * cols], &vec![3.0; ((rows + 2) * cols) as usize]);
    [src, out]
}

#[test]
fn contiguous_fills_and_copies_become_libc_calls_equal_to_the_interpreter() {
    let (rows, cols) = (5, 64);
    for (dtype, fill) in [
        (DType::U8, Expr::int(DType::U8, 0)),
        (DType::U8, Expr::int(DType::U8, 7)),
        (DType::I8, Expr::int(DType::I8, -3)),
        (DType::F32, Expr::float(DType::F32, 0.0)),
        (DType::I32, Expr::int(DType::I32, 0)),
    ] {
        let func = padded(dtype, rows, cols, fill.clone(), 16);
        let compiled = check_with(&func, &args(dtype, rows, cols), &CompileOptions::default());
        let clif = compiled.clif_text();
        assert!(clif.contains("%Memset"), "{dtype} fill {fill} is not a memset:\n{clif}");
        assert!(clif.contains("%Memmove"), "the {dtype} rows are not one memmove:\n{clif}");
        // The whole interior (every row) is one range: a single call, no loop left.
        assert!(!clif.contains("brif"), "a loop is left:\n{clif}");
    }
}

#[test]
fn nests_that_skip_elements_or_fill_uneven_bytes_stay_loops_equal_to_the_interpreter() {
    let (rows, cols) = (5, 64);
    // Stores 32 elements apart write half of each row: no contiguous range.
    let func = padded(DType::U8, rows, cols, Expr::int(DType::U8, 0), 32);
    let compiled = check_with(&func, &args(DType::U8, rows, cols), &CompileOptions::default());
    let clif = compiled.clif_text();
    assert!(!clif.contains("%Memset") && !clif.contains("%Memmove"), "{clif}");
    // An i32 fill of 1 has unequal bytes: a loop; the copy is still one call.
    let func = padded(DType::I32, rows, cols, Expr::int(DType::I32, 1), 16);
    let compiled = check_with(&func, &args(DType::I32, rows, cols), &CompileOptions::default());
    let clif = compiled.clif_text();
    assert!(!clif.contains("%Memset") && clif.contains("%Memmove"), "{clif}");
}

#[test]
fn a_parallel_body_keeps_its_loops() {
    let (rows, cols) = (5, 64);
    let func = padded(DType::U8, rows, cols, Expr::int(DType::U8, 0), 16);
    let Func { name, params, body } = func;
    let r = Var::index("outer");
    let body = Stmt::for_loop(r, 2, ForKind::Parallel, body);
    let func = Func { name, params, body };
    let options = CompileOptions { threads: Some(2), ..CompileOptions::default() };
    let compiled = check_with(&func, &args(DType::U8, rows, cols), &options);
    let clif = compiled.clif_text();
    assert!(!clif.contains("%Memset") && !clif.contains("%Memmove"), "{clif}");
}

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
    let actual = func.to_string();
    let path = golden_path(name);
    if std::env::var_os("TENSORLIFT_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &actual).expect("write golden file");
        crate::skip::skip(name, "TENSORLIFT_BLESS=1: the golden file was rewritten, not compared");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, &actual);
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

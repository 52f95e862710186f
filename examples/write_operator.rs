//! README's "Writing an operator", as a program (`tests/it/readme.rs` checks the two are equal).
//! `cargo run --example write_operator`
use tensorlift::bench::pattern;
use tensorlift::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (m, n, k) = (64, 48, 32);
    // The definition: C = A·B with u8 and i8 operands, each cast to the i32 accumulator.
    let a = placeholder([m, k], DType::U8, "A")?;
    let b = placeholder([k, n], DType::I8, "B")?;
    let r = reduce_axis(k, "k")?;
    let c = compute(
        [m, n],
        |i| sum(DType::I32, &[&r], a.at([&i[0], &r]).cast(DType::I32) * b.at([&r, &i[1]]).cast(DType::I32)),
        "C",
    )?;

    // The schedule: 4×16 tiles, the reduction outside the tile, rows unrolled, columns
    // vectorized, row tiles on the thread pool.
    let mut s = create_schedule(&[&c]);
    let (io, jo, ii, ji) = s.tile(&c, &c.axis(0), &c.axis(1), 4, 16)?;
    s.reorder(&c, &[&io, &jo, &r, &ii, &ji])?;
    s.unroll(&c, &ii)?;
    s.vectorize(&c, &ji)?;
    s.parallel(&c, &io)?;
    let kernel = build(&s, &[&a, &b, &c], "matmul", &CompileOptions::default())?;
    println!("{}", kernel.lowered);

    // Run it on deterministic data and compare with the reference interpreter, bit for bit.
    let (a_data, b_data) = (pattern(DType::U8, &[m, k], 1), pattern(DType::I8, &[k, n], 2));
    let (mut ta, mut tb) = (Tensor::from_array(&a_data), Tensor::from_array(&b_data));
    let mut tc = Tensor::zeros(DType::I32, &[m, n])?;
    kernel.compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
    let expected = eval_te(&[&c], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
    if !tc.to_array().bits_eq(&expected) {
        return Err("the compiled matmul differs from the reference interpreter".into());
    }
    println!("C = A·B ({m}x{n}x{k}): bit-exact against the reference interpreter");
    Ok(())
}

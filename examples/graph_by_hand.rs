//! Builds a small quantized graph by hand (Dequantize → Convolution → BiasAdd → ReLU → Quantize,
//! then MaxPool on the u8 result), partitions it with and without fusion, prints the
//! partitions and runs the plain-Rust reference on both.
//!
//! `cargo run --example graph_by_hand`

use tensorlift::graph::{
    BiasAddAttrs, ConvAttrs, DataType, Graph, MaxPoolAttrs, OpKind, PartitionPolicy, QuantParams, QuantizeAttrs, Value,
    reference,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut g = Graph::new();
    // A u8 activation with scale 0.5 and zero point 10.
    let x = g.input("x", DataType::U8, [1, 2, 6, 6]);
    let xf = g.apply("dq_x", OpKind::Dequantize(QuantParams::per_tensor(0.5, 10)), &[x])?;
    // s8 weights, one scale per output channel, and an i32 bias at scale x_scale · w_scale.
    let w_scales = vec![0.25, 0.125, 0.5];
    let weights: Vec<i8> = (0..3 * 2 * 9).map(|i| (i % 11) as i8 - 5).collect();
    let w = g.constant("w", Value::s8(&[3, 2, 3, 3], weights)?);
    let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(0, w_scales.clone())), &[w])?;
    let b = g.constant("b", Value::s32(&[3], vec![40, -12, 7])?);
    let b_scales = w_scales.iter().map(|s| 0.5 * s).collect();
    let bf = g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, b_scales)), &[b])?;
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::square(1, 1)), &[xf, wf])?;
    let y = g.apply("bias", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, bf])?;
    let y = g.apply("relu", OpKind::ReLU, &[y])?;
    let quantize = QuantizeAttrs { params: QuantParams::per_tensor(0.75, 3), dtype: DataType::U8 };
    let y = g.apply("q", OpKind::Quantize(quantize), &[y])?;
    let pooled = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(2, 2, 0)), &[y])?;
    g.mark_output(pooled)?;
    let graph = g.finalize()?;
    print!("ops:\n{}", graph.display_ops());

    let input = Value::u8(&[1, 2, 6, 6], (0..72).map(|i| (i * 7 % 31) as u8).collect())?;
    let mut results = Vec::new();
    for policy in [PartitionPolicy::Fusion, PartitionPolicy::Debug] {
        let partitions = graph.get_partitions(policy);
        print!("\npartitions ({policy}):\n{}", graph.display_partitions(&partitions));
        let outputs = reference::run(&graph, &partitions, &[(x, input.clone())])?;
        for (t, v) in &outputs {
            println!("{t} = {v}");
        }
        results.push(outputs);
    }
    let same = results[0].iter().zip(&results[1]).filter(|((_, a), (_, b))| a.bits_eq(b)).count();
    println!("\nfused and float paths agree on {same} of {} outputs (they may differ by rounding)", results[0].len());
    Ok(())
}

//! Compiles an ONNX model N times as `tensorlift run` does (records parsed beside the import,
//! pre-tuned knobs), without running it: a loop to profile the compile with `perf record`.
//!
//!   cargo run --release --example compile_loop -- MODEL.onnx [N] [THREADS]

use std::error::Error;
use std::time::Instant;

use tensorlift::CompileOptions;
use tensorlift::engine::{self, Workload};
use tensorlift::graph::PartitionPolicy;
use tensorlift::layer::QConvAutoSpec;
use tensorlift::record::{Host, pretuned_to_apply};
use tensorlift::tune::apply::RecordKnobs;

/// The binary's allocator, so that the profile is the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let model = args.next().ok_or("usage: compile_loop MODEL.onnx [N] [THREADS]")?;
    let n: usize = args.next().map_or(Ok(20), |s| s.parse())?;
    let threads: Option<usize> = args.next().map(|s| s.parse()).transpose()?;
    let options = CompileOptions { threads, ..CompileOptions::default() };
    let level = options.target.level()?;
    let max_threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let (imported, pretuned) = std::thread::scope(|scope| {
            scope.spawn(tensorlift::tune::warm_table_keys);
            let records = scope.spawn(|| pretuned_to_apply().map(|p| p.records));
            (tensorlift::onnx::load(&model), records.join())
        });
        let imported = imported?;
        let pretuned = pretuned.map_err(|_| "the records' thread panicked")??;
        let partitions = imported.graph.get_partitions(PartitionPolicy::Fusion);
        let records = RecordKnobs { user: Vec::new(), pretuned, host: Host::this(level), max_threads };
        let knobs = |w: Workload<'_>| records.knobs(w);
        let points = |spec: &QConvAutoSpec| records.auto_point(spec);
        let compiled = engine::compile_tuned(imported.graph, partitions, &options, &knobs, &points)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        drop(compiled);
    }
    let first = times[0];
    times.sort_by(f64::total_cmp);
    println!("{n} compiles: first {first:.1} ms, median {:.1} ms, min {:.1} ms", times[n / 2], times[0]);
    Ok(())
}

//! The commands of the `tensorlift` binary, one module each: its clap `Args` and its `run`.
//!
//! Adding a command: a module with `#[derive(clap::Args)] pub struct Args` and
//! `pub fn run(args: Args) -> Result<(), Box<dyn Error>>`, a variant of `Command` (its doc
//! comment is the help line) and an arm in `run`. Shared flags and checks are in `common`
//! (`--isa`, `--format`, positive numbers) and `memory` (sizes the machine cannot hold).

mod common;
mod db;
mod export;
mod gemm;
mod matmul;
mod measure;
mod memory;
mod peak;
mod reference;
mod resnet18;
mod run;
mod tune;
mod tune_op;

use std::error::Error;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tensorlift", version, about = "Tensor-expression compiler with a Cranelift JIT")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile an u8 × i8 → i32 matmul of any M, N, K, check it against a reference (the
    /// interpreter for small sizes, else the generic schedule compiled) and time it.
    Matmul(matmul::Args),
    /// Compile a tensorized u8 × i8 → i32 GEMM of any M, N, K (B pre-packed in the VNNI layout,
    /// zero-padded to whole groups and panels; A padded in the call where K needs it), check it
    /// against a reference (the interpreter for small sizes, else the generic schedule
    /// compiled) and time it against the peak probe of the kernel's method measured in the same
    /// run.
    Gemm(gemm::Args),
    /// Import an ONNX model, partition and compile it for this CPU, run it on an input (.npy or
    /// seeded random) and print the partitions, compile time, median latency and per-partition
    /// profile.
    Run(run::Args),
    /// Run the resnet-18 int8 layers (R1..R11, FC): define each quantized layer, prepare its
    /// weights once, compile, verify against a reference and time it against the peak probe of
    /// the kernel's method measured in the same run.
    Resnet18(resnet18::Args),
    /// Measure this CPU's throughput limit for every int8 dot-product method it has: vpdpbusd
    /// (zmm, ymm), the vpmaddubsw triple, the sign-transfer chain, vpmaddwd + vpaddd, tdpbusd
    /// (AMX tiles).
    Peak(peak::Args),
    /// Write a self-contained operator library: lib<NAME>.so, lib<NAME>.a and <NAME>.h, every
    /// ISA level inside, dispatched on the CPU that loads it.
    Export(export::Args),
    /// Search schedules (`tune MODEL.onnx`, `tune resnet18`, `tune op KIND`): candidates
    /// compiled, verified bit for bit and timed in a worker process, recorded in a database.
    Tune(tune::Args),
    /// Measure candidate schedules given as JSON lines on stdin: one record per line on stdout
    /// (the tuner's worker; any engine can fan it out to machines with the target CPU).
    Measure(measure::Args),
    /// Tuning databases: `db merge A B ... --out C`, `db best A B ... --out C` (the fastest
    /// validated record per workload and target, as `tuning/pretuned.jsonl` is made).
    Db(db::Args),
}

pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn Error>> {
    match cli.command {
        Command::Matmul(args) => matmul::run(args),
        Command::Gemm(args) => gemm::run(args),
        Command::Run(args) => run::run(args),
        Command::Resnet18(args) => resnet18::run(args),
        Command::Peak(args) => peak::run(args),
        Command::Export(args) => export::run(args),
        Command::Tune(args) => tune::run(args),
        Command::Measure(args) => measure::run(args),
        Command::Db(args) => db::run(args),
    }
}

//! `tensorlift peak`: the throughput limit of every int8 dot-product method this CPU has
//! (`kernels::peak`), the denominators of `gemm`'s and `resnet18`'s "% of peak".

use std::error::Error;
use std::time::Duration;

use tensorlift::IsaLevel;
use tensorlift::kernels::peak::ProbeKind;
use tensorlift::runtime::peak::{PeakError, Probe};

use super::common::Format;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

pub fn run(Args { format }: Args) -> Result<(), Box<dyn Error>> {
    let mut rows = Vec::new();
    for kind in ProbeKind::ALL {
        match Probe::of(kind) {
            Ok(probe) => rows.push((kind, Some(probe.measure(Duration::from_millis(30), 11)))),
            Err(PeakError::Unsupported { .. }) => rows.push((kind, None)),
            Err(other) => return Err(other.into()),
        }
    }
    let cpu = tensorlift::isa::cpu_name();
    let level = IsaLevel::detect().map_or("none", IsaLevel::name);
    match format {
        Format::Table => {
            println!("int8 dot-product throughput of {cpu} (best level {level}), 1 thread, median of 11 runs");
            for (kind, row) in &rows {
                let name = kind.to_string();
                match row {
                    Some(p) => println!(
                        "{name:<42} {:7.1} GOPS  {:.4} ns per step  ({} chains, {} iterations per run)",
                        p.gops,
                        p.ns_per_step,
                        kind.chains(),
                        p.iterations
                    ),
                    None => println!("{name:<42}  unsupported by this CPU"),
                }
            }
        }
        Format::Json => {
            let probes: Vec<serde_json::Value> = rows
                .iter()
                .map(|(kind, row)| match row {
                    Some(p) => serde_json::json!({
                        "probe": kind.to_string(), "supported": true, "gops": p.gops,
                        "ns_per_step": p.ns_per_step, "chains": kind.chains(), "iterations": p.iterations, "runs": p.runs,
                    }),
                    None => serde_json::json!({"probe": kind.to_string(), "supported": false}),
                })
                .collect();
            println!("{}", serde_json::json!({"cpu": cpu, "level": level, "probes": probes}));
        }
    }
    Ok(())
}

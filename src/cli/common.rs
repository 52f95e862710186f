//! Flags and value parsers more than one command takes.

use clap::ValueEnum;
use tensorlift::record::{Database, DbError, Record};
use tensorlift::{IsaLevel, Target};

/// `--isa`: the ISA level of the generated code and kernels.
#[derive(Clone, Copy, ValueEnum)]
pub enum IsaChoice {
    Auto,
    Scalar,
    Avx2,
    #[value(name = "avx-vnni")]
    AvxVnni,
    #[value(name = "avx512-vnni")]
    Avx512Vnni,
    Amx,
}

impl IsaChoice {
    pub fn target(self) -> Target {
        match self {
            IsaChoice::Auto => Target::Native,
            IsaChoice::Scalar => Target::Level(IsaLevel::Scalar),
            IsaChoice::Avx2 => Target::Level(IsaLevel::Avx2),
            IsaChoice::AvxVnni => Target::Level(IsaLevel::AvxVnni),
            IsaChoice::Avx512Vnni => Target::Level(IsaLevel::Avx512Vnni),
            IsaChoice::Amx => Target::Level(IsaLevel::Amx),
        }
    }
}

/// `--weights`: the range of the s8 weights, `full` ([-127, 127]) or `7bit` ([-64, 63], what onnxruntime's quantizer gives with reduce_range).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightsChoice {
    Full,
    #[value(name = "7bit")]
    SevenBit,
}

impl WeightsChoice {
    pub fn bits(self) -> schedules::resnet18::WeightBits {
        match self {
            WeightsChoice::Full => schedules::resnet18::WeightBits::Eight,
            WeightsChoice::SevenBit => schedules::resnet18::WeightBits::Seven,
        }
    }
}

/// `--format`: a table for people or JSON for scripts.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The value parser of sizes, tile sizes, thread and repeat counts: a whole number of at least
/// 1 that fits `T`. clap puts the flag in front of the message ("invalid value '-5' for
/// '--m <M>': ..."); the flags that use it also allow a leading `-`, so that a negative number
/// reaches it instead of being read as a flag.
pub fn positive<T: TryFrom<i128>>(s: &str) -> Result<T, String> {
    let v: i128 = s.trim().parse().map_err(|_| format!("expected a whole number of at least 1, found {s:?}"))?;
    if v < 1 {
        return Err(format!("must be at least 1, found {v}"));
    }
    T::try_from(v).map_err(|_| format!("{v} is too large"))
}

/// The most `--threads` accepts: above any core count this runs on, and few enough that the
/// pool starts at once (each thread costs a system call and a stack to create).
pub const MAX_THREADS: usize = 1024;

/// The value parser of `--threads`: `positive`, at most `MAX_THREADS`.
pub fn thread_count(s: &str) -> Result<usize, String> {
    let threads = positive::<usize>(s)?;
    if threads > MAX_THREADS {
        return Err(format!("must be at most {MAX_THREADS}, found {threads}"));
    }
    Ok(threads)
}

/// The records of the user's database `path`: a missing file or a line that is not a record is
/// a warning on stderr naming it (the layers it would have tuned run pre-tuned or default
/// knobs), not an error: the run still measures every layer.
pub fn user_records(path: &std::path::Path) -> Result<Vec<Record>, DbError> {
    if !path.exists() {
        eprintln!("warning: {}: no such file: no tuned records", path.display());
    }
    let loaded = Database::load(path)?;
    for e in &loaded.errors {
        eprintln!("warning: {e}: line ignored");
    }
    Ok(loaded.records)
}

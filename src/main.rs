//! The `tensorlift` command line: compile, verify and time operators (`cli/`, one module per
//! command).

mod cli;

/// mimalloc rather than the system allocator: the compile of a network (lowering, Cranelift,
/// weight packing) allocates and frees many small objects on every core. Only the command line
/// sets it; a program using the library keeps its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}

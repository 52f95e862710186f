//! The `tensorlift` command line: compile, verify and time operators (`cli/`, one module per
//! command).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}

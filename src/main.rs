//! The `toolhost` binary: the sandbox helper first (it must stay single-threaded), then the
//! command line ([`toolhost::cli::command_line`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().is_some_and(|first| first == toolhost::sandbox::HELPER_COMMAND) {
        let plan = argv.next().and_then(|plan| plan.into_string().ok()).unwrap_or_default();
        toolhost::sandbox::run(&plan);
    }
    // Nothing this process inherited reaches a child it starts (servers above all).
    toolhost::sandbox::seal_inherited_descriptors();
    toolhost::cli::command_line::main()
}

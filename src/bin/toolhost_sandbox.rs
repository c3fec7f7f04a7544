//! `toolhost-sandbox __sandbox PLAN`: the sandbox helper and init of one sandboxed server, as
//! `toolhost __sandbox PLAN` runs them, in a binary that holds only the sandbox's code. Its two
//! processes stay up as long as their server: what they hold privately is what a sandbox costs.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    let first = argv.next();
    if first.as_deref().is_some_and(|first| first == toolhost::sandbox::HELPER_COMMAND) {
        let plan = argv.next().and_then(|plan| plan.into_string().ok()).unwrap_or_default();
        toolhost::sandbox::run(&plan);
    }
    #[allow(clippy::print_stdout, clippy::print_stderr)]
    {
        if first.as_deref().is_some_and(|first| first == toolhost::sandbox::IDENTITY_COMMAND) {
            println!("{}", toolhost::sandbox::IDENTITY);
            return ExitCode::SUCCESS;
        }
        eprintln!("toolhost-sandbox: the daemon runs this as `toolhost-sandbox {} PLAN`", toolhost::sandbox::HELPER_COMMAND);
    }
    ExitCode::from(2)
}

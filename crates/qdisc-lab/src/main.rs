//! The `qdisc-lab` command (the library's `main_with_args`).

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(qdisc_lab::main_with_args(std::env::args_os()))
}

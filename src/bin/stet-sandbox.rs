//! The `stet-sandbox` executable, the one program of the sandbox image: its whole command line is
//! `stet_sandbox::cli`, so nothing of the host's stet (engine, forge, terminal) is linked into it.

fn main() -> std::process::ExitCode {
    stet_sandbox::cli::main()
}

//! The `ferrohttpd` binary: command line -> configuration -> server. Errors are printed once
//! and mapped to exit status 1.

use std::process::ExitCode;

use ferrohttpd::config::cli::{self, Command, USAGE};
use std::net::SocketAddr;

use ferrohttpd::config::Config;
use ferrohttpd::server::{self, Server};
use ferrohttpd::workers;

fn main() -> ExitCode {
    let cmd = match cli::parse(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferrohttpd: {}", e.message);
            if e.usage {
                eprint!("{USAGE}");
            }
            return ExitCode::from(1);
        }
    };
    match cmd {
        Command::Help => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("ferrohttpd {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::CheckConfig(cfg) => match server::open_resources(&cfg) {
            Ok((root, _, _)) => {
                let src = cfg.source.as_ref().map_or("built-in defaults".to_string(), |p| p.display().to_string());
                println!("configuration OK ({src}): root {}", root.path().display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ferrohttpd: {e}");
                ExitCode::from(1)
            }
        },
        Command::Run(cfg) => run(*cfg),
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("ferrohttpd: {e}");
    ExitCode::from(1)
}

fn print_addrs(root: &std::path::Path, addrs: &[SocketAddr]) {
    println!("ferrohttpd {} serving {}", env!("CARGO_PKG_VERSION"), root.display());
    for a in addrs {
        if a.ip().is_unspecified() {
            let local = if a.is_ipv6() { "[::1]" } else { "127.0.0.1" };
            println!("listening on http://{a}/ (all addresses; try http://{local}:{}/)", a.port());
        } else {
            println!("listening on http://{a}/");
        }
    }
}

fn run(cfg: Config) -> ExitCode {
    if cfg.workers > 1 {
        if cfg.listen.iter().any(|a| a.port() == 0) {
            return fail("port 0 cannot be shared by several workers; give a port or set workers = 1");
        }
        let root = std::fs::canonicalize(&cfg.root).unwrap_or_else(|_| cfg.root.clone());
        print_addrs(&root, &cfg.listen);
        return match workers::run(cfg) {
            Ok(code) => ExitCode::from(code),
            Err(e) => fail(e),
        };
    }
    let server = match server::bind_all(&cfg).and_then(|l| Server::new(cfg, l)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    print_addrs(server.root(), &server.local_addrs());
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format_args!("event loop failed: {e}")),
    }
}

//! The `ferrohttpd` binary: command line -> configuration -> server. Errors are printed once
//! and mapped to exit status 1.

use std::process::ExitCode;

use ferrohttpd::config::cli::{self, Command, USAGE};
use ferrohttpd::server::{self, Server};

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
        Command::Run(cfg) => {
            let server = match Server::new(*cfg) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("ferrohttpd: {e}");
                    return ExitCode::from(1);
                }
            };
            println!("ferrohttpd {} serving {}", env!("CARGO_PKG_VERSION"), server.root().display());
            for a in server.local_addrs() {
                if a.ip().is_unspecified() {
                    let local = if a.is_ipv6() { "[::1]" } else { "127.0.0.1" };
                    println!("listening on http://{a}/ (all addresses; try http://{local}:{}/)", a.port());
                } else {
                    println!("listening on http://{a}/");
                }
            }
            match server.run() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ferrohttpd: event loop failed: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

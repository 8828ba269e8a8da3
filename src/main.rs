//! The `ferrohttpd` binary: command line -> configuration -> server. Errors are printed once
//! and mapped to exit status 1.

use std::process::ExitCode;

use ferrohttpd::config::cli::{self, Command, USAGE};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::rc::Rc;

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
            Ok(res) => {
                let root = res.root;
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
    let activated = match server::activated_listeners() {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    // SIGHUP re-reads the configuration exactly as it was given: same arguments.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let reloader: server::Reloader = Rc::new(move || match cli::parse(args.clone()) {
        Ok(Command::Run(cfg)) => Ok(*cfg),
        Ok(_) => Err("the command line no longer describes a server".into()),
        Err(e) => Err(e.message),
    });
    let pid_file = cfg.pid_file.clone();
    let code = if cfg.workers > 1 {
        if activated.is_none() && cfg.listen.iter().any(|a| a.port() == 0) {
            return fail("port 0 cannot be shared by several workers; give a port or set workers = 1");
        }
        let root = std::fs::canonicalize(&cfg.root).unwrap_or_else(|_| cfg.root.clone());
        let addrs: Vec<SocketAddr> = match &activated {
            Some(l) => l.iter().filter_map(|l| l.local_addr().ok()).collect(),
            None => cfg.listen.clone(),
        };
        print_addrs(&root, &addrs);
        if let Err(e) = write_pid_file(pid_file.as_deref()) {
            return fail(e);
        }
        match workers::run(cfg, activated, reloader) {
            Ok(code) => ExitCode::from(code),
            Err(e) => fail(e),
        }
    } else {
        let listeners = match &activated {
            Some(l) => server::from_std(l),
            None => server::bind_all(&cfg),
        };
        let mut server = match listeners.and_then(|l| Server::new(cfg, l)) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        server.set_reloader(reloader);
        print_addrs(server.root(), &server.local_addrs());
        if let Err(e) = write_pid_file(pid_file.as_deref()) {
            return fail(e);
        }
        match server.run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format_args!("event loop failed: {e}")),
        }
    };
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    code
}

fn write_pid_file(path: Option<&std::path::Path>) -> Result<(), String> {
    match path {
        Some(p) => std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write pid file {}: {e}", p.display())),
        None => Ok(()),
    }
}

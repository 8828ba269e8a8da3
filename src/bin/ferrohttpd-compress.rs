//! `ferrohttpd-compress DIR [--min-size N] [--encodings br,zstd,gzip] [-v]`, also run as
//! `ferrohttpd compress …`: writes precompressed siblings (`x.br`, `x.zst`, `x.gz`) beside the
//! compressible files under DIR (see [`ferrohttpd::compress`]). A separate executable, built
//! with the `compression` feature (as the server's on-demand compression is).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::process::ExitCode;

use ferrohttpd::compress::compress_dir;
use ferrohttpd::config::cli::{self, CompressJob};

const USAGE: &str = "\
usage: ferrohttpd compress DIR [--min-size N] [--encodings br,zstd,gzip] [-v]
       (also installed as ferrohttpd-compress DIR ...)

Writes precompressed siblings (x.br, x.zst, x.gz) beside the compressible files under DIR,
for ferrohttpd to send to clients that accept them. Fresh siblings are left alone, stale
ones rewritten; writes are atomic.
  --min-size N     skip files smaller than N bytes (default 256)
  --encodings L    the codings to write, a comma-separated subset of br,zstd,gzip (default all)
  -v, --verbose    list each file written
";

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let CompressJob { dir, options } = match cli::parse_compress(&args) {
        Ok(Some(job)) => job,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ferrohttpd compress: {}", e.message);
            if e.usage {
                eprint!("{USAGE}");
            }
            return ExitCode::from(1);
        }
    };
    match compress_dir(&dir, &options) {
        Ok(report) => {
            println!("{}: {report}", dir.display());
            if report.errors == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("ferrohttpd compress: {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

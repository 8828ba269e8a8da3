//! Ratio and speed of the on-demand encoders at each level, on real text, to choose the
//! `[compression]` defaults (the table in BENCHMARKS.md). Run:
//! `nice -n 10 cargo bench --bench compression_levels`.
//!
//! Inputs: README.md, ARCHITECTURE.md, a minified JavaScript file (jQuery from Debian's
//! `libjs-jquery`, if installed) and a minified stylesheet generated here. Each encoder runs
//! over each input until it has used 0.3 s of CPU (at least once); the speed is input
//! bytes per second of the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).

use std::io::Write;
use std::time::Duration;

/// CPU time of the calling thread: the figure that matters for a worker thread, and one
/// that a busy shared machine does not distort the way wall-clock time is.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn css() -> Vec<u8> {
    // A stylesheet in the shape minifiers leave: no whitespace, many similar rules.
    let mut s = String::new();
    let props = ["margin", "padding", "color", "background", "border", "font-size", "line-height", "display"];
    let mut x: u32 = 12345;
    for i in 0..3000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let p = props[(x >> 16) as usize % props.len()];
        let q = props[(x >> 20) as usize % props.len()];
        s.push_str(&format!(
            ".c{i}>.item-{}:hover{{{p}:{}px {}px;{q}:#{:06x}}}",
            x % 97,
            x % 31,
            (x >> 8) % 17,
            x & 0xff_ffff
        ));
        if i % 50 == 0 {
            s.push_str(&format!("@media (max-width:{}px){{.r{i}{{display:none}}}}", 480 + (x % 800)));
        }
    }
    s.into_bytes()
}

fn gzip(data: &[u8], level: u32) -> usize {
    let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    w.write_all(data).unwrap();
    w.finish().unwrap().len()
}

fn br(data: &[u8], level: u32) -> usize {
    let params = brotli::enc::BrotliEncoderParams { quality: level as i32, lgwin: 22, ..Default::default() };
    let mut out = Vec::new();
    brotli::BrotliCompress(&mut &data[..], &mut out, &params).unwrap();
    out.len()
}

fn zstd(data: &[u8], level: u32) -> usize {
    let mut w = zstd::stream::write::Encoder::new(Vec::new(), level as i32).unwrap();
    w.window_log(23).unwrap();
    w.write_all(data).unwrap();
    w.finish().unwrap().len()
}

/// An encoder: input and level to the compressed size.
type Codec = fn(&[u8], u32) -> usize;

fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    for f in ["README.md", "ARCHITECTURE.md"] {
        inputs.push((f.to_string(), std::fs::read(format!("{root}/{f}")).unwrap()));
    }
    if let Ok(js) = std::fs::read("/usr/share/javascript/jquery/jquery.min.js") {
        inputs.push(("jquery.min.js".to_string(), js));
    }
    inputs.push(("generated.min.css".to_string(), css()));
    let codecs: [(&str, Codec, &[u32]); 3] =
        [("gzip", gzip, &[1, 4, 6, 9]), ("br", br, &[1, 3, 4, 5, 6, 8, 11]), ("zstd", zstd, &[1, 3, 6, 9, 12, 19])];
    println!("| input | size | coding | level | ratio (compressed/original) | speed (MB/s) |");
    println!("|---|---:|---|---:|---:|---:|");
    for (name, data) in &inputs {
        for (codec, f, levels) in &codecs {
            for &level in *levels {
                let start = thread_cpu();
                let mut runs = 0u32;
                let mut size = 0;
                while runs == 0 || thread_cpu() - start < Duration::from_millis(300) {
                    size = f(data, level);
                    runs += 1;
                }
                let per = (thread_cpu() - start).as_secs_f64() / f64::from(runs);
                println!(
                    "| {name} | {} | {codec} | {level} | {:.3} | {:.1} |",
                    data.len(),
                    size as f64 / data.len() as f64,
                    data.len() as f64 / per / 1e6
                );
            }
        }
    }
}

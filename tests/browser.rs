//! The listing and its gallery in a real browser (issue 19): Debian's `chromium`, headless,
//! against the real server. What a person would see is checked, not pixels:
//! - the DOM after load (through a small same-origin page that loads the listings in frames,
//!   waits for their images, and writes what it found into its own DOM for `--dump-dom`):
//!   the entries in the order asked for, the gallery's image count, no broken image but the
//!   one broken on purpose (which shows the check can fail), and the light and dark colours;
//! - screenshots of the gallery (`--screenshot`), decoded here: the size asked for, not blank
//!   (many colours), the pictures in it (their exact colours, in quantity), and a dark
//!   background when the browser prefers dark.
//!
//! Every browser run has a temporary profile and a deadline, and is killed by PID past it.
//! Without `chromium` the test says so and passes, except in CI (the `CI` variable set, as
//! `.ci/run` does), where it must run.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

#[cfg(feature = "http3")]
use common::chromium::run_chromium_env;
use common::chromium::{chromium, run_chromium};
use common::Server;

/// A picture of the gallery: one colour, so the screenshot can find it.
struct Picture {
    name: &'static str,
    width: u32,
    height: u32,
    rgb: [u8; 3],
    /// Its mtime, in hours after a base time (for the date order).
    hours: u64,
}

const PICTURES: &[Picture] = &[
    Picture { name: "sunset.png", width: 64, height: 48, rgb: [230, 90, 30], hours: 5 },
    Picture { name: "forest.png", width: 48, height: 64, rgb: [30, 140, 60], hours: 1 },
    Picture { name: "sea.png", width: 80, height: 40, rgb: [30, 80, 200], hours: 3 },
    Picture { name: "sand.png", width: 40, height: 40, rgb: [220, 190, 120], hours: 2 },
    Picture { name: "plum.png", width: 56, height: 56, rgb: [120, 40, 130], hours: 4 },
];

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A PNG of one colour (8-bit RGB).
fn png(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
    // Each row: filter type 0, then the pixels.
    let mut row = vec![0u8];
    row.extend(rgb.repeat(w as usize));
    let raw = row.repeat(h as usize);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).unwrap();
    let idat = z.finish().unwrap();
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut c = kind.to_vec();
        c.extend_from_slice(data);
        out.extend_from_slice(&c);
        out.extend_from_slice(&crc32(&c).to_be_bytes());
    };
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &idat);
    chunk(b"IEND", &[]);
    out
}

/// A decoded screenshot: width, height and RGB pixels.
struct Image {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

/// Decodes an 8-bit, non-interlaced RGB or RGBA PNG (what chromium writes).
fn decode_png(data: &[u8]) -> Image {
    assert!(data.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG ({} bytes)", data.len());
    let mut p = 8;
    let (mut width, mut height, mut channels) = (0usize, 0usize, 0usize);
    let mut idat = Vec::new();
    while p + 8 <= data.len() {
        let len = u32::from_be_bytes(data[p..p + 4].try_into().unwrap()) as usize;
        let kind = &data[p + 4..p + 8];
        let body = &data[p + 8..p + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!((body[8], body[12]), (8, 0), "8-bit, not interlaced");
                channels = match body[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("colour type {other}"),
                };
            }
            b"IDAT" => idat.extend_from_slice(body),
            _ => {}
        }
        p += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "image data of {width}x{height}");
    let mut pixels = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels { pixels[y * stride + x - channels] } else { 0 };
            let b = if y > 0 { pixels[(y - 1) * stride + x] } else { 0 };
            let c = if x >= channels && y > 0 { pixels[(y - 1) * stride + x - channels] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let pa = (i16::from(b) - i16::from(c)).abs();
                    let pb = (i16::from(a) - i16::from(c)).abs();
                    let pc = (i16::from(a) + i16::from(b) - 2 * i16::from(c)).abs();
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("filter {other}"),
            };
            pixels[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    let rgb = pixels.chunks(channels).map(|px| [px[0], px[1], px[2]]).collect();
    Image { width, height, rgb }
}

/// The same-origin page that loads each listing in a frame, waits for its images, and writes
/// one line per listing into `#result`: its index, the entry names in page order, the number
/// of images, how many decoded, the broken ones, and the page's background colour.
const CHECK_PAGE: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>check</title></head><body>
<pre id="result">pending</pre>
<script>
const views = ["/pics/?view=gallery", "/pics/?sort=size&order=desc", "/pics/?sort=date", "/pics/?view=gallery&sort=name&order=desc"];
const lines = [];
let left = views.length;
views.forEach((v, i) => {
  const f = document.createElement("iframe");
  f.style.width = "1200px";
  f.style.height = "3000px";
  f.onload = () => {
    const d = f.contentDocument;
    const settle = () => {
      const imgs = Array.from(d.images);
      if (imgs.some(im => !im.complete)) { setTimeout(settle, 20); return; }
      const names = Array.from(d.querySelectorAll("tbody td:first-child a, ul.g span.n")).map(e => e.textContent).filter(t => t !== "../");
      const broken = imgs.filter(im => im.naturalWidth === 0).map(im => decodeURIComponent(im.getAttribute("src")));
      lines[i] = [i, names.join(" "), imgs.length, imgs.filter(im => im.naturalWidth > 0).length,
                  broken.join(" "), getComputedStyle(d.body).backgroundColor].join("\t");
      if (--left === 0) document.getElementById("result").textContent = lines.join("\n");
    };
    settle();
  };
  f.src = v;
  document.body.appendChild(f);
});
</script></body></html>
"#;

#[test]
fn listing_and_gallery_in_chromium() {
    let Some(bin) = chromium() else { return };
    let srv = Server::builder()
        .config("[listing]\nenabled = true")
        .setup(|_, root| {
            let pics = root.join("pics");
            fs::create_dir(&pics).unwrap();
            let t0 = common::unix_now() - 100_000;
            for p in PICTURES {
                fs::write(pics.join(p.name), png(p.width, p.height, p.rgb)).unwrap();
                let f = fs::File::options().write(true).open(pics.join(p.name)).unwrap();
                f.set_modified(UNIX_EPOCH + Duration::from_secs(t0 + p.hours * 3600)).unwrap();
            }
            fs::write(pics.join("broken.png"), b"this is not a PNG").unwrap();
            fs::write(pics.join("clip.webm"), b"\x1a\x45\xdf\xa3 not really a video").unwrap();
            fs::write(pics.join("notes.txt"), b"notes\n").unwrap();
            fs::create_dir(pics.join("albums")).unwrap();
            fs::write(root.join("check.html"), CHECK_PAGE).unwrap();
        })
        .start();
    let base = format!("http://{}", srv.addr());
    let scratch = tempfile::tempdir().unwrap();
    let budget = "--virtual-time-budget=3000";

    // Three runs at once: the DOM check, and the gallery in light and in dark.
    let light_png = scratch.path().join("light.png");
    let dark_png = scratch.path().join("dark.png");
    let shot = |out: &Path, dark: bool| {
        let mut args = vec![budget.to_string(), "--window-size=1000,700".to_string()];
        if dark {
            args.push("--force-dark-mode".to_string());
        }
        args.push(format!("--screenshot={}", out.display()));
        args.push(format!("{base}/pics/?view=gallery"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_chromium(&bin, scratch.path(), &args);
    };
    let (dom, (), ()) = std::thread::scope(|s| {
        let dom =
            s.spawn(|| run_chromium(&bin, scratch.path(), &[budget, "--dump-dom", &format!("{base}/check.html")]));
        let light = s.spawn(|| shot(&light_png, false));
        let dark = s.spawn(|| shot(&dark_png, true));
        (dom.join().unwrap(), light.join().unwrap(), dark.join().unwrap())
    });

    // The DOM after load.
    let result = dom_result(&dom);
    assert_ne!(result, "pending", "the listings did not finish loading within the time budget");
    let rows: Vec<Vec<&str>> = result.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 4, "{result}");
    let all = "albums/ broken.png clip.webm forest.png notes.txt plum.png sand.png sea.png sunset.png";
    let by_name_desc = "albums/ sunset.png sea.png sand.png plum.png notes.txt forest.png clip.webm broken.png";
    // Sizes: the PNGs' encoded sizes are what they are; order them as the server must.
    let mut sized: Vec<(u64, String)> = fs::read_dir(srv.root().join("pics"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.metadata().unwrap().len(), e.file_name().into_string().unwrap()))
        .collect();
    sized.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    let by_size_desc = format!("albums/ {}", sized.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(" "));
    // Dates: the text files were written just now, after the pictures' set times.
    let by_date = "albums/ forest.png sand.png sea.png plum.png sunset.png";
    let want = [
        (all, "6", "5", "broken.png"),
        (by_size_desc.as_str(), "0", "0", ""),
        (by_date, "0", "0", ""),
        (by_name_desc, "6", "5", "broken.png"),
    ];
    for (i, (names, images, loaded, broken)) in want.iter().enumerate() {
        let row = &rows[i];
        assert_eq!(row[0], i.to_string(), "{result}");
        if i == 2 {
            assert!(row[1].starts_with(names), "view {i}: by date, ascending: {}", row[1]);
        } else {
            assert_eq!(row[1], *names, "view {i}: entries in order");
        }
        assert_eq!((row[2], row[3], row[4]), (*images, *loaded, *broken), "view {i}: images, decoded, broken");
        assert_eq!(row[5], "rgb(253, 253, 252)", "view {i}: www/'s light background");
    }

    // The screenshots: the size asked for, not blank, the pictures in them.
    for (path, dark) in [(&light_png, false), (&dark_png, true)] {
        let data = fs::read(path).unwrap_or_else(|e| panic!("no screenshot {}: {e}", path.display()));
        let img = decode_png(&data);
        assert_eq!((img.width, img.height), (1000, 700), "{}", path.display());
        let mut counts = std::collections::HashMap::new();
        for px in &img.rgb {
            *counts.entry(*px).or_insert(0usize) += 1;
        }
        assert!(counts.len() > 20, "{}: only {} colours: blank?", path.display(), counts.len());
        let (background, n) = counts.iter().max_by_key(|(_, &n)| n).map(|(c, n)| (*c, *n)).unwrap();
        assert!(n < img.rgb.len() * 95 / 100, "{}: one colour covers {n} of {} pixels", path.display(), img.rgb.len());
        let want_bg = if dark { [0x16, 0x18, 0x1b] } else { [0xfd, 0xfd, 0xfc] };
        assert_eq!(background, want_bg, "{}: www/'s background, dark {dark}", path.display());
        for p in PICTURES {
            let shown = counts.get(&p.rgb).copied().unwrap_or(0);
            assert!(shown > 2000, "{}: {} (colour {:?}) covers only {shown} pixels", path.display(), p.name, p.rgb);
        }
    }
}

/// The page of the HTTP/3 test: 60 images; once they have all settled, one line into
/// `#result`: the page's own protocol, the number of images, how many decoded at their size,
/// and each image resource's `nextHopProtocol` (name=protocol).
#[cfg(feature = "http3")]
fn h3_page(images: usize) -> String {
    let imgs: String = (0..images).map(|i| format!("<img src=\"/img/{i}.png\" width=\"16\">\n")).collect();
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>h3</title></head><body>
<pre id="result">pending</pre>
{imgs}<script>
const settle = () => {{
  const imgs = Array.from(document.images);
  if (imgs.some(im => !im.complete)) {{ setTimeout(settle, 20); return; }}
  const decoded = imgs.filter(im => im.naturalWidth === 8 + Number(im.src.match(/(\d+)\.png$/)[1]) % 8).length;
  const nav = performance.getEntriesByType("navigation")[0].nextHopProtocol;
  const res = performance.getEntriesByType("resource").filter(e => e.name.includes("/img/"))
    .map(e => e.name.split("/").pop() + "=" + e.nextHopProtocol);
  document.getElementById("result").textContent = [nav, imgs.length, decoded, res.join(" ")].join("\t");
}};
window.addEventListener("load", settle);
</script></body></html>
"#
    )
}

/// The base64 SHA-256 of the certificate's SubjectPublicKeyInfo, as Chromium's
/// `--ignore-certificate-errors-spki-list` takes it (it will not use QUIC with a certificate
/// it merely ignores the errors of).
#[cfg(feature = "http3")]
fn spki_sha256_base64(cert: &Path) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64")
        .arg("sh")
        .arg(cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Issue 35: Chromium loads a page with 60 images over HTTP/3 from the server (QUIC forced
/// for the origin, the test certificate trusted by its key): every image decodes at its own
/// size, the Resource Timing API reports `h3` for the page and for each image, and the
/// server's access log has each of those requests as `HTTP/3.0`, none over TCP.
#[cfg(feature = "http3")]
#[test]
fn page_with_60_images_over_http3_in_chromium() {
    use common::proto;
    const IMAGES: usize = 60;
    let Some(bin) = chromium() else { return };
    let srv = proto::for_every_row(Server::builder().config(proto::tls_section()))
        .setup(|_, root| {
            fs::create_dir(root.join("img")).unwrap();
            for i in 0..IMAGES {
                // Sizes 8..15 px, a colour of its own.
                let side = 8 + (i % 8) as u32;
                let rgb = [(i * 4) as u8, 255 - (i * 4) as u8, (i * 37 % 256) as u8];
                fs::write(root.join(format!("img/{i}.png")), png(side, side, rgb)).unwrap();
            }
            fs::write(root.join("h3.html"), h3_page(IMAGES)).unwrap();
        })
        .start();
    let port = srv.tls_addr().port();
    let spki = spki_sha256_base64(&srv.dir().join("localhost.crt"));
    let scratch = tempfile::tempdir().unwrap();
    let dom = run_chromium(
        &bin,
        scratch.path(),
        &[
            "--virtual-time-budget=10000",
            &format!("--origin-to-force-quic-on=localhost:{port}"),
            &format!("--ignore-certificate-errors-spki-list={spki}"),
            // The server's UDP socket is on 127.0.0.1 (not ::1).
            "--host-resolver-rules=MAP localhost 127.0.0.1",
            "--dump-dom",
            &format!("https://localhost:{port}/h3.html"),
        ],
    );
    let result = dom_result(&dom);
    assert_ne!(result, "pending", "the page did not finish loading within the time budget");
    let fields: Vec<&str> = result.split('\t').collect();
    assert_eq!(fields.len(), 4, "{result}");
    assert_eq!(fields[0], "h3", "the page's nextHopProtocol: {result}");
    assert_eq!((fields[1], fields[2]), (IMAGES.to_string().as_str(), IMAGES.to_string().as_str()), "images, decoded");
    let mut seen: Vec<&str> = fields[3].split(' ').collect();
    seen.sort_unstable();
    let mut want: Vec<String> = (0..IMAGES).map(|i| format!("{i}.png=h3")).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "each image's nextHopProtocol");

    // The server's side: the page and every image in the access log over HTTP/3, none over
    // TCP (a fallback to h2 or HTTP/1.1 would show there).
    let lines = srv.wait_access_log(IMAGES + 1);
    let ours: Vec<&String> = lines.iter().filter(|l| l.contains("GET /h3.html ") || l.contains("GET /img/")).collect();
    assert_eq!(ours.len(), IMAGES + 1, "one line for the page and each image:\n{}", lines.join("\n"));
    for l in &ours {
        assert!(l.contains(" HTTP/3.0\" 200 "), "not an HTTP/3 200: {l}");
    }
}

/// The two pages of the Alt-Svc test, each with `images` images of its own (`?v=1`, `?v=2`:
/// no cache hit between them). The first, loaded over TCP, waits for its images, then (only
/// if none of its requests went over QUIC yet) fetches a probe until one does, at most
/// [`MAX_PROBES`] times, keeps what it saw in `sessionStorage` and opens the second. The
/// second writes one line into `#result`, tab-separated: the first page's protocol, images,
/// decoded images, probes and each image's `name=protocol`; then the same for itself (no
/// probes).
#[cfg(feature = "http3")]
fn alt_svc_pages(images: usize) -> (String, String) {
    let page = |v: u32, done: &str| {
        let imgs: String = (0..images).map(|i| format!("<img src=\"/img/{i}.png?v={v}\" width=\"16\">\n")).collect();
        format!(
            r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>alt-svc {v}</title></head><body>
<pre id="result">pending</pre>
{imgs}<script>
const mine = () => performance.getEntriesByType("resource").filter(e => e.name.includes("/img/") && e.name.endsWith("?v={v}"));
const seen = probes => {{
  const imgs = Array.from(document.images);
  const decoded = imgs.filter(im => im.naturalWidth === 8 + Number(im.src.match(/(\d+)\.png/)[1]) % 8).length;
  const res = mine().map(e => e.name.split("/").pop().split("?")[0] + "=" + e.nextHopProtocol).join(" ");
  return [performance.getEntriesByType("navigation")[0].nextHopProtocol, imgs.length, decoded, probes, res];
}};
const settle = () => {{
  if (Array.from(document.images).some(im => !im.complete)) {{ setTimeout(settle, 20); return; }}
  {done}
}};
window.addEventListener("load", settle);
</script></body></html>
"#
        )
    };
    let first = page(
        1,
        &format!(
            r#"let probes = 0;
  const quic = () => performance.getEntriesByType("resource").some(e => e.nextHopProtocol === "h3");
  const next = () => {{
    if (quic() || probes >= {MAX_PROBES}) {{
      sessionStorage.setItem("first", seen(probes).join("\t"));
      location.replace("/second.html");
      return;
    }}
    probes += 1;
    fetch("/img/0.png?probe=" + probes, {{ cache: "no-store" }}).then(next, next);
  }};
  next();"#
        ),
    );
    let second = page(
        2,
        r#"document.getElementById("result").textContent = sessionStorage.getItem("first") + "\t" + seen(0).join("\t");"#,
    );
    (first, second)
}

/// How many probes the first page of the Alt-Svc test sends at most while it waits for the
/// browser's QUIC connection.
#[cfg(feature = "http3")]
const MAX_PROBES: usize = 200;

/// The text of `<pre id="result">` in a DOM chromium dumped.
fn dom_result(dom: &[u8]) -> String {
    let dom = String::from_utf8_lossy(dom).into_owned();
    let start = dom.find("<pre id=\"result\">").unwrap_or_else(|| panic!("no result in the DOM:\n{dom}"));
    let result = &dom[start + "<pre id=\"result\">".len()..];
    result[..result.find("</pre>").unwrap()].to_string()
}

/// `certutil` (Debian's `libnss3-tools`), or false (with the reason printed) when the test
/// cannot run here; in CI it must.
#[cfg(feature = "http3")]
fn have_certutil() -> bool {
    let found = std::process::Command::new("certutil")
        .arg("-H")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "certutil is not installed, and CI must run the Alt-Svc browser test"
        );
        eprintln!(
            "note: certutil is not installed: the Alt-Svc browser test is skipped (apt-get install libnss3-tools)"
        );
    }
    found
}

/// Runs `cmd` (a shell command line with `$1`.. from `args`); panics with its stderr if it fails.
#[cfg(feature = "http3")]
fn sh(cmd: &str, args: &[&Path]) {
    let out = std::process::Command::new("sh").arg("-c").arg(cmd).arg("sh").args(args).output().expect("sh runs");
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A test CA (`dir/ca.crt`) and a certificate it signed for `h3.test`
/// (`dir/h3.test.{crt,key}`, EC P-256); and `home/.pki/nssdb`, the NSS database chromium
/// reads on Linux, trusting that CA for TLS servers (`-t C,,`), as a site's own CA installed
/// by its user is.
#[cfg(feature = "http3")]
fn make_trusted_ca(dir: &Path, home: &Path) {
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    sh(
        &format!(
            "openssl req -x509 {ec} -days 30 -subj '/CN=ferrohttpd test CA' \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
             -keyout \"$1/ca.key\" -out \"$1/ca.crt\""
        ),
        &[dir],
    );
    sh(
        &format!(
            "openssl req {ec} -subj /CN=h3.test -keyout \"$1/h3.test.key\" -out \"$1/h3.test.csr\" && \
             printf 'subjectAltName=DNS:h3.test\\nbasicConstraints=critical,CA:FALSE\\nextendedKeyUsage=serverAuth\\n' \
               > \"$1/leaf.ext\" && \
             openssl x509 -req -in \"$1/h3.test.csr\" -CA \"$1/ca.crt\" -CAkey \"$1/ca.key\" -CAcreateserial \
               -days 30 -extfile \"$1/leaf.ext\" -out \"$1/h3.test.crt\""
        ),
        &[dir],
    );
    let db = home.join(".pki/nssdb");
    fs::create_dir_all(&db).unwrap();
    sh(
        "certutil -d \"sql:$1\" -N --empty-password && certutil -d \"sql:$1\" -A -t C,, -n 'ferrohttpd test CA' -i \"$2/ca.crt\"",
        &[&db, dir],
    );
}

/// Issue 35's "done when": a browser that knows nothing of the server loads the site over
/// TCP (HTTP/2 over TLS), learns `Alt-Svc: h3=":PORT"` from those responses, and loads the
/// next page and all its images over HTTP/3; nothing forces QUIC on the origin.
///
/// What Chromium needs for that, found in its source and its net log (`--log-net-log`):
/// - a certificate without errors: `HttpNetworkTransaction::DoReadHeadersComplete` hands
///   Alt-Svc to `ProcessAlternativeServices` only when the certificate status has no error
///   (with `--ignore-certificate-errors` the page loads and the field is never looked at):
///   the certificate here is signed by a test CA that an NSS database in the browser's own
///   `HOME` trusts, as a user's own CA is trusted;
/// - a host allowed an unknown root over QUIC: a root in that database is not a "known"
///   (built-in) root, and `ProofVerifierChromium::Job::DoVerifyCertComplete` fails every
///   QUIC handshake with such a root (`ERR_QUIC_CERT_ROOT_NOT_KNOWN`, logged as a TLS
///   "certificate unknown" alert) unless `ShouldAllowUnknownRootForHost`: the host is in
///   `origins_to_force_quic_on` (`QuicSessionPool::CreateCryptoConfigHandle`, by host only).
///   So `--origin-to-force-quic-on` names `h3.test:9`, a port nothing here asks for: it
///   forces QUIC on no origin used, and only lets the QUIC handshake accept the test CA.
///
/// The control: the same run against a server with `alt_svc = false` stays on HTTP/2, which
/// shows it is the Alt-Svc field that moves the browser, not the flags.
#[cfg(feature = "http3")]
#[test]
fn site_moves_to_http3_after_one_alt_svc_round_trip_in_chromium() {
    const IMAGES: usize = 60;
    let Some(bin) = chromium() else { return };
    if !have_certutil() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    make_trusted_ca(scratch.path(), &home);
    let certs = scratch.path().to_path_buf();
    let start = |alt_svc: bool| {
        let certs = certs.clone();
        Server::builder()
            .setup(move |dir, root| {
                for ext in ["crt", "key"] {
                    fs::copy(certs.join(format!("h3.test.{ext}")), dir.join(format!("h3.test.{ext}"))).unwrap();
                }
                fs::create_dir(root.join("img")).unwrap();
                for i in 0..IMAGES {
                    let side = 8 + (i % 8) as u32;
                    let rgb = [(i * 4) as u8, 255 - (i * 4) as u8, (i * 37 % 256) as u8];
                    fs::write(root.join(format!("img/{i}.png")), png(side, side, rgb)).unwrap();
                }
                let (first, second) = alt_svc_pages(IMAGES);
                fs::write(root.join("first.html"), first).unwrap();
                fs::write(root.join("second.html"), second).unwrap();
            })
            .config(&format!(
                "[status]\nenabled = true\n\
                 [tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{{dir}}/h3.test.crt\"\nkey = \"{{dir}}/h3.test.key\"\n\
                 [http3]\nenabled = true\nalt_svc = {alt_svc}\n"
            ))
            .start()
    };
    let browse = |srv: &Server| {
        let port = srv.tls_addr().port();
        let dom = run_chromium_env(
            &bin,
            scratch.path(),
            &[("HOME", &home)],
            &[
                "--virtual-time-budget=20000",
                "--host-resolver-rules=MAP h3.test 127.0.0.1",
                "--origin-to-force-quic-on=h3.test:9",
                "--dump-dom",
                &format!("https://h3.test:{port}/first.html"),
            ],
        );
        let result = dom_result(&dom);
        assert_ne!(result, "pending", "the second page did not finish loading within the time budget");
        let fields: Vec<String> = result.split('\t').map(str::to_string).collect();
        assert_eq!(fields.len(), 10, "{result}");
        fields
    };
    // Each page's images, decoded at their own sizes, and each image's protocol.
    let check_page = |f: &[String], v: u32, want: Option<&str>| {
        assert_eq!(
            (f[1].as_str(), f[2].as_str()),
            (IMAGES.to_string().as_str(), IMAGES.to_string().as_str()),
            "page {v}: images, decoded: {f:?}"
        );
        let protos: Vec<&str> = f[4].split(' ').collect();
        assert_eq!(protos.len(), IMAGES, "page {v}: one timing entry per image: {f:?}");
        if let Some(want) = want {
            assert!(
                protos.iter().all(|p| p.ends_with(&format!("={want}"))),
                "page {v}: every image over {want}: {f:?}"
            );
        }
    };

    let srv = start(true);
    let f = browse(&srv);
    eprintln!("first page: {} with {} probes; second page: {}", f[0], f[3], f[5]);
    assert_eq!(f[0], "h2", "the first page over TCP (HTTP/2 over TLS): {f:?}");
    check_page(&f[..5], 1, None);
    assert!(f[3].parse::<usize>().unwrap() < MAX_PROBES, "QUIC never came up on the first page: {f:?}");
    assert_eq!(f[5], "h3", "the second page over HTTP/3: {f:?}");
    check_page(&f[5..], 2, Some("h3"));
    // The server's side: the first page over HTTP/2, the second page and its images over
    // HTTP/3, and the status page's counters agree with the log.
    let status = srv.get("/.status").body_text();
    let count = |key: &str| -> usize {
        let line = status.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in {status}"));
        line.trim().parse().unwrap()
    };
    let (h2, h3) = (count("requests_http2:"), count("requests_http3:"));
    let lines = srv.wait_access_log(h2 + h3);
    assert_eq!(lines.iter().filter(|l| l.contains(" HTTP/2.0\" ")).count(), h2, "{}", lines.join("\n"));
    assert_eq!(lines.iter().filter(|l| l.contains(" HTTP/3.0\" ")).count(), h3, "{}", lines.join("\n"));
    assert!(lines.iter().any(|l| l.contains("\"GET /first.html HTTP/2.0\" 200 ")), "{}", lines.join("\n"));
    assert!(lines.iter().any(|l| l.contains("\"GET /second.html HTTP/3.0\" 200 ")), "{}", lines.join("\n"));
    let second: Vec<&String> = lines.iter().filter(|l| l.contains("?v=2 ")).collect();
    assert_eq!(second.len(), IMAGES, "{}", lines.join("\n"));
    assert!(second.iter().all(|l| l.contains(" HTTP/3.0\" 200 ")), "{}", lines.join("\n"));
    let handshakes = status.lines().find_map(|l| l.strip_prefix("http3_connections:")).and_then(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.chunks(2).find(|kv| kv[0] == "handshakes").map(|kv| kv[1].parse::<u64>().unwrap())
    });
    assert!(handshakes.is_some_and(|n| n >= 1), "{status}");

    // The control: no Alt-Svc, no HTTP/3, with the same browser flags.
    let srv = start(false);
    let f = browse(&srv);
    assert_eq!((f[0].as_str(), f[5].as_str()), ("h2", "h2"), "without Alt-Svc both pages over HTTP/2: {f:?}");
    assert_eq!(f[3], MAX_PROBES.to_string(), "{f:?}");
    check_page(&f[5..], 2, Some("h2"));
    let status = srv.get("/.status").body_text();
    assert!(status.contains("requests_http3: 0\n"), "{status}");
}

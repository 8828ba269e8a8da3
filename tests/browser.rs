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
    let dom = String::from_utf8_lossy(&dom).into_owned();
    let start = dom.find("<pre id=\"result\">").unwrap_or_else(|| panic!("no result in the DOM:\n{dom}"));
    let result = &dom[start + "<pre id=\"result\">".len()..];
    let result = &result[..result.find("</pre>").unwrap()];
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
    let dom = String::from_utf8_lossy(&dom).into_owned();
    let start = dom.find("<pre id=\"result\">").unwrap_or_else(|| panic!("no result in the DOM:\n{dom}"));
    let result = &dom[start + "<pre id=\"result\">".len()..];
    let result = &result[..result.find("</pre>").unwrap()];
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

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = ferrohttpd_fuzz::check_qpack_decode(data) {
        panic!("{e}");
    }
});

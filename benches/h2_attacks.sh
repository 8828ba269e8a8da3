#!/bin/sh
# HTTP/2 attacks and what they cost another client: runs tests/h2_attacks.rs (the real binary,
# h2c on loopback, hand-built frames) one test at a time and prints its `h2-attack` lines: per
# attack, the other client's request latency (median, p99, max) on its own connection while the
# attack runs, and the server's peak and current memory. The tests assert only generous bounds
# (2 s, 64 MiB); these are the measured figures. Run from the repository root:
#
#     sh benches/h2_attacks.sh            # release build (the figures to quote)
#     sh benches/h2_attacks.sh --debug    # the debug build the test suite uses
set -eu
profile=--release
if [ "${1:-}" = "--debug" ]; then
	profile=
fi
# shellcheck disable=SC2086
cargo test $profile --test h2_attacks -- --nocapture --test-threads 1 2>&1 | grep -oE 'h2-attack.*|^test result.*|FAILED.*|panicked.*'

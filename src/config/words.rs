//! The TOML layer's type errors (serde's words: `invalid type: string "x", expected i64`,
//! `data did not match any variant of untagged enum RawDuration`) said in words a user of
//! the configuration file reads: what the key takes, and what it found.

/// `msg` from the TOML deserializer, rewritten when it is a type error; other messages
/// (unknown keys, bad values checked by ferrohttpd itself) are returned as they are.
pub(super) fn plain(msg: &str) -> String {
    if let Some(rest) = msg.strip_prefix("data did not match any variant of untagged enum ") {
        let wanted = match rest.trim() {
            "RawDuration" => "a duration: a number of seconds, or a string such as \"500ms\", \"10s\", \"2m\", \"1h\"",
            "RawRate" => "a rate: bytes per second, or a string such as \"200KiB/s\" or \"1MB/s\"",
            "RawWorkers" => "a number of worker processes, or \"auto\"",
            "RawDeferAccept" => "true, false or \"auto\"",
            _ => return msg.to_string(),
        };
        return format!("expected {wanted}");
    }
    let Some(rest) = msg.strip_prefix("invalid type: ") else { return msg.to_string() };
    let Some((found, expected)) = rest.split_once(", expected ") else { return msg.to_string() };
    format!("expected {}, found {}", expected_words(expected.trim()), found_words(found))
}

fn expected_words(serde: &str) -> &str {
    match serde {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a string" => "a string in quotes",
        "a sequence" => "a list in brackets, such as [\"a\", \"b\"]",
        "a map" => "a table, such as { name = \"value\" }",
        "struct" => "a table",
        other => other,
    }
}

/// serde's `string "x"`, `integer `1``, `boolean `true``, `sequence`, `map`.
fn found_words(serde: &str) -> String {
    let words =
        [("string ", "the string "), ("integer ", "the number "), ("floating point ", "the number "), ("boolean ", "")];
    for (prefix, ours) in words {
        if let Some(v) = serde.strip_prefix(prefix) {
            return format!("{ours}{}", v.trim_matches('`'));
        }
    }
    match serde {
        "sequence" => "a list".into(),
        "map" => "a table".into(),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn type_errors_in_words() {
        assert_eq!(
            plain("invalid type: string \"x\", expected i64"),
            "expected a whole number, found the string \"x\""
        );
        assert_eq!(
            plain("invalid type: integer `1`, expected a boolean"),
            "expected true or false, found the number 1"
        );
        assert_eq!(
            plain("invalid type: string \"a\", expected a sequence"),
            "expected a list in brackets, such as [\"a\", \"b\"], found the string \"a\""
        );
        assert_eq!(plain("invalid type: sequence, expected a string"), "expected a string in quotes, found a list");
        assert!(plain("data did not match any variant of untagged enum RawDuration").contains("\"10s\""));
        assert_eq!(plain("unknown field `x`, expected one of `a`, `b`"), "unknown field `x`, expected one of `a`, `b`");
        assert_eq!(
            plain("data did not match any variant of untagged enum Other"),
            "data did not match any variant of untagged enum Other"
        );
    }
}

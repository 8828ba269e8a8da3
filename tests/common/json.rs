//! A strict little JSON parser (RFC 8259) for the tests: enough to check documents the
//! server produces (the status page, listings) structurally.

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn num(&self, path: &[&str]) -> Result<f64, String> {
        let mut v = self;
        for k in path {
            v = v.get(k).ok_or_else(|| format!("no key {path:?} in the JSON"))?;
        }
        match v {
            Json::Num(n) => Ok(*n),
            other => Err(format!("{path:?} is {other:?}, not a number")),
        }
    }

    pub fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A strict little JSON parser (RFC 8259), enough to check the status document is valid.
pub fn parse_json(text: &str) -> Result<Json, String> {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            }
        }
        fn err<T>(&self, what: &str) -> Result<T, String> {
            Err(format!("invalid JSON at byte {}: {what}", self.i))
        }
        fn lit(&mut self, s: &str, v: Json) -> Result<Json, String> {
            if self.b[self.i..].starts_with(s.as_bytes()) {
                self.i += s.len();
                Ok(v)
            } else {
                self.err("bad literal")
            }
        }
        fn value(&mut self) -> Result<Json, String> {
            self.ws();
            match self.b.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut m = Vec::new();
                    self.ws();
                    if self.b.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Json::Obj(m));
                    }
                    loop {
                        self.ws();
                        let Json::Str(k) = self.string()? else { unreachable!() };
                        self.ws();
                        if self.b.get(self.i) != Some(&b':') {
                            return self.err("expected ':'");
                        }
                        self.i += 1;
                        let v = self.value()?;
                        m.push((k, v));
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Json::Obj(m));
                            }
                            _ => return self.err("expected ',' or '}'"),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut a = Vec::new();
                    self.ws();
                    if self.b.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Json::Arr(a));
                    }
                    loop {
                        a.push(self.value()?);
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Json::Arr(a));
                            }
                            _ => return self.err("expected ',' or ']'"),
                        }
                    }
                }
                Some(b'"') => self.string(),
                Some(b't') => self.lit("true", Json::Bool(true)),
                Some(b'f') => self.lit("false", Json::Bool(false)),
                Some(b'n') => self.lit("null", Json::Null),
                Some(c) if *c == b'-' || c.is_ascii_digit() => {
                    let start = self.i;
                    self.i += 1;
                    while self.i < self.b.len()
                        && matches!(self.b[self.i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                    {
                        self.i += 1;
                    }
                    let s = std::str::from_utf8(&self.b[start..self.i]).unwrap();
                    s.parse().map(Json::Num).or_else(|_| self.err("bad number"))
                }
                _ => self.err("expected a value"),
            }
        }
        fn string(&mut self) -> Result<Json, String> {
            if self.b.get(self.i) != Some(&b'"') {
                return self.err("expected a string");
            }
            self.i += 1;
            let mut out = Vec::new();
            loop {
                match self.b.get(self.i) {
                    None => return self.err("unterminated string"),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).map(Json::Str).or_else(|_| self.err("not UTF-8"));
                    }
                    Some(b'\\') => {
                        let e = self.b.get(self.i + 1).copied();
                        self.i += 2;
                        match e {
                            Some(b'"') => out.push(b'"'),
                            Some(b'\\') => out.push(b'\\'),
                            Some(b'/') => out.push(b'/'),
                            Some(b'b') => out.push(8),
                            Some(b'f') => out.push(12),
                            Some(b'n') => out.push(b'\n'),
                            Some(b'r') => out.push(b'\r'),
                            Some(b't') => out.push(b'\t'),
                            Some(b'u') => {
                                let hex = self.b.get(self.i..self.i + 4).ok_or("short \\u escape")?;
                                let c = u32::from_str_radix(std::str::from_utf8(hex).unwrap_or("x"), 16)
                                    .map_err(|_| "bad \\u escape".to_string())?;
                                self.i += 4;
                                let ch = char::from_u32(c).unwrap_or('\u{fffd}');
                                out.extend_from_slice(ch.to_string().as_bytes());
                            }
                            _ => return self.err("bad escape"),
                        }
                    }
                    Some(&c) if c < 0x20 => return self.err("control byte in a string"),
                    Some(&c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }
    }
    let mut p = P { b: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return p.err("trailing bytes");
    }
    Ok(v)
}

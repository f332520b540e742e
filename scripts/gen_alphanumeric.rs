// The code point ranges of `format/alphanumeric.py`: every run of characters Rust's
// `char::is_alphanumeric` accepts (what pylance's `simple` tokenizer keeps in a token).
//
//     rustc -O scripts/gen_alphanumeric.rs -o /tmp/alnum && /tmp/alnum > ranges.txt
//
// prints "first last" (hexadecimal, inclusive) per line, and the Unicode version on stderr.
fn main() {
    let mut start: Option<u32> = None;
    let mut prev = 0u32;
    let mut out = Vec::new();
    for cp in 0u32..=0x10FFFF {
        let ok = char::from_u32(cp).map(|c| c.is_alphanumeric()).unwrap_or(false);
        match (ok, start) {
            (true, None) => { start = Some(cp); }
            (false, Some(s)) => { out.push((s, prev)); start = None; }
            _ => {}
        }
        if ok { prev = cp; }
    }
    if let Some(s) = start { out.push((s, prev)); }
    for (a, b) in &out { println!("{:X} {:X}", a, b); }
    eprintln!("{} ranges, unicode {:?}", out.len(), char::UNICODE_VERSION);
}

//! Units exactly as iproute2 reads and writes them (§4.3–4.4 of docs/kernel-notes.md):
//! `get_rate64`, `get_size`, `get_size_and_cell`, `get_time`, `get_time64` on input;
//! `print_rate`, `sprint_size`, `sprint_time`, `sprint_time64` on output.
//! Rates are bytes per second, times in µs (get_time) or ns (get_time64).

/// Rate suffixes of tc_util.c's table, matched case-insensitively on the whole
/// suffix; the factor turns the number into bits per second.
const RATE_SUFFIXES: &[(&str, f64)] = &[
    ("bit", 1.),
    ("kibit", 1024.),
    ("kbit", 1000.),
    ("mibit", 1024. * 1024.),
    ("mbit", 1_000_000.),
    ("gibit", 1024. * 1024. * 1024.),
    ("gbit", 1_000_000_000.),
    ("tibit", 1024. * 1024. * 1024. * 1024.),
    ("tbit", 1_000_000_000_000.),
    ("bps", 8.),
    ("kibps", 8. * 1024.),
    ("kbps", 8000.),
    ("mibps", 8. * 1024. * 1024.),
    ("mbps", 8_000_000.),
    ("gibps", 8. * 1024. * 1024. * 1024.),
    ("gbps", 8_000_000_000.),
    ("tibps", 8. * 1024. * 1024. * 1024. * 1024.),
    ("tbps", 8_000_000_000_000.),
];

/// C's `strtod` prefix: the longest leading decimal number. Returns the value and the rest.
fn strtod(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    let start = i;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    // Hex (0x…) is accepted by strtod too.
    if i + 1 < b.len() && b[i] == b'0' && (b[i + 1] | 0x20) == b'x' {
        let hs = i + 2;
        let mut j = hs;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            j += 1;
        }
        if j > hs {
            let v = u64::from_str_radix(&s[hs..j], 16).ok()? as f64;
            let v = if b[start] == b'-' { -v } else { v };
            return Some((v, &s[j..]));
        }
    }
    let digits_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut nd = i - digits_start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let fs = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        nd += i - fs;
    }
    if nd == 0 {
        // "inf"/"nan" are strtod's too; tc then rejects them by range.
        let rest = &s[digits_start..];
        for w in ["infinity", "inf", "nan"] {
            if rest.get(..w.len()).is_some_and(|p| p.eq_ignore_ascii_case(w)) {
                let v = if w == "nan" { f64::NAN } else { f64::INFINITY };
                let v = if b[start] == b'-' { -v } else { v };
                return Some((v, &rest[w.len()..]));
            }
        }
        return None;
    }
    if i < b.len() && (b[i] | 0x20) == b'e' {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let es = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > es {
            i = j;
        }
    }
    let v: f64 = s[start..i].parse().ok()?;
    Some((v, &s[i..]))
}

/// `get_rate64`: bytes per second. `None` is tc's "invalid rate".
pub fn get_rate64(s: &str) -> Option<u64> {
    let (v, rest) = strtod(s)?;
    let bits = if rest.is_empty() {
        v
    } else {
        let (_, f) = RATE_SUFFIXES.iter().find(|(n, _)| n.eq_ignore_ascii_case(rest))?;
        v * f
    };
    // tc checks no range: what it sends is C's double → u64 conversion as x86-64
    // compiles it (-1mbit becomes 2^64 - 125000; NaN and -inf 2^63; +inf and
    // anything from 2^64 up, 0), and the kernel takes what it is given.
    Some(c_double_to_u64(bits / 8.))
}

/// `(__u64)x` on x86-64: below 2^63 (NaN included, as the comparison fails) one
/// cvttsd2si, whose out-of-range answer is 2^63; from 2^63 up, cvttsd2si of x − 2^63
/// with the top bit flipped.
fn c_double_to_u64(x: f64) -> u64 {
    const TOP: f64 = 9_223_372_036_854_775_808.0;
    let cvt = |v: f64| if v.is_nan() || !(-TOP..TOP).contains(&v) { 1u64 << 63 } else { v as i64 as u64 };
    if x >= TOP {
        cvt(x - TOP) ^ (1 << 63)
    } else {
        cvt(x)
    }
}

/// `get_rate`: like get_rate64 but must fit 32 bits.
pub fn get_rate(s: &str) -> Option<u32> {
    get_rate64(s).and_then(|r| u32::try_from(r).ok())
}

/// `parse_percent` on the `[0-9.%]` prefix tc scans: `N%` as a fraction (N/100).
pub fn get_percent(s: &str) -> Option<f64> {
    // sscanf("%m[0-9.%]") must match a character; strtod of what it took may match
    // none ("%" is 0 %), and only a "%" may follow the number.
    let scanned: String = s.chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '%').collect();
    if scanned.is_empty() {
        return None;
    }
    let (v, rest) = strtod(&scanned).unwrap_or((0.0, &scanned));
    if !rest.is_empty() && rest != "%" {
        return None;
    }
    Some(v / 100.0)
}

/// `get_size`: bytes. Suffixes k/kb, m/mb, g/gb (binary), kbit/mbit/gbit (÷8), b.
pub fn get_size(s: &str) -> Option<u32> {
    let (mut v, rest) = strtod(s)?;
    if !rest.is_empty() {
        let r = rest.to_ascii_lowercase();
        v *= match r.as_str() {
            "kb" | "k" => 1024.,
            "gb" | "g" => 1024. * 1024. * 1024.,
            "gbit" => 1024. * 1024. * 1024. / 8.,
            "mb" | "m" => 1024. * 1024.,
            "mbit" => 1024. * 1024. / 8.,
            "kbit" => 1024. / 8.,
            "b" => 1.,
            _ => return None,
        };
    }
    // tc stores into an unsigned int and rejects anything that did not survive.
    // A fraction is cut off when tc stores it (`1.5` is 1); negative or ≥ 2^32 is refused.
    if !(0.0..4294967296.0).contains(&v) {
        return None;
    }
    Some(v as u32)
}

/// `get_size_and_cell`: `SIZE[/CELL]`, CELL a power of two → (size, cell_log).
pub fn get_size_and_cell(s: &str) -> Option<(u32, Option<u8>)> {
    match s.split_once('/') {
        None => Some((get_size(s)?, None)),
        Some((sz, cell)) => {
            let size = get_size(sz)?;
            let cell: i64 = parse_c_integer(cell)?;
            let log = (0..32).find(|i| (1i64 << i) == cell)?;
            Some((size, Some(log as u8)))
        }
    }
}

/// `get_time`: microseconds. Suffixes s/sec/secs, ms/msec/msecs, us/usec/usecs; none = µs.
pub fn get_time(s: &str) -> Option<u32> {
    let (mut t, rest) = strtod(s)?;
    if !rest.is_empty() {
        t *= match rest.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" => 1e6,
            "ms" | "msec" | "msecs" => 1e3,
            "us" | "usec" | "usecs" => 1.,
            _ => return None,
        };
    }
    // iproute2 stores the double into an unsigned int unchecked; on x86-64 that
    // conversion goes through a signed 64-bit integer (cvttsd2si: NaN and values out of
    // its range become INT64_MIN) and keeps the low 32 bits, so `nan` and `inf` read as 0.
    Some(cvttsd2si(t) as u32)
}

/// C's double → integer conversion on x86-64 (`cvttsd2si` to 64 bits): truncation, with
/// NaN and out-of-range values giving INT64_MIN where Rust's `as` would saturate.
fn cvttsd2si(t: f64) -> i64 {
    if t.is_nan() || !(-9.223372036854775808e18..9.223372036854775807e18).contains(&t) {
        i64::MIN
    } else {
        t as i64
    }
}

/// `get_time64`'s reading: `strtod`, then a unit (s/ms/us/ns and their long forms; none
/// = ns), as nanoseconds.
fn time64_ns(s: &str) -> Option<f64> {
    let (t, rest) = strtod(s)?;
    if rest.is_empty() {
        return Some(t);
    }
    Some(
        t * match rest.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" => 1e9,
            "ms" | "msec" | "msecs" => 1e6,
            "us" | "usec" | "usecs" => 1e3,
            "ns" | "nsec" | "nsecs" => 1.,
            _ => return None,
        },
    )
}

/// `get_time64` where only a non-negative time makes sense: nanoseconds.
pub fn get_time64(s: &str) -> Option<u64> {
    let t = time64_ns(s)?;
    if t.is_nan() || !(0.0..1.8446744073709552e19).contains(&t) {
        return None;
    }
    Some(t as u64)
}

/// `get_time64` as it really is: signed nanoseconds (a negative time is tc's to send
/// and the kernel's to refuse).
pub fn get_stime64(s: &str) -> Option<i64> {
    let t = time64_ns(s)?;
    Some(cvttsd2si(t))
}

/// tc/tc_util.c `parse_percent`: `strtod` / 100, within [0, 1], then nothing or `%`.
/// A word without a number reads as 0 (then fails on its text unless it is `%`).
pub fn parse_percent(s: &str) -> Option<f64> {
    let (v, rest) = match strtod(s) {
        Some((v, rest)) => (v / 100., rest),
        None => (0., s),
    };
    if !(0.0..=1.0).contains(&v) {
        return None;
    }
    if !rest.is_empty() && rest != "%" {
        return None;
    }
    Some(v)
}

/// lib/utils.c `get_float_min_max`: `strtof` over the whole word, within [min, max].
pub fn get_float_min_max(s: &str, min: f32, max: f32) -> Option<f32> {
    let (v, rest) = strtod(s)?;
    if !rest.is_empty() {
        return None;
    }
    // strtof rounds the decimal once; the digits strtod took, read as f32, do too.
    let text = s.trim_start_matches([' ', '\t']);
    let v = text.parse::<f32>().unwrap_or(v as f32);
    (v >= min && v <= max).then_some(v)
}

/// iproute2 `get_u64(&v, s, 10)`: `strtoull` over the whole word (a minus sign
/// negates modulo 2^64; white space may lead).
pub fn get_u64_base10(s: &str) -> Option<u64> {
    let (neg, mag) = strto_base10(s)?;
    Some(if neg { mag.wrapping_neg() } else { mag })
}

/// C `strtol(p, &end, 0)` on a prefix: the value (clamped to the `long` range, as
/// ERANGE does) and how many bytes it used; None when no number starts here.
pub fn strtol0_prefix(b: &[u8]) -> Option<(i64, usize)> {
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let (radix, start) = if b.get(i) == Some(&b'0')
        && b.get(i + 1).is_some_and(|c| c | 0x20 == b'x')
        && b.get(i + 2).is_some_and(|c| c.is_ascii_hexdigit())
    {
        (16, i + 2)
    } else if b.get(i) == Some(&b'0') {
        (8, i)
    } else {
        (10, i)
    };
    let mut j = start;
    let mut v: i128 = 0;
    while let Some(d) = b.get(j).and_then(|&c| (c as char).to_digit(radix)) {
        v = (v * radix as i128 + d as i128).min(1 << 64);
        j += 1;
    }
    if j == start {
        return None;
    }
    let v = if neg { -v } else { v };
    Some((v.clamp(i64::MIN as i128, i64::MAX as i128) as i64, j))
}

/// C `strtol(s, &end, 0)` with the whole string consumed (`get_integer`, `get_u32` …).
pub fn parse_c_integer(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() {
        return None;
    }
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        i64::from_str_radix(&body[1..], 8).ok()?
    } else {
        if !body.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        body.parse().ok()?
    };
    Some(if neg { -v } else { v })
}

/// C `strtol`/`strtoul` with base 10 over the whole string: leading white space, an
/// optional sign, at least one digit, nothing after. Returns (negative, magnitude);
/// a magnitude beyond `u64::MAX` is the ERANGE case and fails.
fn strto_base10(s: &str) -> Option<(bool, u64)> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\u{b}', '\u{c}', '\r']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for c in digits.bytes() {
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some((neg, v))
}

/// iproute2 `get_integer(&v, s, 10)`: strtol, then the value must fit an `int`.
pub fn get_integer10(s: &str) -> Option<i32> {
    let (neg, mag) = strto_base10(s)?;
    let v = if neg { -(mag as i128) } else { mag as i128 };
    i32::try_from(v).ok()
}

/// iproute2 `get_unsigned(&v, s, 10)`: strtoul (a minus sign negates modulo 2^64),
/// then the value must fit an `unsigned int`.
pub fn get_unsigned10(s: &str) -> Option<u32> {
    let (neg, mag) = strto_base10(s)?;
    let v = if neg { mag.wrapping_neg() } else { mag };
    u32::try_from(v).ok()
}

/// `get_unsigned` / `get_u32` with base 0.
pub fn get_u32(s: &str) -> Option<u32> {
    parse_c_integer(s).and_then(|v| u32::try_from(v).ok())
}

/// `get_u32(…, 16)`: hex digits, a `0x` prefix allowed.
pub fn get_u32_base16(s: &str) -> Option<u32> {
    let b = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if b.is_empty() || !b.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(b, 16).ok()
}

/// iproute2 `get_s64(&v, s, 10)`: strtoll over the whole word; out of range fails.
pub fn get_s64_base10(s: &str) -> Option<i64> {
    let (neg, mag) = strto_base10(s)?;
    let v = if neg { -(mag as i128) } else { mag as i128 };
    i64::try_from(v).ok()
}

/// `get_integer` (int, base 0).
pub fn get_integer(s: &str) -> Option<i32> {
    parse_c_integer(s).and_then(|v| i32::try_from(v).ok())
}

// ---------------------------------------------------------------------------------
// Printing

/// `print_rate` text form: bytes/s in, e.g. `1Mbit`, `1500Kbit`, `10Gbit`.
pub fn fmt_rate(bytes_per_sec: u64, iec: bool) -> String {
    let kilo: u64 = if iec { 1024 } else { 1000 };
    let units = ["", "K", "M", "G", "T"];
    let mut rate = bytes_per_sec.wrapping_shl(3);
    let mut i = 0;
    while i < units.len() - 1 {
        if rate < kilo {
            break;
        }
        if !rate.is_multiple_of(kilo) && rate < 1000 * kilo {
            break;
        }
        rate /= kilo;
        i += 1;
    }
    format!("{}{}{}bit", rate, units[i], if iec && i > 0 { "i" } else { "" })
}

/// `sprint_size` (iproute2 6.15: no Gb case): `1514b`, `4Kb`, `32Mb`.
pub fn fmt_size(sz: u32) -> String {
    let kilo = 1024.0f64;
    let mega = kilo * kilo;
    let t = sz as f64;
    if t >= mega && (mega * (t / mega).round_ties_even() - t).abs() < 1024. {
        format!("{}Mb", fmt_g((t / mega).round_ties_even(), 6))
    } else if t >= kilo && (kilo * (t / kilo).round_ties_even() - t).abs() < 16. {
        format!("{}Kb", fmt_g((t / kilo).round_ties_even(), 6))
    } else {
        format!("{sz}b")
    }
}

/// `sprint_time`: µs in; `%.3g` seconds/ms above 1 s/1 ms, else integer µs.
pub fn fmt_time(us: u32) -> String {
    let t = us as f64;
    if t >= 1e6 {
        format!("{}s", fmt_g(t / 1e6, 3))
    } else if t >= 1e3 {
        format!("{}ms", fmt_g(t / 1e3, 3))
    } else {
        format!("{us}us")
    }
}

/// `sprint_time64`: ns in.
pub fn fmt_time64(ns: i64) -> String {
    let t = ns as f64;
    if t >= 1e9 {
        format!("{}s", fmt_g(t / 1e9, 3))
    } else if t >= 1e6 {
        format!("{}ms", fmt_g(t / 1e6, 3))
    } else if t >= 1e3 {
        format!("{}us", fmt_g(t / 1e3, 3))
    } else {
        format!("{ns}ns")
    }
}

/// C's `%.<prec>g`.
pub fn fmt_g(v: f64, prec: usize) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0. {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let p = prec.max(1);
    // The exponent after rounding to p significant digits decides the style.
    let e_str = format!("{:.*e}", p - 1, v);
    let (mant, exp) = e_str.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    if exp < -4 || exp >= p as i32 {
        let mant = strip_zeros(mant);
        format!("{}e{}{:02}", mant, if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, v)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------
// Ticks (tc_core.c): tc's time unit for rate tables and tbf/htb buffers.

/// Ticks per µs as read from /proc/net/psched (1000 ns per µs / 64 ns per tick).
pub const TICK_IN_USEC: f64 = 1000.0 / 64.0;

/// `tc_core_time2tick`.
pub fn time2tick(us: f64) -> f64 {
    us * TICK_IN_USEC
}
/// `tc_core_tick2time`.
pub fn tick2time(ticks: f64) -> f64 {
    ticks / TICK_IN_USEC
}

/// C's `double` → `unsigned int` as iproute2 gets it on x86-64: through a 64-bit
/// integer, keeping the low 32 bits (so a too-large value wraps); NaN and values
/// beyond 2^63 give INT64_MIN, whose low bits are 0.
pub fn c_double_to_u32(x: f64) -> u32 {
    if x.is_finite() && x.abs() < 9.223_372_036_854_776e18 {
        (x as i64) as u32
    } else {
        0
    }
}

/// `tc_calc_xmittime(rate, size)`: ticks to send `size` bytes at `rate` bytes/s, its
/// `unsigned int` result wrapping for huge values (`rate 8bit` with a large burst).
pub fn calc_xmittime(rate: u64, size: u32) -> u32 {
    c_double_to_u32(time2tick(1_000_000.0 * (size as f64 / rate as f64)).ceil())
}

/// `tc_calc_xmitsize(rate, ticks)`: bytes sendable in `ticks` at `rate`, wrapping
/// like C for huge rates.
pub fn calc_xmitsize(rate: u64, ticks: u32) -> u32 {
    c_double_to_u32(rate as f64 * tick2time(ticks as f64) / 1_000_000.0)
}

/// `PSCHED_TICKS2NS`: a tick is 64 ns.
pub fn ticks2ns(ticks: u32) -> i64 {
    (ticks as i64) << 6
}

/// `PSCHED_NS2TICKS`.
pub fn ns2ticks(ns: i64) -> i64 {
    ns >> 6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(get_rate64("1mbit"), Some(125_000));
        assert_eq!(get_rate64("1Mbit"), Some(125_000));
        assert_eq!(get_rate64("1mbps"), Some(1_000_000)); // megabytes, case-insensitive
        assert_eq!(get_rate64("100kbps"), Some(100_000));
        assert_eq!(get_rate64("1mibit"), Some(131_072));
        assert_eq!(get_rate64("8"), Some(1));
        assert_eq!(get_rate64("1001bit"), Some(125));
        assert_eq!(get_rate64("1.5mbit"), Some(187_500));
        assert_eq!(get_rate64("100gbit"), Some(12_500_000_000));
        assert_eq!(get_rate64("xyz"), None);
        assert_eq!(get_rate64("10foo"), None);
        assert_eq!(get_rate64("-1mbit"), Some(u64::MAX - 124_999));
        // No range check in tc: C's conversion as x86-64 does it.
        assert_eq!(get_rate64("nan"), Some(1 << 63));
        assert_eq!(get_rate64("-inf"), Some(1 << 63));
        assert_eq!(get_rate64("inf"), Some(0));
        assert_eq!(get_rate64("1e30"), Some(0));
        assert_eq!(get_rate("100gbit"), None);
    }

    /// Found by fuzzing: a value that is not a number and whose first three bytes end
    /// inside a character panicked (the "inf" lookahead sliced it).
    #[test]
    fn non_numbers_with_multibyte_characters_are_invalid() {
        for v in ["x\u{fffd}", "ññ", "ñññ", "-ññ", "i\u{fffd}"] {
            assert_eq!((get_rate64(v), get_size(v), get_time(v)), (None, None, None), "{v}");
        }
        // tc itself takes "inf" (C's double → u64 conversion makes it 0).
        assert_eq!(get_rate64("inf"), Some(0));
    }

    #[test]
    fn sizes_parse_like_tc() {
        assert_eq!(get_size("10k"), Some(10240));
        assert_eq!(get_size("10KB"), Some(10240));
        assert_eq!(get_size("1mb"), Some(1 << 20));
        assert_eq!(get_size("32kbit"), Some(4096));
        assert_eq!(get_size("1514b"), Some(1514));
        assert_eq!(get_size("1.5k"), Some(1536));
        assert_eq!(get_size("1.3"), Some(1));
        assert_eq!(get_size("-1"), None);
        assert_eq!(get_size("abc"), None);
        assert_eq!(get_size("4g"), None);
        assert_eq!(get_size_and_cell("10k/8"), Some((10240, Some(3))));
        assert_eq!(get_size_and_cell("10k/7"), None);
    }

    #[test]
    fn times_parse_like_tc() {
        assert_eq!(get_time("50ms"), Some(50_000));
        assert_eq!(get_time("1s"), Some(1_000_000));
        assert_eq!(get_time("500us"), Some(500));
        assert_eq!(get_time("500"), Some(500));
        assert_eq!(get_time64("10us"), Some(10_000));
        assert_eq!(get_time64("10"), Some(10));
        assert_eq!(get_time("5 ms"), None);
        assert_eq!(get_time("4294967296"), Some(0));
        assert_eq!(get_time("4294967297us"), Some(1));
        // Through x86-64's cvttsd2si: NaN, infinities and |t| ≥ 2^63 give INT64_MIN, low
        // 32 bits 0 (tc takes `estimator nan 1s` as a zero interval); −1 wraps.
        assert_eq!(
            (get_time("nan"), get_time("inf"), get_time("-inf"), get_time("1e30s")),
            (Some(0), Some(0), Some(0), Some(0))
        );
        assert_eq!(get_time("-1"), Some(u32::MAX));
        assert_eq!(get_percent("10%"), Some(0.1));
        assert_eq!(get_percent("10%x"), Some(0.1));
        assert_eq!(get_percent("x"), None);
        assert_eq!(get_percent("%"), Some(0.0));
        assert_eq!(get_percent("-5%"), None);
    }

    #[test]
    fn rates_print_like_tc() {
        assert_eq!(fmt_rate(68_750, false), "550Kbit");
        assert_eq!(fmt_rate(125_000, false), "1Mbit");
        assert_eq!(fmt_rate(187_500, false), "1500Kbit");
        assert_eq!(fmt_rate(1_250_000_000, false), "10Gbit");
        assert_eq!(fmt_rate(154_321, false), "1234Kbit");
        assert_eq!(fmt_rate(12, false), "96bit");
        assert_eq!(fmt_rate(131_072, true), "1Mibit");
    }

    #[test]
    fn sizes_and_times_print_like_tc() {
        for (v, s) in
            [(3028, "3028b"), (15140, "15140b"), (4096, "4Kb"), (33554432, "32Mb"), (1514, "1514b"), (1600, "1600b")]
        {
            assert_eq!(fmt_size(v), s);
        }
        assert_eq!(fmt_size(1 << 30), "1024Mb");
        for (v, s) in
            [(40000, "40ms"), (10000000, "10s"), (5000, "5ms"), (1500, "1.5ms"), (12345, "12.3ms"), (0, "0us")]
        {
            assert_eq!(fmt_time(v), s);
        }
        assert_eq!(fmt_time64(10_000), "10us");
        assert_eq!(fmt_time64(999), "999ns");
        assert_eq!(fmt_g(1234567.0, 6), "1.23457e+06");
        assert_eq!(fmt_g(0.0001, 6), "0.0001");
    }

    #[test]
    fn ticks_round_trip_like_tc() {
        // tbf "rate 1mbit burst 32kbit": 4096 B at 125000 B/s = 32.768 ms = 512000 ticks.
        assert_eq!(calc_xmittime(125_000, 4096), 512_000);
        assert_eq!(calc_xmitsize(125_000, 512_000), 4096);
    }
}

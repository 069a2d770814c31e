//! One printer for text and `-j` JSON, like iproute2's `json_print.c` over its
//! streaming `json_writer.c`: every `print_*` call carries the JSON key and the text
//! form; the mode decides which is written. Pretty JSON (`-p`) indents by four
//! spaces, and — an iproute2 quirk — arrays are closed without a line break.

use std::fmt::{self, Write};

pub struct Out {
    buf: String,
    json: bool,
    pretty: bool,
    depth: usize,
    /// Separator owed before the next element (',' once the container is non-empty).
    sep: bool,
    /// `-d`, `-raw` and `-iec` as the printers see them.
    details: bool,
    raw: bool,
    iec: bool,
    /// `-oneline`: line breaks become `\\` (iproute2's `_SL_`).
    oneline: bool,
    /// `-s`: some printers (sfq's RED counters) print more with it.
    stats: bool,
}

impl Out {
    pub fn text() -> Self {
        Out {
            buf: String::new(),
            json: false,
            pretty: false,
            depth: 0,
            sep: false,
            details: false,
            raw: false,
            iec: false,
            oneline: false,
            stats: false,
        }
    }
    pub fn json(pretty: bool) -> Self {
        Out {
            buf: String::new(),
            json: true,
            pretty,
            depth: 0,
            sep: false,
            details: false,
            raw: false,
            iec: false,
            oneline: false,
            stats: false,
        }
    }
    /// Set `-d` / `-raw` / `-iec`.
    pub fn with_flags(mut self, details: bool, raw: bool, iec: bool, oneline: bool) -> Self {
        self.details = details;
        self.raw = raw;
        self.iec = iec;
        self.oneline = oneline;
        self
    }
    pub fn details(&self) -> bool {
        self.details
    }
    pub fn raw(&self) -> bool {
        self.raw
    }
    /// Set `-s` (iproute2's global `show_stats`, which some `print_qopt`s read).
    pub fn with_stats(mut self, stats: bool) -> Self {
        self.stats = stats;
        self
    }
    pub fn show_stats(&self) -> bool {
        self.stats
    }
    pub fn iec(&self) -> bool {
        self.iec
    }
    /// `print_rate`: bytes/s as text (`1Mbit`) or as a JSON number.
    pub fn rate(&mut self, key: &str, fmt_prefix: &str, bytes_per_sec: u64, suffix: &str) {
        let txt = super::units::fmt_rate(bytes_per_sec, self.iec);
        self.uint(key, format_args!("{fmt_prefix}{txt}{suffix}"), bytes_per_sec);
    }
    /// `print_size`: bytes as text (`4Kb`) or as a JSON number (u32 in iproute2 6.15).
    pub fn size(&mut self, key: &str, fmt_prefix: &str, bytes: u32, suffix: &str) {
        let txt = super::units::fmt_size(bytes);
        self.uint(key, format_args!("{fmt_prefix}{txt}{suffix}"), bytes as u64);
    }
    pub fn is_json(&self) -> bool {
        self.json
    }
    pub fn into_string(self) -> String {
        self.buf
    }
    pub fn as_str(&self) -> &str {
        &self.buf
    }

    // ---- text-only and JSON-only pieces ------------------------------------------

    /// Text mode only (`PRINT_FP`).
    pub fn fp(&mut self, args: fmt::Arguments) {
        if !self.json {
            let _ = self.buf.write_fmt(args);
        }
    }
    /// A printer's plain `fprintf(f, …)`: the text goes out in both modes, so inside
    /// `-j` output it lands in the JSON as it is (q_multiq.c prints its bands so).
    pub fn fprintf(&mut self, args: fmt::Arguments) {
        let _ = self.buf.write_fmt(args);
    }
    /// `print_nl`: a line break in text mode.
    pub fn nl(&mut self) {
        if !self.json {
            self.buf.push(if self.oneline { '\\' } else { '\n' });
        }
    }

    // ---- key/value printers (`PRINT_ANY`) --------------------------------------

    pub fn uint(&mut self, key: &str, text: fmt::Arguments, v: u64) {
        if self.json {
            self.name(key);
            self.eor();
            let _ = write!(self.buf, "{v}");
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    pub fn int(&mut self, key: &str, text: fmt::Arguments, v: i64) {
        if self.json {
            self.name(key);
            self.eor();
            let _ = write!(self.buf, "{v}");
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    pub fn string(&mut self, key: &str, text: fmt::Arguments, v: &str) {
        if self.json {
            self.name(key);
            self.eor();
            self.put_str(v);
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    /// `print_bool`: JSON true/false; the text (if any) in text mode.
    pub fn boolean(&mut self, key: &str, text: fmt::Arguments, v: bool) {
        if self.json {
            self.name(key);
            self.eor();
            self.buf.push_str(if v { "true" } else { "false" });
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    /// `print_null`: JSON null; the text in text mode.
    pub fn null(&mut self, key: &str, text: fmt::Arguments) {
        if self.json {
            self.name(key);
            self.eor();
            self.buf.push_str("null");
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    /// `print_float`: text as given; in JSON the number as `jsonw_float` writes it
    /// (`%g`), passed preformatted in `json`.
    pub fn float(&mut self, key: &str, text: fmt::Arguments, json: &str) {
        if self.json {
            self.name(key);
            self.eor();
            self.buf.push_str(json);
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    /// A string value without a key (iproute2's `print_string(PRINT_ANY, NULL, …)`):
    /// in JSON a bare `"v"` element even inside an object, as jsonw writes it.
    pub fn bare_string(&mut self, text: fmt::Arguments, v: &str) {
        if self.json {
            self.eor();
            self.put_str(v);
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }
    /// A JSON-only unsigned value inside an array (no key).
    pub fn array_uint(&mut self, text: fmt::Arguments, v: u64) {
        if self.json {
            self.eor();
            let _ = write!(self.buf, "{v}");
        } else {
            let _ = self.buf.write_fmt(text);
        }
    }

    // ---- containers ----------------------------------------------------------------

    /// `open_json_object`: JSON only.
    pub fn open_object(&mut self, key: Option<&str>) {
        if self.json {
            if let Some(k) = key {
                self.name(k);
            }
            self.begin('{');
        }
    }
    pub fn close_object(&mut self) {
        if self.json {
            self.end('}');
        }
    }
    /// `open_json_array(PRINT_ANY, key)`: in text mode the key is printed as text.
    pub fn open_array(&mut self, key: &str, text: &str) {
        if self.json {
            self.name(key);
            self.begin_array();
        } else {
            self.buf.push_str(text);
        }
    }
    /// `open_json_array(PRINT_JSON, NULL)`: an array without a key (inside another
    /// array), JSON only; closed by `close_array("")`.
    pub fn open_anon_array(&mut self) {
        if self.json {
            self.begin_array();
        }
    }
    /// `close_json_array`.
    pub fn close_array(&mut self, text: &str) {
        if self.json {
            self.end_array();
        } else {
            self.buf.push_str(text);
        }
    }
    /// The outer array of a `-j` dump (`new_json_obj`).
    pub fn start_top(&mut self) {
        if self.json {
            self.begin_array();
        }
    }
    /// `delete_json_obj`: closes the outer array and ends the line.
    pub fn end_top(&mut self) {
        if self.json {
            self.end_array();
            self.buf.push('\n');
        }
    }

    // ---- json_writer internals -------------------------------------------------

    fn indent(&mut self) {
        for _ in 0..self.depth {
            self.buf.push_str("    ");
        }
    }
    fn eol(&mut self) {
        if self.pretty {
            self.buf.push('\n');
            self.indent();
        }
    }
    fn eor(&mut self) {
        if self.sep {
            self.buf.push(',');
        }
        self.sep = true;
    }
    fn begin(&mut self, c: char) {
        self.eor();
        self.buf.push(c);
        self.depth += 1;
        self.sep = false;
    }
    fn end(&mut self, c: char) {
        self.depth -= 1;
        if self.sep {
            self.eol();
        }
        self.buf.push(c);
        self.sep = true;
    }
    /// Arrays stay on one line in pretty mode, padded by a space inside the brackets.
    fn begin_array(&mut self) {
        self.begin('[');
        if self.pretty {
            self.buf.push(' ');
        }
    }
    fn end_array(&mut self) {
        if self.pretty && self.sep {
            self.buf.push(' ');
        }
        self.sep = false;
        self.end(']');
    }
    fn name(&mut self, key: &str) {
        self.eor();
        self.eol();
        self.sep = false;
        self.put_str(key);
        self.buf.push(':');
        if self.pretty {
            self.buf.push(' ');
        }
    }
    fn put_str(&mut self, s: &str) {
        self.buf.push('"');
        for c in s.chars() {
            match c {
                '\t' => self.buf.push_str("\\t"),
                '\n' => self.buf.push_str("\\n"),
                '\r' => self.buf.push_str("\\r"),
                '\u{c}' => self.buf.push_str("\\f"),
                '\u{8}' => self.buf.push_str("\\b"),
                '\\' => self.buf.push_str("\\\\"),
                '"' => self.buf.push_str("\\\""),
                c => self.buf.push(c),
            }
        }
        self.buf.push('"');
    }
}

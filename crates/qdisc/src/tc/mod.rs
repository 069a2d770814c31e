//! The tc language: argv in, iproute2's exact text out.
//!
//! Layers as in the real thing: the command parsers here play iproute2 (tc/tc_qdisc.c,
//! tc/tc_class.c, each kind's q_*.c `parse_opt`), [`crate::tree`] plays the kernel's
//! sch_api.c (handles, graft, validation, extack errors), and the printers here play
//! `print_qdisc`/`print_class`/`print_tcstats2_attr` over what the kernel dumps.

mod actions;
mod cmd;
mod filter;
pub mod out;
mod show;
pub mod units;

pub use cmd::get_tc_classid;
pub use cmd::{makeargs, makeargs_checked, parse_global, Global, Output, Tc, TcOpts, SYSCTLS};
pub use out::Out;
pub use show::classid as show_classid;

use std::fmt;
use std::sync::Arc;

/// An error as tc reports it: the exact text on stderr and tc's exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcError {
    /// What tc writes to stderr, newlines included.
    pub msg: String,
    /// tc's exit status (1 for parse errors, 2 for kernel refusals, 255 for `exit(-1)`).
    pub code: i32,
}

impl TcError {
    /// A tc-side (iproute2) error: the message as printed, exit status 1.
    pub fn tc(msg: impl Into<String>) -> Self {
        TcError { msg: msg.into(), code: 1 }
    }
    /// iproute2's `exit(-1)` paths (usage, duplicate args, incomplete command): status 255.
    pub fn usage(msg: impl Into<String>) -> Self {
        TcError { msg: msg.into(), code: 255 }
    }
    /// `incomplete_command()`.
    pub fn incomplete() -> Self {
        Self::usage("Command line is not complete. Try option \"help\"\n")
    }
    /// Whether tc reports this by exiting (`invarg`, `duparg`, `incomplete_command`
    /// call `exit(-1)`) rather than by returning -1: in a batch it ends the batch with
    /// status 255, even with `-force`, and no "Command failed" line.
    pub fn exits(&self) -> bool {
        self.code == 255
            && (self.msg.starts_with("Error: argument \"")
                || self.msg.starts_with("Error: duplicate \"")
                || self.msg == Self::incomplete().msg
                // m_gact.c's usage() exits too.
                || self.msg.contains("Usage: ... gact <ACTION>"))
    }
    /// A kernel refusal with an extack message: `Error: <msg>.`, status 2.
    pub fn kernel(extack: &str) -> Self {
        let dot = if extack.ends_with('.') { "" } else { "." };
        TcError { msg: format!("Error: {extack}{dot}\n"), code: 2 }
    }
    /// A kernel refusal without extack: `RTNETLINK answers: <strerror>`, status 2.
    pub fn errno(e: Errno) -> Self {
        TcError { msg: format!("RTNETLINK answers: {}\n", e.strerror()), code: 2 }
    }
    /// EINVAL without a message, the most common kernel refusal.
    pub fn invalid() -> Self {
        Self::errno(Errno::EINVAL)
    }
}

impl fmt::Display for TcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg.trim_end())
    }
}
impl std::error::Error for TcError {}

/// The errno values the scheduler API returns, with glibc's strerror text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    EINVAL,
    ENOENT,
    EEXIST,
    EOPNOTSUPP,
    ENOBUFS,
    E2BIG,
    ELOOP,
    EBUSY,
    ENODEV,
    ENOMEM,
    ENOSYS,
}

impl Errno {
    pub fn strerror(self) -> &'static str {
        match self {
            Errno::EINVAL => "Invalid argument",
            Errno::ENOENT => "No such file or directory",
            Errno::EEXIST => "File exists",
            Errno::EOPNOTSUPP => "Operation not supported",
            Errno::ENOBUFS => "No buffer space available",
            Errno::E2BIG => "Argument list too long",
            Errno::ELOOP => "Too many levels of symbolic links",
            Errno::EBUSY => "Device or resource busy",
            Errno::ENODEV => "No such device",
            Errno::ENOMEM => "Cannot allocate memory",
            Errno::ENOSYS => "Function not implemented",
        }
    }
}

/// An argv cursor with iproute2's `NEXT_ARG` semantics.
pub struct Args<'a> {
    argv: &'a [String],
    pos: usize,
    /// The `dev` of the command and its link speed in Mbit/s (sysfs `speed`), which
    /// tc reads for rates given as a percentage.
    dev: Option<(&'a str, Option<u32>)>,
    /// What tc printed to stderr while parsing, ahead of any error of its own.
    pub notes: String,
    /// Where netem's distribution tables are read from.
    lib: Option<TcLib>,
    /// The device of [`Args::set_dev`] does not exist (its sysfs file neither).
    dev_missing: bool,
    /// The netns's device names by ifindex (entry `i` is ifindex `i + 1`; `lo` is 1),
    /// for the names actions give (`ll_name_to_index`).
    links: Vec<String>,
}

/// The reader behind [`TcLib`]: a file's bytes, or the OS error.
pub type ReadFile = Arc<dyn Fn(&str) -> std::io::Result<Vec<u8>> + Send + Sync>;

/// tc's library directory (`get_tc_lib()`: `TC_LIB_DIR`, else LIBDIR + "/tc/"), where
/// netem's `.dist` tables live. The engine does no I/O: the caller lends the reader
/// (the CLI and the simulator pass the file system). Without one, every table is
/// missing.
#[derive(Clone)]
pub struct TcLib {
    pub dir: String,
    pub read: Option<ReadFile>,
}

impl TcLib {
    /// Debian's iproute2 LIBDIR.
    pub const DEFAULT_DIR: &'static str = "/usr/lib/x86_64-linux-gnu/tc/";

    /// The file system, at `TC_LIB_DIR` when set (as tc reads it).
    pub fn from_env() -> Self {
        let dir = std::env::var("TC_LIB_DIR").unwrap_or_else(|_| Self::DEFAULT_DIR.into());
        TcLib { dir, read: Some(Arc::new(|p: &str| std::fs::read(p))) }
    }
}

impl Default for TcLib {
    fn default() -> Self {
        TcLib { dir: Self::DEFAULT_DIR.into(), read: None }
    }
}

impl fmt::Debug for TcLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcLib({:?}, reader: {})", self.dir, self.read.is_some())
    }
}

impl<'a> Args<'a> {
    pub fn new(argv: &'a [String]) -> Self {
        Args { argv, pos: 0, dev: None, notes: String::new(), lib: None, dev_missing: false, links: Vec::new() }
    }
    /// The devices of the netns, in ifindex order from 1.
    pub fn set_links(&mut self, names: Vec<String>) {
        self.links = names;
    }
    /// `ll_name_to_index`: the ifindex of the device `name`.
    pub fn link_index(&self, name: &str) -> Option<u32> {
        self.links.iter().position(|n| n == name).map(|i| i as u32 + 1)
    }
    /// Where the cursor stands, to come back to with [`Args::set_pos`].
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }
    /// Set where distribution tables come from (tc's library directory).
    pub fn set_lib(&mut self, lib: TcLib) {
        self.lib = Some(lib);
    }
    /// q_netem.c `get_distribution`: read `<lib>/<name>.dist` (tc's 128-byte path
    /// buffer included) and parse it; tc's words when it is missing or too big.
    pub fn dist_table(&mut self, name: &str) -> Result<Vec<i16>, TcError> {
        let lib = self.lib.clone().unwrap_or_default();
        let mut path = format!("{}/{}.dist", lib.dir, name);
        while path.len() > 127 {
            path.pop();
        }
        let read = match &lib.read {
            Some(r) => r(&path),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        match read {
            Ok(bytes) => {
                let data = crate::sched::netem::parse_dist(&bytes, &path)?;
                if data.is_empty() {
                    return Err(TcError::tc(""));
                }
                Ok(data)
            }
            Err(e) => Err(TcError::tc(format!("No distribution data for {name} ({path}: {})\n", strerror(&e)))),
        }
    }
    /// Set the device the options are for (tc passes it to each kind's parser).
    pub fn set_dev(&mut self, name: &'a str, speed_mbit: Option<u32>) {
        self.dev = Some((name, speed_mbit));
        self.dev_missing = false;
    }
    /// A `dev` that names no device: tc still reads its sysfs `speed` for `N%`.
    pub fn set_missing_dev(&mut self, name: &'a str) {
        self.dev = Some((name, None));
        self.dev_missing = true;
    }
    /// `get_rate64` as tc calls it for a device: `N%` is a share of the link speed
    /// (`get_percent_rate64`), anything else a rate in tc's units. None = invalid.
    pub fn rate64(&mut self, v: &str) -> Option<u64> {
        if !v.contains('%') {
            return units::get_rate64(v);
        }
        let Some((dev, speed)) = self.dev else {
            self.notes.push_str("No device specified; specify device to rate limit by percentage\n");
            return None;
        };
        if self.dev_missing {
            self.notes.push_str(&format!("fopen /sys/class/net/{dev}/speed: No such file or directory\n"));
            return None;
        }
        let Some(mbit) = speed else {
            let path = format!("/sys/class/net/{dev}/speed");
            self.notes
                .push_str(&format!("property \"speed\" in file {path} is currently unknown\nFailed to parse {path}\n"));
            return None;
        };
        let Some(perc) = units::get_percent(v) else {
            self.notes.push_str("Specified rate value could not be read or is malformed\n");
            return None;
        };
        if !(0.0..=1.0).contains(&perc) {
            self.notes.push_str(&format!("Invalid rate specified; should be between [0,100]% but is {v}\n"));
            return None;
        }
        Some((perc * mbit as f64 * 1e6 / 8.0) as u64)
    }
    /// `get_rate` (32-bit) for a device.
    pub fn rate(&mut self, v: &str) -> Option<u32> {
        self.rate64(v).and_then(|r| u32::try_from(r).ok())
    }
    /// The next word, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<&'a str> {
        let a = self.argv.get(self.pos)?;
        self.pos += 1;
        Some(a.as_str())
    }
    /// `NEXT_ARG()`: the value after a keyword, or "Command line is not complete".
    pub fn value(&mut self) -> Result<&'a str, TcError> {
        self.next().ok_or_else(TcError::incomplete)
    }
    pub fn peek(&self) -> Option<&'a str> {
        self.argv.get(self.pos).map(|s| s.as_str())
    }
    pub fn rest(&self) -> &'a [String] {
        &self.argv[self.pos..]
    }
    pub fn is_empty(&self) -> bool {
        self.pos >= self.argv.len()
    }
}

/// glibc's `strerror` text of an I/O error: std's message without its " (os error N)";
/// an error made from `ErrorKind::NotFound` alone (a lent reader's) reads as ENOENT.
pub fn strerror(e: &std::io::Error) -> String {
    if e.raw_os_error().is_none() && e.kind() == std::io::ErrorKind::NotFound {
        return Errno::ENOENT.strerror().into();
    }
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A `dev` word as tc keeps it: copied into a buffer whose first byte is tested, so an
/// empty name is no device at all (nor a duplicate; `dev ""` of a dump lists them all).
pub(crate) fn dev_word(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

/// iproute2's `duparg`: a keyword given twice (exit 255).
pub(crate) fn duparg(key: &str, arg: &str) -> TcError {
    TcError::usage(format!("Error: duplicate \"{key}\": \"{arg}\" is the second value.\n"))
}

/// iproute2's `invarg`: a value tc cannot use (exit 255).
pub(crate) fn invarg(msg: &str, arg: &str) -> TcError {
    TcError::usage(format!("Error: argument \"{arg}\" is wrong: {msg}\n"))
}

/// iproute2's `matches(arg, keyword)`: `arg` is a non-empty prefix of `keyword`.
pub fn matches(arg: &str, keyword: &str) -> bool {
    !arg.is_empty() && keyword.starts_with(arg)
}

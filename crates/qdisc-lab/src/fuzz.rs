//! Fuzzing of every parser that reads what a user hands qdisc-lab (issue 18): tc's argv
//! and batch lines, scenario files, CPU profiles, pcap/pcapng captures (`replay`) and
//! saved results (`plot`, `compare`).
//!
//! Theory. Stable Rust has no coverage-guided fuzzer, so this is a small blind mutation
//! fuzzer: seed inputs are the repository's own files (goldens, tc scripts, scenarios,
//! profiles, a slice of examples/mixed.pcap plus pcapng built here, the result
//! fixtures), and each new input is a seed changed by a few byte- and token-level
//! mutations (bit flips, splices, duplications, truncation, boundary numbers, unit
//! suffixes, quotes, NUL, non-UTF-8, huge repeats, 1/2/4-byte integers in binaries) or,
//! for tc, generated from its keywords. The RNG is the replay's SplitMix64 with a fixed
//! seed, so a run is a pure function of (seed, iterations): CI runs a fixed count.
//!
//! Each input goes through the same entry point the program uses, under
//! `catch_unwind`, and must come back with an answer: no panic, a one-allocation budget
//! ([`ALLOC_LIMIT`], measured by the tracking allocator below: a header claiming 4 GiB
//! must not get them), no hang (a watchdog saves the input and aborts after
//! [`HANG_SECONDS`]), and the target's own property — e.g. a failed tc command says
//! something on stderr, tc's JSON parses, a scenario error names its file.
//!
//! An input that breaks one is written to `tests/fuzz-regressions/<target>/<hash>`;
//! those files are replayed before any new input, so a fixed crash stays fixed.
//!
//! Run longer by hand (release: the engine is slow unoptimised):
//!
//! ```text
//! QDL_FUZZ_SEED=7 QDL_FUZZ_ITERS=200000 cargo test --release -p qdisc-lab --bin qdisc-lab fuzz -- --nocapture
//! QDL_FUZZ_SECONDS=600 cargo test --release -p qdisc-lab --bin qdisc-lab fuzz::pcap -- --nocapture
//! ```
//!
//! QDL_FUZZ_ITERS is per target; QDL_FUZZ_SECONDS (per target, opt-in) replaces the
//! count with a time budget; QDL_FUZZ_SHOW=1 prints each input's hash before running it
//! (to find the one behind an abort); QDL_FUZZ_SIM=1 also runs every scenario the
//! loader accepts for 3 ms in the simulator (slow: validation is what the loader owes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qdisc::tc::{makeargs_checked, parse_global, Output, Tc, TcOpts};
use qdisc::tree::{DevSpec, KernelVersion, Xmit};
use qdisc::{Dequeued, FlowKey, Packet};
use qdisc_scenario::profile::Profile;
use qdisc_scenario::{RunResult, Scenario};

use crate::replay::splitmix64;

// ---- the budget ----------------------------------------------------------------

/// The largest single allocation an input may cause. Inputs are at most [`MAX_LEN`]
/// bytes; anything needing more than this in one piece trusted a length it read.
const ALLOC_LIMIT: usize = 256 << 20;
/// Beyond this the allocator refuses outright (the process aborts, "memory allocation
/// of N bytes failed") rather than letting the machine swap.
const HARD_LIMIT: usize = 4 << 30;
/// One input taking this long is a hang (inputs take well under a millisecond).
const HANG_SECONDS: u64 = 60;
/// Inputs are cut to this length (the result fixtures are ~58 kB).
const MAX_LEN: usize = 256 << 10;

thread_local! {
    /// The largest allocation this thread asked for since the last reset.
    static BIGGEST: Cell<usize> = const { Cell::new(0) };
    /// Inputs the parser under test accepted (how deep the mutants get, for the summary).
    static ACCEPTED: Cell<u64> = const { Cell::new(0) };
}

fn accepted() {
    ACCEPTED.with(|a| a.set(a.get() + 1));
}

/// The system allocator, noting each thread's largest request.
struct Tracking;

fn note(size: usize) -> bool {
    let _ = BIGGEST.try_with(|b| b.set(b.get().max(size)));
    size <= HARD_LIMIT
}

// SAFETY: every call is passed on to System unchanged, or refused with null as the
// GlobalAlloc contract allows.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if note(l.size()) {
            System.alloc(l)
        } else {
            std::ptr::null_mut()
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if note(l.size()) {
            System.alloc_zeroed(l)
        } else {
            std::ptr::null_mut()
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if note(new) {
            System.realloc(p, l, new)
        } else {
            std::ptr::null_mut()
        }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

// ---- randomness and mutations ----------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        splitmix64(&mut self.0)
    }
    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// FNV-1a: names regression files and derives each target's seed.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

/// Numbers at the edges of the types parsers store them in.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "-0",
    "255",
    "256",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "0x",
    "0xffffffff",
    "0x100000000",
    "1e308",
    "1e309",
    "-1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "0.5",
    ".5",
    "5.",
    "1.7976931348623157e308",
];
/// tc's unit suffixes (rates, sizes, times) and TOML's string forms of them.
const UNITS: &[&str] = &[
    "bit", "kbit", "mbit", "gbit", "tbit", "bps", "kbps", "mbps", "gbps", "kibit", "mibps", "%", "b", "k", "kb", "m",
    "mb", "g", "gb", "kbit/s", "s", "sec", "ms", "msec", "us", "usec", "ns", "nsec", "h", "min",
];
/// Bytes that change how text is split or decoded.
const SPECIAL: &[&[u8]] = &[
    b"\"",
    b"'",
    b"\0",
    b"\n",
    b"\r\n",
    b"#",
    b" ",
    b"\t",
    b"=",
    b",",
    b":",
    b"[",
    b"]",
    b"[[",
    b"{",
    b"}",
    b"\\",
    b"\"\"\"",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    b"\xf0\x9f\x92",
    b"\xe2\x80\xa8",
];

/// Whitespace-separated tokens worth inserting: the words of the seeds.
fn dictionary(corpus: &[Vec<u8>], extra: &[&str]) -> Vec<Vec<u8>> {
    let mut words: Vec<Vec<u8>> = extra.iter().map(|s| s.as_bytes().to_vec()).collect();
    for seed in corpus {
        for w in seed.split(|b| b.is_ascii_whitespace() || b"\"'=,[]{}()".contains(b)) {
            if (2..=40).contains(&w.len()) && w.iter().any(u8::is_ascii_alphabetic) {
                words.push(w.to_vec());
            }
        }
    }
    words.sort();
    words.dedup();
    words
}

/// Start and end of the runs of ASCII digits in `d`.
fn digit_runs(d: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < d.len() {
        if d[i].is_ascii_digit() {
            let s = i;
            while i < d.len() && d[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// Start and end of the whitespace-separated words of `d`.
fn words(d: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, b) in d.iter().enumerate() {
        match (b.is_ascii_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, d.len()));
    }
    out
}

/// Replace `d[s..e]` with `with`.
fn splice(d: &mut Vec<u8>, s: usize, e: usize, with: &[u8]) {
    d.splice(s..e, with.iter().copied());
}

/// A few random edits of `d`.
fn mutate(rng: &mut Rng, d: &mut Vec<u8>, corpus: &[Vec<u8>], dict: &[Vec<u8>], binary: bool) {
    let most = if rng.chance(8) { 16 } else { 4 };
    let n = 1 + rng.below(most);
    for _ in 0..n {
        let len = d.len();
        let pos = rng.below(len + 1);
        let span = 1 + rng.below(len.clamp(1, 32));
        let end = (pos + span).min(len);
        match rng.below(15) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = *rng.pick(&[0u8, 0xff, 0x7f, 0x80, 1, b'0', b'9', b'-', b'.', b'%']);
            }
            2 => {
                d.drain(pos..end);
            }
            3 => {
                let copy = d[pos..end].to_vec();
                let at = rng.below(d.len() + 1);
                splice(d, at, at, &copy);
            }
            4 => {
                // Splice in a piece of another seed.
                let other = rng.pick(corpus);
                let s = rng.below(other.len() + 1);
                let e = (s + 1 + rng.below(256)).min(other.len());
                splice(d, pos, if rng.chance(2) { pos } else { end }, &other[s..e]);
            }
            5 => d.truncate(pos),
            6 if !dict.is_empty() => {
                let mut w = rng.pick(dict).clone();
                if !binary {
                    w.insert(0, b' ');
                    w.push(b' ');
                }
                splice(d, pos, pos, &w);
            }
            7 if binary && len >= 4 => {
                // A 1/2/4-byte integer at an edge, either byte order.
                let v: u32 = *rng.pick(&[0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x1_0000, 0x7fff_ffff, 0x8000_0000, u32::MAX]);
                let w = *rng.pick(&[1usize, 2, 4]);
                // The low `w` bytes of v, in either byte order.
                let src = if rng.chance(2) { v.to_le_bytes()[..w].to_vec() } else { v.to_be_bytes()[4 - w..].to_vec() };
                let i = rng.below(len - w + 1);
                d[i..i + w].copy_from_slice(&src);
            }
            7 | 8 => {
                // A number at an edge in place of one, or a unit after it.
                let runs = digit_runs(d);
                if let Some(&(s, e)) = (!runs.is_empty()).then(|| rng.pick(&runs)) {
                    if rng.chance(3) {
                        let u = rng.pick(UNITS);
                        splice(d, e, e, u.as_bytes());
                    } else {
                        splice(d, s, e, rng.pick(NUMBERS).as_bytes());
                    }
                } else {
                    splice(d, pos, pos, rng.pick(NUMBERS).as_bytes());
                }
            }
            9 => {
                let b: &[u8] = SPECIAL[rng.below(SPECIAL.len())];
                splice(d, pos, pos, b)
            }
            10 => {
                // Swap two words.
                let ws = words(d);
                if ws.len() >= 2 {
                    let (a, b) = (*rng.pick(&ws), *rng.pick(&ws));
                    let (a, b) = if a.0 <= b.0 { (a, b) } else { (b, a) };
                    if a.1 <= b.0 {
                        let (wa, wb) = (d[a.0..a.1].to_vec(), d[b.0..b.1].to_vec());
                        splice(d, b.0, b.1, &wa);
                        splice(d, a.0, a.1, &wb);
                    }
                }
            }
            11 if !dict.is_empty() => {
                // A word replaced by a keyword.
                let ws = words(d);
                if !ws.is_empty() {
                    let (s, e) = *rng.pick(&ws);
                    let w = rng.pick(dict).clone();
                    splice(d, s, e, &w);
                }
            }
            12 => {
                // A piece repeated many times: huge counts, long lines, deep nesting.
                let piece = d[pos..end].to_vec();
                if !piece.is_empty() {
                    let times = 1 + rng.below(MAX_LEN / 4 / piece.len()).min(5000);
                    let rep = piece.repeat(times);
                    splice(d, pos, pos, &rep);
                }
            }
            13 => {
                let ws = words(d);
                if !ws.is_empty() {
                    // Delete or duplicate a whole word.
                    let (s, e) = *rng.pick(&ws);
                    if rng.chance(2) {
                        d.drain(s..e);
                    } else {
                        let w = d[s..e].to_vec();
                        splice(d, e, e, &[b" ".as_slice(), &w].concat());
                    }
                }
            }
            _ => {
                // Duplicate or drop a line.
                let lines: Vec<usize> = std::iter::once(0)
                    .chain(d.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i + 1))
                    .collect();
                let s = *rng.pick(&lines);
                let e = d[s..].iter().position(|&b| b == b'\n').map_or(d.len(), |i| s + i + 1);
                if rng.chance(2) {
                    d.drain(s..e);
                } else {
                    let line = d[s..e].to_vec();
                    let at = *rng.pick(&lines);
                    splice(d, at, at, &line);
                }
            }
        }
        d.truncate(MAX_LEN);
    }
}

// ---- the driver ------------------------------------------------------------------

/// New input from the dictionary, not from a seed.
type Generator = fn(&mut Rng, &[Vec<u8>]) -> Vec<u8>;

/// A parser under test.
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    dict: Vec<Vec<u8>>,
    binary: bool,
    /// New inputs from scratch instead of a mutated seed, some of the time.
    generate: Option<Generator>,
    /// Inputs per CI run.
    iters: u64,
    /// Ok, or the property the input broke. Panics are caught around it.
    run: fn(&[u8]) -> Result<(), String>,
}

fn regressions_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions").join(target)
}

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{key}={v}: not a number")))
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Run one input through the target; None if it held.
fn check(t: &Target, input: &[u8]) -> Option<String> {
    BIGGEST.with(|b| b.set(0));
    let r = catch_unwind(AssertUnwindSafe(|| (t.run)(input)));
    let biggest = BIGGEST.with(|b| b.get());
    match r {
        Err(p) => Some(format!("panicked: {}", panic_text(&*p))),
        Ok(Err(e)) => Some(e),
        Ok(Ok(())) if biggest > ALLOC_LIMIT => Some(format!("allocated {biggest} bytes at once")),
        Ok(Ok(())) => None,
    }
}

/// A smaller input that still fails: chunks of halving size cut out while it does
/// (bounded: a regression file should be readable, not minimal at any cost).
fn minimize(input: &[u8], fails: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut cur = input.to_vec();
    let mut budget = 2000;
    let mut chunk = cur.len() / 2;
    while chunk >= 1 && budget > 0 {
        let mut i = 0;
        while i < cur.len() && budget > 0 {
            let cand: Vec<u8> = [&cur[..i], &cur[(i + chunk).min(cur.len())..]].concat();
            budget -= 1;
            if fails(&cand) {
                cur = cand;
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    cur
}

fn save(target: &str, input: &[u8]) -> PathBuf {
    let dir = regressions_dir(target);
    std::fs::create_dir_all(&dir).expect("create the regressions directory");
    let path = dir.join(format!("{:016x}", fnv(input)));
    std::fs::write(&path, input).expect("write a regression input");
    path
}

/// The input being run and since when.
type Running = (Instant, Vec<u8>);

fn fuzz(t: Target) {
    // The watchdog: what is running and since when.
    let current: Arc<Mutex<Option<Running>>> = Arc::new(Mutex::new(None));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (current, done, name) = (current.clone(), done.clone(), t.name);
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if let Some((since, input)) = &*current.lock().unwrap() {
                    if since.elapsed() > Duration::from_secs(HANG_SECONDS) {
                        let path = save(name, input);
                        eprintln!("fuzz {name}: an input ran {HANG_SECONDS} s (a hang), saved as {}", path.display());
                        std::process::abort();
                    }
                }
            }
        })
    };
    let show = std::env::var_os("QDL_FUZZ_SHOW").is_some();
    let watched = |input: &[u8]| {
        *current.lock().unwrap() = Some((Instant::now(), input.to_vec()));
        let r = check(&t, input);
        *current.lock().unwrap() = None;
        r
    };
    let mut failures = Vec::new();
    // `file`: where a regression input lives; anything else that fails is minimised and
    // saved beside them.
    let run = |input: &[u8], origin: &str, file: Option<&Path>, failures: &mut Vec<String>| {
        if show {
            eprintln!("fuzz {}: {:016x} ({origin})", t.name, fnv(input));
        }
        let Some(why) = watched(input) else { return };
        let path = match file {
            Some(f) => f.to_path_buf(),
            None => save(t.name, &minimize(input, |d| watched(d).is_some())),
        };
        failures.push(format!("{} ({origin}, {}): {why}", t.name, path.display()));
    };

    // Past crashes first, then every seed as it is, then mutants.
    let mut regressions: Vec<PathBuf> = std::fs::read_dir(regressions_dir(t.name))
        .map(|d| d.map(|e| e.expect("read the regressions directory").path()).collect())
        .unwrap_or_default();
    regressions.sort();
    for p in &regressions {
        run(&std::fs::read(p).expect("read a regression input"), "regression", Some(p), &mut failures);
    }
    for s in &t.seeds {
        run(s, "seed", None, &mut failures);
    }
    let seed = env_u64("QDL_FUZZ_SEED").unwrap_or(1) ^ fnv(t.name.as_bytes());
    let mut rng = Rng(seed);
    let started = Instant::now();
    let deadline = env_u64("QDL_FUZZ_SECONDS").map(|s| started + Duration::from_secs(s));
    let iters = env_u64("QDL_FUZZ_ITERS").unwrap_or(t.iters);
    let mut n = 0u64;
    while match deadline {
        Some(d) => Instant::now() < d,
        None => n < iters,
    } {
        n += 1;
        let input = match t.generate {
            Some(g) if rng.chance(4) => {
                let mut d = g(&mut rng, &t.dict);
                if rng.chance(2) {
                    mutate(&mut rng, &mut d, &t.seeds, &t.dict, t.binary);
                }
                d
            }
            _ => {
                let mut d = rng.pick(&t.seeds).clone();
                mutate(&mut rng, &mut d, &t.seeds, &t.dict, t.binary);
                d
            }
        };
        run(&input, "mutant", None, &mut failures);
        if failures.len() >= 20 {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    watchdog.join().unwrap();
    eprintln!(
        "fuzz {}: {} regressions, {} seeds, {n} mutants (seed {seed:#x}) in {:.1} s; {} inputs accepted",
        t.name,
        regressions.len(),
        t.seeds.len(),
        started.elapsed().as_secs_f64(),
        ACCEPTED.with(|a| a.get()),
    );
    assert!(failures.is_empty(), "{} inputs broke a parser:\n{}", failures.len(), failures.join("\n"));
}

/// The fuzzer itself: it sees a panic, a broken property and an allocation out of
/// budget, minimises, and is a function of its seed.
#[test]
fn the_fuzzer_catches_what_it_should() {
    let target =
        |run| Target { name: "self-test", seeds: vec![], dict: vec![], binary: false, generate: None, iters: 0, run };
    let panics = target(|d| if d.windows(4).any(|w| w == b"boom") { panic!("boom") } else { Ok(()) });
    assert_eq!(check(&panics, b"xxboomxx").as_deref(), Some("panicked: boom"));
    assert_eq!(check(&panics, b"xxbooxx"), None);
    assert_eq!(minimize(b"a long line with boom in it", |d| check(&panics, d).is_some()), b"boom");
    let says = target(|d| if d.is_empty() { Err("empty".into()) } else { Ok(()) });
    assert_eq!(check(&says, b"").as_deref(), Some("empty"));
    let greedy = target(|d| {
        let v = vec![1u8; d.len() << 20];
        assert_eq!(v.len(), d.len() << 20);
        Ok(())
    });
    assert_eq!(check(&greedy, &[0; 255]), None);
    assert_eq!(check(&greedy, &[0; 257]), Some(format!("allocated {} bytes at once", 257 << 20)));

    let mutants = |seed| {
        let mut rng = Rng(seed);
        let seeds = vec![b"qdisc add dev eth0 root tbf rate 1mbit burst 10k latency 50ms".to_vec()];
        (0..50)
            .map(|_| {
                let mut d = seeds[0].clone();
                mutate(&mut rng, &mut d, &seeds, &[b"limit".to_vec()], false);
                d
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(mutants(1), mutants(1));
    assert_ne!(mutants(1), mutants(2));
    assert!(
        mutants(1)
            .iter()
            .filter(|m| m.as_slice() != b"qdisc add dev eth0 root tbf rate 1mbit burst 10k latency 50ms")
            .count()
            > 40
    );
}

// ---- seeds -------------------------------------------------------------------------

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// The files of `dir` (relative to the repository) ending in `ext`, sorted.
fn files(dir: &str, ext: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(repo(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

// ---- tc ----------------------------------------------------------------------------

/// tc's words for generated commands (the seeds' words are added to these).
const TC_WORDS: &[&str] = &[
    "qdisc",
    "class",
    "filter",
    "add",
    "change",
    "replace",
    "del",
    "delete",
    "show",
    "list",
    "ls",
    "get",
    "dev",
    "root",
    "parent",
    "handle",
    "classid",
    "estimator",
    "stab",
    "protocol",
    "pref",
    "action",
    "police",
    "drop",
    "pass",
    "flowid",
    "match",
    "ip",
    "u16",
    "u8",
    "0xffff",
    "-s",
    "-d",
    "-j",
    "-p",
    "-force",
    "-batch",
    "help",
];
/// The options of the kinds (qdisc and class, as iproute2's q_*.c and f_*.c take them).
const TC_OPTIONS: &[(&str, &[&str])] = &[
    ("pfifo", &["limit"]),
    ("bfifo", &["limit"]),
    (
        "tbf",
        &[
            "rate",
            "burst",
            "buffer",
            "maxburst",
            "latency",
            "limit",
            "mtu",
            "minburst",
            "peakrate",
            "overhead",
            "linklayer",
        ],
    ),
    ("prio", &["bands", "priomap"]),
    (
        "htb",
        &[
            "default",
            "r2q",
            "direct_qlen",
            "rate",
            "ceil",
            "burst",
            "cburst",
            "prio",
            "quantum",
            "mtu",
            "mpu",
            "overhead",
        ],
    ),
    (
        "sfq",
        &[
            "limit",
            "perturb",
            "quantum",
            "divisor",
            "flows",
            "depth",
            "headdrop",
            "redflowlimit",
            "min",
            "max",
            "probability",
            "ecn",
            "harddrop",
        ],
    ),
    (
        "fq_codel",
        &[
            "limit",
            "flows",
            "target",
            "interval",
            "quantum",
            "ecn",
            "noecn",
            "ce_threshold",
            "memory_limit",
            "drop_batch",
        ],
    ),
    ("codel", &["limit", "target", "interval", "ecn", "noecn", "ce_threshold"]),
    (
        "fq",
        &[
            "limit",
            "flow_limit",
            "quantum",
            "initial_quantum",
            "maxrate",
            "buckets",
            "orphan_mask",
            "pacing",
            "nopacing",
            "refill_delay",
            "low_rate_threshold",
            "timer_slack",
            "horizon",
            "horizon_drop",
            "horizon_cap",
            "ce_threshold",
            "weights",
            "priomap",
        ],
    ),
    (
        "u32",
        &[
            "match", "ip", "src", "dst", "dport", "sport", "tos", "protocol", "u32", "u16", "u8", "at", "classid",
            "flowid", "ht", "link", "hashkey", "mask", "divisor", "offset", "sample", "action",
        ],
    ),
    ("fw", &["classid", "flowid", "mask", "action"]),
    ("basic", &["classid", "flowid", "match", "action"]),
    ("matchall", &["classid", "flowid", "action", "skip_sw", "skip_hw"]),
];
/// Qdisc and filter kinds, implemented or not.
const TC_KINDS: &[&str] = &[
    "pfifo",
    "bfifo",
    "pfifo_fast",
    "tbf",
    "prio",
    "htb",
    "sfq",
    "fq_codel",
    "codel",
    "fq",
    "mq",
    "noqueue",
    "netem",
    "red",
    "cake",
    "ingress",
    "clsact",
    "u32",
    "fw",
    "basic",
    "matchall",
    "flower",
];
const TC_HANDLES: &[&str] = &["1:", "1:1", "1:10", "ffff:", "ffff:fff1", "0:", ":1", "10:", "8001:", "1:0", "none"];
const DEVICES: &[&str] = &["eth0", "veth0", "eth1", "nosuchdev", ""];

/// A tc command from its keywords: object, verb, dev, a place, a kind, option pairs.
fn gen_tc(rng: &mut Rng, dict: &[Vec<u8>]) -> Vec<u8> {
    let mut text = String::new();
    for _ in 0..1 + rng.below(6) {
        let mut w: Vec<String> = Vec::new();
        if rng.chance(4) {
            w.push(rng.pick(&["-s", "-d", "-j", "-p", "-s -d", "-j -p -s", "-iec", "-raw"]).to_string());
        }
        w.push(rng.pick(&["qdisc", "class", "filter", "qdisc", "class"]).to_string());
        w.push(rng.pick(&["add", "replace", "change", "del", "show", "add", "add"]).to_string());
        w.push("dev".into());
        w.push(rng.pick(DEVICES).to_string());
        match rng.below(5) {
            0 => w.push("root".into()),
            1 => w.push(format!("parent {}", rng.pick(TC_HANDLES))),
            2 => w.push(format!("handle {} root", rng.pick(TC_HANDLES))),
            3 => w.push(format!("classid {} parent {}", rng.pick(TC_HANDLES), rng.pick(TC_HANDLES))),
            _ => {}
        }
        let kind = *rng.pick(TC_KINDS);
        w.push(kind.to_string());
        let own = TC_OPTIONS.iter().find(|(k, _)| *k == kind).map_or(&[][..], |(_, o)| o);
        for _ in 0..rng.below(6) {
            // Mostly the kind's own options, so that the values get parsed.
            if !own.is_empty() && !rng.chance(4) {
                w.push(rng.pick(own).to_string());
            } else {
                w.push(String::from_utf8_lossy(rng.pick(dict).as_slice()).into_owned());
            }
            let v = match rng.below(4) {
                0 => rng.pick(TC_HANDLES).to_string(),
                1 => String::from_utf8_lossy(rng.pick(dict).as_slice()).into_owned(),
                _ => format!("{}{}", rng.pick(NUMBERS), if rng.chance(2) { *rng.pick(UNITS) } else { "" }),
            };
            w.push(v);
        }
        text.push_str(&w.join(" "));
        text.push('\n');
    }
    if rng.chance(2) {
        text.push_str("qdisc show\nclass show dev eth0\n");
    }
    text.into_bytes()
}

/// The goldens' cases as tc scripts: `# dev SPEC` lines, then the commands.
fn tc_seeds() -> Vec<Vec<u8>> {
    let mut seeds = files("goldens/cases", ".tc");
    seeds.extend(files("examples", ".tc"));
    for dir in ["goldens/kernel", "goldens/kernel-6.12"] {
        for f in files(dir, ".json") {
            let Ok(case) = serde_json::from_slice::<serde_json::Value>(&f) else { continue };
            let mut text = String::new();
            for d in case["devices"].as_array().into_iter().flatten() {
                text += &format!("# dev {}\n", d.as_str().unwrap_or("eth0"));
            }
            for s in case["steps"].as_array().into_iter().flatten() {
                text += s["cmd"].as_str().unwrap_or("");
                text.push('\n');
            }
            seeds.push(text.into_bytes());
        }
    }
    seeds
}

/// A failed command must say why; JSON output must be JSON.
/// multiq's options object, `{bands N/M }` (its raw fprintf in `-j`, as tc prints
/// it), as an empty one.
fn without_multiq_bands(s: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some(i) = rest.find("{bands ") {
        let Some(end) = rest[i..].find('}') else { break };
        out.push_str(&rest[..=i]);
        rest = &rest[i + end..];
    }
    out.push_str(rest);
    out
}

/// The lines of an ematch tree (m_ematch.c's `print_ematch` writes it with plain
/// fprintf, inside the options object even with `-j`: goldens/kernel-6.12/filter-basic):
/// left out, the rest is JSON.
fn without_ematch_lines(s: &str) -> String {
    const STARTS: &[&str] = &["cmp(", "u32(", "nbyte(", "meta(", "canid(", "NOT ", "AND ", "OR ", "(", ")"];
    s.lines().filter(|l| !STARTS.iter().any(|p| l.trim_start().starts_with(p))).collect::<Vec<_>>().join("\n")
}

/// q_taprio.c refuses a `flags` or `txtime-delay` value get_u32 cannot read by
/// returning -1 with no message: tc exits 1 silently (goldens/kernel-6.12/taprio-errors).
fn taprio_silent_refusal(argv: &[String]) -> bool {
    let Some(k) = argv.iter().position(|a| a == "taprio") else { return false };
    let rest = &argv[k + 1..];
    rest.windows(2)
        .any(|w| matches!(w[0].as_str(), "flags" | "txtime-delay") && qdisc::tc::units::get_u32(&w[1]).is_none())
}

/// tc_stab.c's `parse_size_table` returns -1 with no message when the words after a
/// `stab` ask for nothing a table needs (no overhead, mpu or linklayer): tc exits 255
/// silently (goldens/kernel/stab-errors).
fn stab_silent_refusal(argv: &[String]) -> bool {
    argv.iter().enumerate().any(|(i, w)| {
        let rest = &argv[i + 1..];
        let mut a = qdisc::tc::Args::new(rest);
        qdisc::tc::matches(w, "stab") && matches!(qdisc::stab::parse(&mut a), Ok(None)) && a.notes.is_empty()
    })
}

fn tc_output(argv: &[String], opts_json: bool, out: &Output) -> Result<(), String> {
    let silent = (out.code == 1 && taprio_silent_refusal(argv)) || (out.code == 255 && stab_silent_refusal(argv));
    if out.code != 0 && out.stderr.trim().is_empty() && !silent {
        return Err(format!("`tc {}` exits {} without a word on stderr", argv.join(" "), out.code));
    }
    // q_hfsc.c prints its options, curves and xstats, and q_qfq.c its class options,
    // with plain fprintf, so tc's `-j` output of an hfsc qdisc or class, or of a qfq
    // class, is not JSON (goldens/kernel-6.12/hfsc-class, qfq-traffic).
    let compact = out.stdout.replace("\": ", "\":");
    let plain = ["\"hfsc\"", "\"class\":\"qfq\""].iter().any(|k| compact.contains(k));
    if out.code == 0 && opts_json && !plain && !out.stdout.trim().is_empty() {
        // iproute2's own invalid JSON, kept byte for byte: u32's ` eat ` is a bare
        // string inside an object (`print_string(PRINT_ANY, NULL, …)`), q_multiq.c
        // prints `bands N/M ` with a plain fprintf inside the options object, and
        // jsonw escapes only \t \n \r \f \b \\ and \" (a device may be named "\x01");
        // an ematch tree is plain text (see `without_ematch_lines`).
        let text: String = without_ematch_lines(&without_multiq_bands(&out.stdout.replace(",\" eat \"", "")))
            .chars()
            .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
            .collect();
        serde_json::from_str::<serde_json::Value>(&text)
            .map_err(|e| format!("`tc {}` printed JSON that does not parse ({e}): {:?}", argv.join(" "), out.stdout))?;
    }
    Ok(())
}

/// One tc invocation, checked.
fn run_tc(tc: &mut Tc, argv: &[String]) -> Result<(), String> {
    let out = tc.run(argv);
    tc_output(argv, parse_global(argv).is_ok_and(|g| g.opts.json), &out)
}

fn argv(a: &[&str], b: &[&str]) -> Vec<String> {
    a.iter().chain(b).map(|s| s.to_string()).collect()
}

/// Some traffic through every device's tree, so a configuration tc accepted is also
/// one the engine can run.
fn traffic(tc: &mut Tc) {
    for dev in &mut tc.devices {
        let mut now = 0u64;
        for i in 0..48u64 {
            let len = [60u32, 1514, 64, 1000, 9000, 40, 65535, 576][i as usize % 8];
            let mut p = Packet::new(i, len).with_flow(FlowKey {
                src: [10, 0, 0, (i % 3) as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                dst: [10, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                proto: [6u8, 17, 1][i as usize % 3],
                sport: 1000 + (i % 5) as u16,
                dport: 5201,
            });
            p.priority = [0u32, 6, 0x10001, 7, 0xffff_ffff][i as usize % 5];
            p.mark = (i % 4) as u32;
            p.tos = [0u8, 0x10, 0xb8, 0xff][i as usize % 4];
            now += 100_000;
            if let Xmit::Queued(_) = dev.xmit(p, qdisc::Instant::from_nanos(now), false) {}
            if i % 3 == 0 {
                let _ = dev.dequeue(qdisc::Instant::from_nanos(now));
            }
        }
        for _ in 0..200 {
            now += 1_000_000;
            if let Dequeued::Empty = dev.dequeue(qdisc::Instant::from_nanos(now)) {
                break;
            }
        }
    }
}

/// Run `input` as tc commands, one per line, then as one batch, then show everything.
fn tc_target(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    // The goldens' headers: the devices, the kernel.
    let mut specs: Vec<DevSpec> = Vec::new();
    for spec in text.lines().filter_map(|l| l.strip_prefix("# dev ")) {
        if let Ok(d) = DevSpec::parse(spec.trim()) {
            if specs.iter().all(|s| s.name != d.name) {
                specs.push(d);
            }
        }
    }
    if specs.is_empty() {
        specs = ["eth0,txqueues=4,speed=1000", "veth0,kind=veth"].iter().map(|s| DevSpec::parse(s).unwrap()).collect();
    }
    let kernel = if text.contains("6.18") { KernelVersion(6, 18) } else { KernelVersion(6, 12) };

    // Each line as argv (tc's own global options included).
    let mut tc = Tc::with_kernel(&specs, kernel);
    for line in text.lines() {
        if let Some(setting) = line.strip_prefix("# sysctl ") {
            let _ = tc.sysctl_w(setting);
            continue;
        }
        let Ok(argv) = makeargs_checked(line) else { continue };
        if argv.is_empty() {
            continue;
        }
        run_tc(&mut tc, &argv)?;
    }
    let show = |tc: &mut Tc| -> Result<(), String> {
        for d in specs.iter().map(|s| s.name.clone()) {
            for obj in ["qdisc", "class", "filter"] {
                for opts in [&["-s", "-d"][..], &["-s", "-j"], &["-s", "-d", "-j", "-p"]] {
                    run_tc(tc, &argv(opts, &[obj, "show", "dev", &d]))?;
                }
            }
            run_tc(tc, &argv(&["-s"], &["filter", "show", "dev", &d, "ingress"]))?;
        }
        Ok(())
    };
    show(&mut tc)?;
    traffic(&mut tc);
    show(&mut tc)?;

    // The whole text as one batch (`-force`: every line runs).
    let mut tc = Tc::with_kernel(&specs, kernel);
    let out = tc.batch(&text, "fuzz.tc", TcOpts::default(), true);
    if out.code == 0 {
        accepted();
    }
    // tc names the line of a failed command ("Command failed FILE:N"), except where it
    // ends the whole batch at once: its exit(-1) paths (invalid or duplicate argument,
    // incomplete command: status 255) and the tokenizer's own errors.
    let ends_batch = out.code == 255
        || out.stderr.ends_with("Unterminated quoted string\n")
        || out.stderr.ends_with("Missing continuation line\n");
    if out.code != 0 && !ends_batch && !out.stderr.contains("fuzz.tc") {
        return Err(format!("a batch failed without naming the file and line: {:?}", out.stderr));
    }
    show(&mut tc)
}

#[test]
fn tc() {
    let seeds = tc_seeds();
    let dict = dictionary(&seeds, &[TC_WORDS, TC_KINDS].concat());
    fuzz(Target { name: "tc", seeds, dict, binary: false, generate: Some(gen_tc), iters: 4000, run: tc_target });
}

// ---- scenarios and profiles --------------------------------------------------------

/// A scenario's text through the loader: valid, or an error that names the file.
fn scenario_target(input: &[u8]) -> Result<(), String> {
    match Scenario::from_bytes(input, "fuzz.toml") {
        Ok(mut s) => {
            accepted();
            if std::env::var_os("QDL_FUZZ_SIM").is_some() {
                s.duration = s.duration.min(3_000_000);
                let opts = qdisc_scenario::RunOptions::default();
                let r = qdisc_sim::simulate(&s, &opts, &mut qdisc_scenario::NoProgress);
                if let Err(e) = r {
                    let _ = e.to_string();
                }
            }
            Ok(())
        }
        Err(e) if e.message.trim().is_empty() => Err(format!("an error without a message: {e}")),
        Err(e) if !e.to_string().starts_with("fuzz.toml") => Err(format!("an error that does not name the file: {e}")),
        Err(_) => Ok(()),
    }
}

#[test]
fn scenario() {
    let mut seeds = files("scenarios", ".toml");
    seeds.extend(files("crates/qdisc-lab/tests/fixtures", ".toml"));
    seeds.extend(files("crates/qdisc-sim/tests", ".toml"));
    let dict = dictionary(&seeds, &["[[host]]", "[[link]]", "[[traffic]]", "[tc.a]", "script", "\"\"\"", "="]);
    fuzz(Target { name: "scenario", seeds, dict, binary: false, generate: None, iters: 5000, run: scenario_target });
}

fn profile_target(input: &[u8]) -> Result<(), String> {
    // Profile::load reads the file as UTF-8 first (an error naming the file otherwise).
    let Ok(text) = std::str::from_utf8(input) else { return Ok(()) };
    match Profile::parse(text, "fuzz-profile.toml") {
        Ok(_) => {
            accepted();
            Ok(())
        }
        Err(e) if !e.starts_with("fuzz-profile.toml") => Err(format!("an error that does not name the file: {e}")),
        _ => Ok(()),
    }
}

#[test]
fn profile() {
    let mut seeds = files("crates/qdisc-scenario/profiles", ".toml");
    seeds.extend(files("scenarios/profiles", ".toml"));
    let dict = dictionary(&seeds, &["[qdisc.default]", "[qdisc.htb]"]);
    fuzz(Target { name: "profile", seeds, dict, binary: false, generate: None, iters: 2000, run: profile_target });
}

// ---- pcap (replay) -------------------------------------------------------------------

/// A scratch file per target and thread (targets run in parallel).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qdisc-lab-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A capture replayed as `qdisc-lab replay --pcap FILE --rate 100mbit` does.
fn pcap_target(input: &[u8]) -> Result<(), String> {
    let path = scratch("capture");
    std::fs::write(&path, input).unwrap();
    let file = path.to_string_lossy().into_owned();
    let json = input.len().is_multiple_of(2);
    let a = crate::replay::ReplayArgs {
        dev: vec![],
        tc: None,
        rate: "100mbit".into(),
        pcap: Some(file.clone()),
        flow: vec![],
        duration: None,
        seed: 1,
        overhead: 24,
        json,
    };
    let r = crate::replay::run(&a);
    if r.is_ok() {
        accepted();
    }
    match r {
        Ok(report) if json => serde_json::from_str::<serde_json::Value>(&report)
            .map(|_| ())
            .map_err(|e| format!("the JSON report does not parse: {e}")),
        Ok(_) => Ok(()),
        Err(e) if !e.starts_with(&file) => Err(format!("an error that does not name the file: {e}")),
        Err(_) => Ok(()),
    }
}

/// The first `n` records of a classic pcap (examples/mixed.pcap is 690 kB).
fn pcap_head(data: &[u8], n: usize) -> Vec<u8> {
    let le = data[0] == 0xD4;
    let u32_at = |i: usize| {
        let b: [u8; 4] = data[i..i + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let mut end = 24;
    for _ in 0..n {
        end += 16 + u32_at(end + 8) as usize;
    }
    data[..end].to_vec()
}

/// pcapng seeds: Ethernet, Linux cooked v2 and raw IP interfaces, nanosecond and
/// power-of-two timestamp resolutions, an IPv6 packet with extension headers.
fn pcapng_seed() -> Vec<u8> {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    let idb = |linktype, resol: Option<u8>| InterfaceDescriptionBlock {
        linktype,
        snaplen: 128,
        options: resol.map(InterfaceDescriptionOption::IfTsResol).into_iter().collect(),
    };
    w.write_pcapng_block(idb(DataLink::ETHERNET, None)).unwrap();
    w.write_pcapng_block(idb(DataLink::LINUX_SLL2, Some(9))).unwrap();
    w.write_pcapng_block(idb(DataLink::RAW, Some(0x94))).unwrap();
    let mut ipv4 = vec![0x45, 0xb8, 0, 40, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    ipv4.extend([0x13, 0x88, 0x14, 0x51, 0, 20, 0, 0]);
    let mut ipv6 = vec![0x60, 0, 0, 0, 0, 16, 0, 64];
    ipv6.extend([0xfe; 32]);
    ipv6.extend([6, 0, 0, 0, 0, 0, 0, 0, 0x13, 0x88, 0x14, 0x51]);
    let mut eth = vec![0xff; 12];
    eth.extend([0x81, 0x00, 0, 5, 0x08, 0x00]);
    eth.extend(&ipv4);
    let mut sll2 = vec![0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 0, 0, 0, 0, 0, 0, 0, 0];
    sll2.extend(&ipv6);
    for (i, (iface, data)) in [(0u32, eth), (1, sll2), (2, ipv4)].into_iter().enumerate() {
        let epb = EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_nanos(1_000_000 * (i as u64 + 1)),
            original_len: data.len() as u32 + 100,
            data: data.into(),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    w.into_inner()
}

/// A classic pcap from parts: any of the link types replay knows (or not), records
/// whose lengths agree with their data most of the time, frames from templates
/// (VLAN-tagged Ethernet, Linux cooked, raw IPv4/IPv6 with extension headers and
/// fragments) with a few bytes changed, timestamps anywhere.
fn gen_pcap(rng: &mut Rng, _: &[Vec<u8>]) -> Vec<u8> {
    let linktype: u32 = *rng.pick(&[1, 1, 1, 101, 113, 228, 229, 276, 147]);
    let nano = rng.chance(2);
    let mut out = Vec::new();
    out.extend(if nano { [0x4D, 0x3C, 0xB2, 0xA1] } else { [0xD4, 0xC3, 0xB2, 0xA1] });
    out.extend([2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend((*rng.pick(&[65535u32, 96, 0, u32::MAX])).to_le_bytes());
    out.extend(linktype.to_le_bytes());
    let mut ts = rng.next() as u32 as u64;
    let records = 1 + rng.below(24);
    // Half the files have one record whose lengths lie.
    let liar = if rng.chance(2) { rng.below(records) } else { usize::MAX };
    for r in 0..records {
        let ip: Vec<u8> = if rng.chance(2) {
            let mut v4 =
                vec![0x45, 0, 0, 40, 0, 1, 0, 0, 64, *rng.pick(&[6u8, 17, 1, 132]), 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
            v4.extend([0x13, 0x88, 0x14, 0x51, 0, 20, 0, 0]);
            v4
        } else {
            // IPv6 with a hop-by-hop, a fragment or an AH header before UDP.
            let ext = *rng.pick(&[0u8, 44, 51, 60, 17]);
            let mut v6 = vec![0x60, 0, 0, 0, 0, 24, ext, 64];
            v6.extend([0xfe; 32]);
            if ext != 17 {
                v6.extend([17, 0, 0, 0, 0, 0, 0, 0]);
            }
            v6.extend([0x13, 0x88, 0x14, 0x51, 0, 8, 0, 0]);
            v6
        };
        let et: [u8; 2] = if ip[0] >> 4 == 6 { [0x86, 0xdd] } else { [0x08, 0x00] };
        let mut frame = match linktype {
            1 => {
                let mut f = vec![0x02; 12];
                for _ in 0..rng.below(3) {
                    f.extend(rng.pick(&[[0x81u8, 0x00], [0x88, 0xa8], [0x91, 0x00]]));
                    f.extend([0, 5]);
                }
                f.extend(et);
                f
            }
            113 => [[0u8, 0, 0, 1, 0, 6, 2, 2, 2, 2, 2, 2, 0, 0].as_slice(), &et].concat(),
            276 => [et.as_slice(), &[0, 0, 0, 0, 0, 2, 0, 1, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0]].concat(),
            _ => Vec::new(),
        };
        frame.extend(ip);
        for _ in 0..rng.below(4) {
            let i = rng.below(frame.len());
            frame[i] = rng.next() as u8;
        }
        frame.truncate(rng.below(frame.len() + 1).max(if rng.chance(4) { 0 } else { frame.len() }));
        ts = if rng.chance(8) { rng.next() } else { ts + rng.below(2_000_000) as u64 };
        let incl = frame.len() as u32;
        let (incl_field, orig) = match (r == liar).then(|| rng.below(3)) {
            Some(0) => (incl, *rng.pick(&[0u32, 1, u32::MAX, 0x7fff_ffff, 65535, 65536])),
            Some(1) => (incl, incl.saturating_sub(1)),
            Some(_) => (*rng.pick(&[u32::MAX, 0x8000_0000, incl + 1]), incl),
            None => (incl, incl + rng.below(1500) as u32),
        };
        out.extend(((ts >> 32) as u32).to_le_bytes());
        out.extend((ts as u32 % if nano { 1_000_000_000 } else { 1_000_000 }).to_le_bytes());
        out.extend(incl_field.to_le_bytes());
        out.extend(orig.to_le_bytes());
        out.extend(frame);
    }
    out
}

/// A record or block whose length claims 4 GiB is a truncated capture, said as one,
/// and nothing near that size is allocated.
#[test]
fn lengths_claiming_4_gib_are_refused_without_allocating_them() {
    let mixed = std::fs::read(repo("examples/mixed.pcap")).unwrap();
    let mut classic = pcap_head(&mixed, 2);
    classic[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut ng = pcapng_seed();
    let second = 28 + u32::from_le_bytes(ng[28 + 4..28 + 8].try_into().unwrap()) as usize;
    ng[second + 4..second + 8].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    for (capture, want) in [
        (classic, "packet 1: the file ends in the middle of a record (truncated capture)"),
        (ng, "after packet 0: the file ends in the middle of a record (truncated capture)"),
    ] {
        let path = scratch("claims-4gib");
        std::fs::write(&path, &capture).unwrap();
        let file = path.to_string_lossy().into_owned();
        BIGGEST.with(|b| b.set(0));
        let a = crate::replay::ReplayArgs {
            dev: vec![],
            tc: None,
            rate: "1mbit".into(),
            pcap: Some(file.clone()),
            flow: vec![],
            duration: None,
            seed: 1,
            overhead: 0,
            json: false,
        };
        assert_eq!(crate::replay::run(&a).err(), Some(format!("{file}: {want}")));
        // pcap-file's reader has a fixed 8 MB buffer; nothing grows with the claim.
        let biggest = BIGGEST.with(|b| b.get());
        assert!(biggest <= 8_000_000, "{want}: {biggest}");
    }
}

#[test]
fn pcap() {
    let mixed = std::fs::read(repo("examples/mixed.pcap")).unwrap();
    let mut seeds = vec![pcap_head(&mixed, 12), pcap_head(&mixed, 1), pcapng_seed()];
    // The same records as a big-endian, nanosecond-resolution file.
    let mut ns = pcap_head(&mixed, 4);
    ns[..4].copy_from_slice(&[0x4D, 0x3C, 0xB2, 0xA1]);
    seeds.push(ns);
    fuzz(Target {
        name: "pcap",
        seeds,
        dict: vec![],
        binary: true,
        generate: Some(gen_pcap),
        iters: 3000,
        run: pcap_target,
    });
    let _ = std::fs::remove_dir_all(scratch("capture").parent().unwrap());
}

// ---- results (plot, compare) -----------------------------------------------------------

/// A saved result as `plot` and `compare` read it, then compared, tabulated and drawn.
fn result_target(input: &[u8]) -> Result<(), String> {
    let r = match crate::outputs::parse_result(input, "fuzz.json") {
        Ok(r) => r,
        Err(e) if !e.starts_with("fuzz.json: ") => return Err(format!("an error that does not name the file: {e}")),
        Err(_) => return Ok(()),
    };
    accepted();
    let other = fixture();
    for (a, b) in [(&r, &r), (&r, other), (other, &r)] {
        let rows = crate::compare::compare(a, b);
        let _ = crate::compare::table(a, b, &rows);
        let _ = crate::compare::cpu_table(a, b, &crate::compare::compare_cpu(a, b));
        let json = serde_json::to_string(&crate::compare::json_out(a, b, &rows)).map_err(|e| e.to_string())?;
        serde_json::from_str::<serde_json::Value>(&json).map_err(|e| format!("compare --json does not parse: {e}"))?;
    }
    // PNG is slower to encode: one valid result in eight.
    let png = fnv(input).is_multiple_of(8);
    for fig in crate::plot::figures(&r) {
        let _ = crate::plot::svg(&fig);
        if png {
            let _ = crate::plot::png(&fig);
        }
    }
    Ok(())
}

fn fixture() -> &'static RunResult {
    static F: std::sync::OnceLock<RunResult> = std::sync::OnceLock::new();
    F.get_or_init(|| {
        let path = repo("crates/qdisc-lab/tests/fixtures/small-host-a.json");
        crate::outputs::read_result(&path).unwrap()
    })
}

#[test]
fn result() {
    let seeds = files("crates/qdisc-lab/tests/fixtures", "small-host-a.json");
    let dict = dictionary(&seeds, &[]);
    fuzz(Target { name: "result", seeds, dict, binary: false, generate: None, iters: 1500, run: result_target });
}

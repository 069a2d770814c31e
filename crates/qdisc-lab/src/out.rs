//! Writing what a command prints without panicking: `print!` panics ("failed printing
//! to stdout", exit status 101) when stdout is a closed pipe (`| head`) or a full disk
//! (`> /dev/full`). Here a failed write is kept, the command finishes its other work
//! (`--json`, `--plot` files), and then exits as Unix tools do:
//!
//! * closed pipe (EPIPE): quietly, dying of SIGPIPE as `cat` does (a shell says 141);
//! * anything else (ENOSPC, EIO …): one line on stderr when it happens, exit status 1.
//!
//! A run's kernel lab is torn down before anything is printed (the backend returns its
//! result after teardown), so an output error never leaves namespaces or children.

use std::io::{self, Write};

/// Stdout for a command's report: remembers the first error; later writes are skipped.
pub struct Stdout {
    /// What the command calls itself in messages ("qdisc-lab run").
    who: &'static str,
    err: Option<io::Error>,
}

impl Stdout {
    pub fn new(who: &'static str) -> Stdout {
        Stdout { who, err: None }
    }

    /// Write and flush `text` (`what` names it in an error message: "the report").
    /// On an error other than a closed pipe, says so on stderr now.
    pub fn write(&mut self, what: &str, text: &str) {
        if self.err.is_some() {
            return;
        }
        let mut out = io::stdout().lock();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            if e.kind() != io::ErrorKind::BrokenPipe {
                errln!("{}: writing {what}: {e}", self.who);
            }
            self.err = Some(e);
        }
    }

    /// The command's exit status: `ok` if everything was written, else 1 (the error was
    /// already said); for a closed pipe it does not return: the process dies of
    /// SIGPIPE.
    pub fn status(self, ok: u8) -> u8 {
        match self.err {
            None => ok,
            Some(e) if e.kind() == io::ErrorKind::BrokenPipe => die_of_sigpipe(),
            Some(_) => 1,
        }
    }
}

/// End the process as a program with SIGPIPE's default action does on a closed pipe
/// (Rust ignores SIGPIPE, so writes fail with EPIPE instead). Called only after every
/// other output is done.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: signal(2) and raise(3) with a valid signal number; nothing else runs here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // SIGPIPE blocked by whoever started us: the status a shell would show.
    std::process::exit(128 + libc::SIGPIPE)
}

/// Write `value` to `path` as pretty JSON and a newline, streamed: a large result (its
/// periodic tc snapshots are read back from disk one at a time) is never one string.
pub fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> io::Result<()> {
    let mut w = io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut w, value)?;
    w.write_all(b"\n")?;
    w.flush()
}

//! The guest's initramfs, built from Debian packages and cached.
//!
//! It is three concatenated cpio archives (Linux unpacks them one after the other):
//!
//! 1. **base** (`vm/initramfs/base-<key>.cpio`, key = the kernel and the userland
//!    packages): the kernel's modules — every `net/sched` module, every TCP congestion
//!    control, veth, bridge, ifb, dummy, virtio_pci, virtio_console and their dependencies,
//!    *uncompressed* (busybox's modprobe reads plain `.ko` only), with `depmod`'s indexes
//!    so the kernel's autoloader (`/sbin/modprobe`, busybox) finds them — and a userland
//!    unpacked from Debian packages of this machine's release: iproute2 (the newest of
//!    the release and its backports, i.e. 6.15 on Debian 12), iperf3, iputils-ping,
//!    irtt, ethtool (a script's `ethtool -K` lines), busybox-static (a shell and modprobe only: busybox never stands in for `ip`
//!    or `tc`), and the shared libraries they need (from the packages, else from this
//!    machine).
//! 2. **program** (`vm/initramfs/exe-<key>.cpio`, key = the program file): the qdisc-lab
//!    binary itself (stripped when `objcopy` is there) and its libraries. The
//!    guest runs it as its init: it runs the scenario with the host backend's code.
//! 3. **run** (per run, a few kB): `/lab/run.json`.
//!
//! Paths are laid out merged-/usr (`/bin`, `/sbin`, `/lib`, `/lib64` are symlinks into
//! `/usr`) whatever the packages or this machine use. Archives are uncompressed: under
//! TCG the kernel copies 30 MB faster than it would decompress a third of that.
//! Files this machine contributed are listed with their size and mtime next to each
//! archive; a change rebuilds it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::apt::{self, compare_versions, Apt};
use super::kernel::Kernel;

/// Bump when what goes into an archive changes (invalidates cached archives).
const BUILDER: &str = "qdisc-lab vm initramfs 4";

/// The multiarch directory of the (x86_64) guest.
const TRIPLET: &str = "x86_64-linux-gnu";

/// Debian packages of the guest's userland. iproute2 is taken at the newest version the
/// release and its backports have.
pub const USERLAND: [&str; 8] =
    ["busybox-static", "iproute2", "iperf3", "libiperf0", "libsctp1", "iputils-ping", "irtt", "ethtool"];

/// The programs taken from those packages (with the libraries they need, and iproute2's
/// data: netem's distribution tables, its config files). The rest of iproute2 (arpd,
/// ss, rdma …) would bring in Berkeley DB, Kerberos, SELinux libraries: megabytes the
/// kernel has to unpack at every boot.
pub const PROGRAMS: [&str; 7] = ["ip", "tc", "iperf3", "ping", "irtt", "ethtool", "busybox"];

/// Whether a file of the unpacked userland packages goes into the image (by its image path).
fn userland_wanted(img: &str) -> bool {
    match img.rsplit_once('/') {
        Some(("usr/bin" | "usr/sbin", name)) => PROGRAMS.contains(&name),
        _ => ["etc/iproute2/", "usr/share/iproute2/", "usr/lib/x86_64-linux-gnu/tc/", "usr/lib/tc/"]
            .iter()
            .any(|d| img.starts_with(d)),
    }
}

/// Modules by name (beyond all of net/sched and net/ipv4/tcp_*): `true` = required.
/// (virtio_pci and virtio_console carry the result port; Debian 13 builds them in, 12 not.)
const MODULES: [(&str, bool); 6] = [
    ("veth", true),
    ("bridge", true),
    ("ifb", false),
    ("dummy", false),
    ("virtio_pci", false),
    ("virtio_console", false),
];

// ---------------------------------------------------------------------------------
// cpio (newc), as Linux's initramfs unpacker reads it.

/// A file tree to archive: path (relative, no leading `/`) → node.
#[derive(Debug, Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Dir(u32),
    /// Contents from a file on disk.
    File {
        src: PathBuf,
        mode: u32,
    },
    Data {
        data: Vec<u8>,
        mode: u32,
    },
    Symlink(String),
    CharDev {
        major: u32,
        minor: u32,
        mode: u32,
    },
}

/// Lexically normalise a path (no leading `/`, `.` and `..` resolved).
pub fn lexical(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str().unwrap_or("")),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.join("/")
}

/// A path as laid out in the image: normalised and merged-/usr (`bin/x` → `usr/bin/x`).
pub fn image_path(p: &str) -> String {
    let p = lexical(p);
    match p.split('/').next() {
        Some("bin" | "sbin" | "lib" | "lib64") => format!("usr/{p}"),
        _ => p,
    }
}

/// The same path in the other layout (merged-/usr ↔ not), if it has another.
fn other_layout(p: &str) -> Option<String> {
    let first = p.split('/').next()?;
    if ["bin", "sbin", "lib", "lib64"].contains(&first) {
        return Some(format!("usr/{p}"));
    }
    let rest = p.strip_prefix("usr/")?;
    ["bin", "sbin", "lib", "lib64"].contains(&rest.split('/').next()?).then(|| rest.to_string())
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    fn parents(&mut self, path: &str) {
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let dir = &path[..at + i];
            self.nodes.entry(dir.to_string()).or_insert(Node::Dir(0o755));
            at += i + 1;
        }
    }

    /// Add a node at `path` (normalised with [`image_path`]); parents become directories.
    /// An existing node is kept (first one wins) unless `replace`.
    pub fn put(&mut self, path: &str, node: Node, replace: bool) -> String {
        let p = image_path(path);
        if p.is_empty() {
            return p;
        }
        self.parents(&p);
        if replace || !self.nodes.contains_key(&p) {
            self.nodes.insert(p.clone(), node);
        }
        p
    }

    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains_key(&image_path(path))
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(&image_path(path))
    }

    pub fn paths(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.nodes.iter()
    }

    /// The merged-/usr skeleton every archive carries (so no archive turns one of these
    /// symlinks into a directory).
    pub fn skeleton(&mut self) {
        for d in ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64"] {
            self.put(d, Node::Dir(0o755), true);
        }
        for l in ["bin", "sbin", "lib", "lib64"] {
            self.nodes.insert(l.into(), Node::Symlink(format!("usr/{l}")));
        }
    }

    /// Write the archive (entries in path order: parents before children).
    pub fn write_cpio(&self, out: impl Write) -> std::io::Result<u64> {
        let mut w = CpioWriter::new(out);
        for (path, node) in &self.nodes {
            match node {
                Node::Dir(mode) => w.entry(path, 0o040000 | mode, 0, 0, &mut std::io::empty())?,
                Node::Symlink(t) => w.entry(path, 0o120777, t.len() as u64, 0, &mut t.as_bytes())?,
                Node::Data { data, mode } => w.entry(path, 0o100000 | mode, data.len() as u64, 0, &mut &data[..])?,
                Node::CharDev { major, minor, mode } => {
                    w.entry(path, 0o020000 | mode, 0, (*major << 8) | *minor, &mut std::io::empty())?
                }
                Node::File { src, mode } => {
                    let mut f = File::open(src)
                        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
                    let len = f.metadata()?.len();
                    w.entry(path, 0o100000 | mode, len, 0, &mut f)?
                }
            }
        }
        w.finish()
    }
}

/// The newc cpio format ("070701"): a 110-byte ASCII header, the name, the data, each
/// padded to 4 bytes; `TRAILER!!!` ends an archive.
pub struct CpioWriter<W: Write> {
    w: W,
    ino: u32,
    pos: u64,
}

impl<W: Write> CpioWriter<W> {
    pub fn new(w: W) -> Self {
        CpioWriter { w, ino: 1, pos: 0 }
    }

    fn pad(&mut self) -> std::io::Result<()> {
        let n = (4 - (self.pos % 4) as usize) % 4;
        self.w.write_all(&[0u8; 3][..n])?;
        self.pos += n as u64;
        Ok(())
    }

    /// One entry; `rdev` = major << 8 | minor (char devices).
    pub fn entry(&mut self, name: &str, mode: u32, size: u64, rdev: u32, data: &mut dyn Read) -> std::io::Result<()> {
        let size32 = u32::try_from(size).map_err(|_| std::io::Error::other(format!("{name}: too big for cpio")))?;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        let header = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            size32,
            0,
            0,
            rdev >> 8,
            rdev & 0xff,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.w.write_all(header.as_bytes())?;
        self.w.write_all(name.as_bytes())?;
        self.w.write_all(&[0])?;
        self.pos += header.len() as u64 + name.len() as u64 + 1;
        self.pad()?;
        let copied = std::io::copy(&mut data.take(size), &mut self.w)?;
        if copied != size {
            return Err(std::io::Error::other(format!("{name}: changed while being archived")));
        }
        self.pos += size;
        self.pad()
    }

    /// The trailer; the archive's total length.
    pub fn finish(mut self) -> std::io::Result<u64> {
        self.entry("TRAILER!!!", 0, 0, 0, &mut std::io::empty())?;
        self.w.flush()?;
        Ok(self.pos)
    }
}

// ---------------------------------------------------------------------------------
// ELF: what a program needs to run.

/// The ELF interpreter and `DT_NEEDED` libraries of a 64-bit little-endian ELF file;
/// `None` when it is not one (a script, data).
pub fn elf_needs(data: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |o: usize| data.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let phoff = u64_at(0x20)? as usize;
    let (phentsize, phnum) = (u16_at(0x36)?, u16_at(0x38)?);
    let cstr = |o: usize| -> Option<String> {
        let s = data.get(o..)?;
        let end = s.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&s[..end]).into_owned())
    };
    let mut interp = None;
    let mut dynamic = None;
    let mut loads = Vec::new();
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(data.get(ph..ph + 4)?.try_into().unwrap());
        let (off, vaddr, filesz) = (u64_at(ph + 8)?, u64_at(ph + 16)?, u64_at(ph + 32)?);
        match p_type {
            1 => loads.push((vaddr, off, filesz)),
            2 => dynamic = Some((off as usize, filesz as usize)),
            3 => interp = cstr(off as usize),
            _ => {}
        }
    }
    let mut needed = Vec::new();
    if let Some((off, size)) = dynamic {
        let mut strtab = None;
        let mut offsets = Vec::new();
        for e in (off..off + size).step_by(16) {
            let (tag, val) = (u64_at(e)?, u64_at(e + 8)?);
            match tag {
                0 => break,
                1 => offsets.push(val as usize),
                5 => strtab = Some(val),
                _ => {}
            }
        }
        if let Some(addr) = strtab {
            let file_off =
                loads.iter().find(|(v, _, sz)| addr >= *v && addr < v + sz).map(|(v, o, _)| (addr - v + o) as usize)?;
            for o in offsets {
                needed.push(cstr(file_off + o)?);
            }
        }
    }
    Some((interp, needed))
}

/// A filesystem the image takes files from: a directory standing for `/` (an unpacked
/// package set, or this machine's own `/`).
#[derive(Debug, Clone)]
struct Root {
    dir: PathBuf,
    /// This machine: its files are recorded in the host manifest.
    host: bool,
}

impl Root {
    /// Where a path (in this root) is on disk, trying the other /usr layout too.
    fn locate(&self, path: &str) -> Option<PathBuf> {
        let p = lexical(path);
        std::iter::once(p.clone())
            .chain(other_layout(&p))
            .map(|c| self.dir.join(c))
            .find(|d| std::fs::symlink_metadata(d).is_ok())
    }

    /// Where `soname` is in this root's library directories, as a path in the root
    /// (e.g. `lib/x86_64-linux-gnu/libc.so.6`).
    fn find_lib(&self, soname: &str) -> Option<String> {
        let dirs = [
            format!("usr/lib/{TRIPLET}"),
            format!("lib/{TRIPLET}"),
            "usr/lib".into(),
            "lib".into(),
            "lib64".into(),
            "usr/lib64".into(),
        ];
        dirs.iter().map(|d| format!("{d}/{soname}")).find(|p| self.dir.join(p).exists())
    }
}

/// Builds one archive's tree, following symlinks and ELF dependencies.
struct Builder {
    tree: Tree,
    roots: Vec<Root>,
    /// Host files used: path → (size, mtime ns).
    host_files: BTreeMap<String, (u64, i64)>,
    /// ELF files already scanned (image paths).
    scanned: BTreeSet<String>,
    /// Host files another archive of the same initrd already has.
    skip: BTreeSet<String>,
}

fn mtime_ns(md: &std::fs::Metadata) -> i64 {
    md.mtime() * 1_000_000_000 + md.mtime_nsec()
}

impl Builder {
    fn new(roots: Vec<Root>) -> Builder {
        let mut tree = Tree::new();
        tree.skeleton();
        Builder { tree, roots, host_files: BTreeMap::new(), scanned: BTreeSet::new(), skip: BTreeSet::new() }
    }

    /// Add `path` (in `root`) and, if it is a symlink, what it points to, as symlinks
    /// and the final file. Returns the image path of the final file.
    fn add_chain(&mut self, root: &Root, path: &str) -> Result<String, String> {
        let mut p = lexical(path);
        for _ in 0..40 {
            let disk = root.locate(&p).ok_or_else(|| format!("{}: not found", root.dir.join(&p).display()))?;
            let meta = std::fs::symlink_metadata(&disk).map_err(|e| format!("{}: {e}", disk.display()))?;
            let img = image_path(&p);
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&disk).map_err(|e| format!("{}: {e}", disk.display()))?;
                let target = target.to_string_lossy().into_owned();
                self.tree.put(&img, Node::Symlink(target.clone()), false);
                p = if target.starts_with('/') {
                    lexical(&target)
                } else {
                    let parent = Path::new(&p).parent().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
                    lexical(&format!("{parent}/{target}"))
                };
                continue;
            }
            if meta.is_dir() {
                self.tree.put(&img, Node::Dir(0o755), false);
                return Ok(img);
            }
            if root.host {
                if self.skip.contains(&disk.display().to_string()) {
                    return Ok(img);
                }
                self.host_files.insert(disk.display().to_string(), (meta.len(), mtime_ns(&meta)));
            }
            let mode = meta.permissions().mode() & 0o7777;
            self.tree.put(&img, Node::File { src: disk, mode }, false);
            return Ok(img);
        }
        Err(format!("{path}: too many levels of symlinks"))
    }

    /// Everything an ELF file at `image` (already in the tree) needs, recursively.
    fn add_needs(&mut self, image: &str, who: &str) -> Result<(), String> {
        if !self.scanned.insert(image.to_string()) {
            return Ok(());
        }
        let Some(Node::File { src, .. }) = self.tree.get(image).cloned() else { return Ok(()) };
        let data = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let Some((interp, needed)) = elf_needs(&data) else { return Ok(()) };
        let mut wants: Vec<(String, bool)> = needed.into_iter().map(|n| (n, false)).collect();
        if let Some(i) = interp {
            wants.push((i, true));
        }
        for (name, is_path) in wants {
            let found = self.roots.clone().into_iter().find_map(|r| {
                let p =
                    if is_path { Some(lexical(&name)).filter(|p| r.locate(p).is_some()) } else { r.find_lib(&name) };
                p.map(|p| (r, p))
            });
            let (root, path) = found.ok_or_else(|| {
                format!("{name}, needed by {who}, is neither in the guest's packages nor on this machine")
            })?;
            let img = self.add_chain(&root, &path)?;
            self.add_needs(&img, &name)?;
        }
        Ok(())
    }

    fn host_manifest(&self) -> String {
        self.host_files.iter().map(|(p, (s, m))| format!("{p}\t{s}\t{m}\n")).collect()
    }
}

/// Whether the files a manifest lists are unchanged.
pub fn manifest_current(manifest: &str) -> bool {
    manifest.lines().filter(|l| !l.is_empty()).all(|l| {
        let mut f = l.split('\t');
        let (Some(p), Some(s), Some(m)) = (f.next(), f.next(), f.next()) else { return false };
        std::fs::metadata(p).map(|md| md.len().to_string() == s && mtime_ns(&md).to_string() == m).unwrap_or(false)
    })
}

/// A stable key (hex) of some strings.
pub fn cache_key(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().iter().take(10).map(|b| format!("{b:02x}")).collect()
}

/// Write a tree as `path` (via a temporary file, then renamed) and its host manifest.
fn store(tree: &Tree, manifest: &str, path: &Path) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let r = (|| {
        let f = File::create(&tmp)?;
        tree.write_cpio(BufWriter::with_capacity(1 << 20, f))?;
        std::fs::write(path.with_extension("host"), manifest)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("writing {}: {e}", path.display()));
    }
    Ok(())
}

/// A cached archive, if present and its host files are unchanged.
fn cached_archive(path: &Path) -> Option<PathBuf> {
    let manifest = std::fs::read_to_string(path.with_extension("host")).ok()?;
    (path.is_file() && manifest_current(&manifest)).then(|| path.to_path_buf())
}

// ---------------------------------------------------------------------------------
// The userland.

/// This machine's Debian release (the guest's userland comes from it, so its C library
/// is the one the qdisc-lab binary was linked against).
pub fn host_codename() -> Result<String, String> {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('=')).map(|v| v.trim_matches('"').to_string()))
    };
    match (field("ID").as_deref(), field("VERSION_CODENAME")) {
        (Some("debian"), Some(c)) if !c.is_empty() => Ok(c),
        _ => Err("the vm backend builds its guest from Debian packages of this machine's release: \
                  it needs Debian (with apt-get and dpkg-deb)"
            .into()),
    }
}

/// Download (once) the userland packages; their `.deb` files.
pub fn fetch_userland(vm: &Path, say: &mut dyn FnMut(&str)) -> Result<Vec<PathBuf>, String> {
    let codename = host_codename()?;
    let apt = Apt::new(vm, &codename);
    let dl = vm.join("dl");
    // The choice is remembered, so warm runs ask nothing of the archive.
    let list = vm.join(format!("userland-{codename}.list"));
    if std::env::var_os("QDL_VM_REFRESH").is_none() {
        if let Ok(text) = std::fs::read_to_string(&list) {
            let debs: Vec<PathBuf> = text.lines().map(|n| dl.join(n)).collect();
            if debs.len() == USERLAND.len() && debs.iter().all(|d| d.is_file()) {
                return Ok(debs);
            }
        }
    }
    say(&format!("downloading the guest's userland (Debian {codename})"));
    let mut debs = Vec::new();
    for pkg in USERLAND {
        let info = if pkg == "iproute2" {
            let mut v = apt.versions(pkg)?;
            v.sort_by(|a, b| compare_versions(b, a));
            match v.first() {
                Some(newest) => apt.show(&format!("{pkg}={newest}"))?,
                None => None,
            }
        } else {
            apt.show(pkg)?
        };
        let info = info.ok_or_else(|| format!("Debian {codename} has no package {pkg} (from {})", apt::mirror()))?;
        debs.push(apt.download(&info, &dl)?);
    }
    let names: String = debs.iter().map(|d| format!("{}\n", d.file_name().unwrap().to_string_lossy())).collect();
    std::fs::write(&list, names).map_err(|e| format!("{}: {e}", list.display()))?;
    Ok(debs)
}

/// Unpack the userland packages into one directory (cached by their names).
fn unpack_userland(vm: &Path, debs: &[PathBuf]) -> Result<PathBuf, String> {
    let names: Vec<String> = debs.iter().map(|d| d.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let dir = vm.join(format!("userland-{}", cache_key(&refs)));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let tmp = vm.join(format!("userland.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let r = (|| {
        for d in debs {
            apt::unpack(d, &tmp)?;
        }
        std::fs::write(tmp.join(".complete"), "").map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).map_err(|e| format!("{}: {e}", dir.display()))
    })();
    if r.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    r.map(|_| dir)
}

/// Every file (not directory) below `dir`, relative, skipping documentation.
fn walk(dir: &Path) -> Vec<String> {
    fn go(base: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(base.join(rel)) else { return };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if ["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/bug", ".complete"]
                .contains(&r.as_str())
            {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => go(base, &r, out),
                Ok(_) => out.push(r),
                Err(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    go(dir, "", &mut out);
    out
}

// ---------------------------------------------------------------------------------
// Modules.

/// `modules.dep`: module name (`sch_netem`) → (path, dependency paths).
pub fn parse_modules_dep(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
    text.lines()
        .filter_map(|l| {
            let (path, deps) = l.split_once(':')?;
            let path = path.trim().to_string();
            Some((module_name(&path), (path, deps.split_whitespace().map(String::from).collect())))
        })
        .collect()
}

/// `kernel/net/sched/sch_fq-codel.ko.xz` → `sch_fq_codel`.
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.split(".ko").next().unwrap_or(base).replace('-', "_")
}

/// The module files the guest needs (paths relative to the modules directory), with
/// their dependencies; an error names a required module the kernel has neither as a
/// module nor built in.
pub fn module_closure(dep: &str, builtin: &str) -> Result<BTreeSet<String>, String> {
    let mods = parse_modules_dep(dep);
    let builtins: BTreeSet<String> = builtin.lines().map(module_name).collect();
    let mut want: Vec<String> = mods
        .values()
        .filter(|(p, _)| {
            p.starts_with("kernel/net/sched/") || (p.starts_with("kernel/net/ipv4/tcp_") && !p.contains("/tcp_diag"))
        })
        .map(|(p, _)| p.clone())
        .collect();
    for (name, required) in MODULES {
        match mods.get(name) {
            Some((p, _)) => want.push(p.clone()),
            None if builtins.contains(name) || !required => {}
            None => return Err(format!("the kernel has no {name} module and does not build it in")),
        }
    }
    let by_path: BTreeMap<&str, &Vec<String>> = mods.values().map(|(p, d)| (p.as_str(), d)).collect();
    let mut out = BTreeSet::new();
    while let Some(p) = want.pop() {
        if out.insert(p.clone()) {
            if let Some(deps) = by_path.get(p.as_str()) {
                want.extend(deps.iter().cloned());
            }
        }
    }
    Ok(out)
}

/// Of the modules `wanted` (by name), those the kernel has neither as a module
/// (`modules.dep`) nor built in (`modules.builtin`).
pub fn lacking_modules<'a>(dep: &str, builtin: &str, wanted: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mods = parse_modules_dep(dep);
    let builtins: BTreeSet<String> = builtin.lines().map(module_name).collect();
    wanted.into_iter().filter(|m| !mods.contains_key(*m) && !builtins.contains(*m)).collect()
}

fn run_tool(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{:?} failed: {}", cmd.get_program(), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Copy the modules into `staging/usr/lib/modules/<release>`, uncompressed, and index
/// them with depmod.
fn stage_modules(k: &Kernel, staging: &Path) -> Result<(), String> {
    let read = |n: &str| std::fs::read_to_string(k.modules.join(n)).unwrap_or_default();
    let files = module_closure(&read("modules.dep"), &read("modules.builtin"))?;
    let dst = staging.join("usr/lib/modules").join(&k.release);
    let mut compressed: BTreeMap<&str, Vec<PathBuf>> = BTreeMap::new();
    for f in &files {
        let to = dst.join(f);
        std::fs::create_dir_all(to.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::copy(k.modules.join(f), &to).map_err(|e| format!("{}: {e}", k.modules.join(f).display()))?;
        for (ext, tool) in [(".xz", "xz"), (".zst", "zstd"), (".gz", "gzip")] {
            if f.ends_with(ext) {
                compressed.entry(tool).or_default().push(to.clone());
            }
        }
    }
    for (tool, paths) in compressed {
        for chunk in paths.chunks(200) {
            let mut cmd = Command::new(tool);
            cmd.args(["-d", "-q", "-f"]);
            if tool == "zstd" {
                cmd.arg("--rm");
            }
            cmd.arg("--").args(chunk);
            run_tool(&mut cmd).map_err(|e| format!("uncompressing modules ({tool} is needed): {e}"))?;
        }
    }
    for n in ["modules.builtin", "modules.builtin.modinfo", "modules.order"] {
        if k.modules.join(n).exists() {
            std::fs::copy(k.modules.join(n), dst.join(n)).map_err(|e| e.to_string())?;
        }
    }
    std::os::unix::fs::symlink("usr/lib", staging.join("lib")).map_err(|e| e.to_string())?;
    run_tool(Command::new("depmod").arg("-b").arg(staging).arg(&k.release))
}

// ---------------------------------------------------------------------------------
// The archives.

/// The base archive for a kernel and userland (built if not cached).
pub fn base(vm: &Path, k: &Kernel, debs: &[PathBuf], say: &mut dyn FnMut(&str)) -> Result<PathBuf, String> {
    let names: Vec<String> = debs.iter().map(|d| d.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let mut parts = vec![BUILDER, &k.release, &k.package];
    parts.extend(names.iter().map(String::as_str));
    let dir = vm.join("initramfs");
    let path = dir.join(format!("base-{}.cpio", cache_key(&parts)));
    if let Some(p) = cached_archive(&path) {
        return Ok(p);
    }
    say("building the guest's initramfs");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let userland = unpack_userland(vm, debs)?;
    let staging = vm.join(format!("staging.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let r = (|| {
        stage_modules(k, &staging)?;
        let ul = Root { dir: userland.clone(), host: false };
        let host = Root { dir: PathBuf::from("/"), host: true };
        let mut b = Builder::new(vec![ul.clone(), host]);
        for rel in walk(&userland) {
            if userland_wanted(&image_path(&rel)) {
                b.add_chain(&ul, &rel)?;
            }
        }
        let st = Root { dir: staging.clone(), host: false };
        for rel in walk(&staging.join("usr")) {
            b.add_chain(&st, &format!("usr/{rel}"))?;
        }
        // Programs and the libraries they need.
        let elves: Vec<String> = b
            .tree
            .paths()
            .filter(|(p, n)| {
                matches!(n, Node::File { .. }) && (p.starts_with("usr/bin/") || p.starts_with("usr/sbin/"))
            })
            .map(|(p, _)| p.clone())
            .collect();
        for p in &elves {
            b.add_needs(p, p)?;
        }
        for tool in ["ip", "tc", "iperf3", "ping", "ethtool", "busybox"] {
            if !b.tree.contains(&format!("usr/sbin/{tool}")) && !b.tree.contains(&format!("usr/bin/{tool}")) {
                return Err(format!("the guest's packages have no {tool}"));
            }
        }
        // busybox: a shell, and the modprobe the kernel's autoloader runs. Never ip/tc.
        b.tree.put("usr/bin/sh", Node::Symlink("busybox".into()), false);
        for m in ["modprobe", "insmod", "rmmod", "lsmod"] {
            b.tree.put(&format!("usr/sbin/{m}"), Node::Symlink("../bin/busybox".into()), true);
        }
        for d in ["proc", "sys", "dev", "run", "root", "lab", "etc"] {
            b.tree.put(d, Node::Dir(0o755), false);
        }
        b.tree.put("tmp", Node::Dir(0o1777), true);
        b.tree.put("var/run", Node::Symlink("../run".into()), true);
        b.tree.put("dev/console", Node::CharDev { major: 5, minor: 1, mode: 0o600 }, true);
        b.tree.put("etc/passwd", Node::Data { data: b"root:x:0:0:root:/root:/bin/sh\n".to_vec(), mode: 0o644 }, true);
        b.tree.put("etc/group", Node::Data { data: b"root:x:0:\n".to_vec(), mode: 0o644 }, true);
        store(&b.tree, &b.host_manifest(), &path)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    r?;
    prune(&dir, "base-", 3, &path);
    Ok(path)
}

/// The archive carrying the program the guest runs as init (built if not cached), to
/// go after `base`: the libraries `base` has already are left out.
pub fn program(vm: &Path, exe: &Path, tc: Option<&Path>, base: &Path) -> Result<PathBuf, String> {
    let exe = exe.canonicalize().map_err(|e| format!("{}: {e}", exe.display()))?;
    let md = std::fs::metadata(&exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let mut id = format!("{}:{}:{}:{}", exe.display(), md.len(), mtime_ns(&md), md.ino());
    let tc = match tc {
        Some(t) => {
            let t = t.canonicalize().map_err(|e| format!("QDL_VM_TC={}: {e}", t.display()))?;
            let tmd = std::fs::metadata(&t).map_err(|e| format!("{}: {e}", t.display()))?;
            id.push_str(&format!(" tc {}:{}:{}:{}", t.display(), tmd.len(), mtime_ns(&tmd), tmd.ino()));
            Some((t, tmd.permissions().mode() & 0o7777))
        }
        None => None,
    };
    let dir = vm.join("initramfs");
    let base_name = base.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let path = dir.join(format!("exe-{}.cpio", cache_key(&[BUILDER, &id, &base_name])));
    if let Some(p) = cached_archive(&path) {
        // Most recently used first when pruning.
        let _ = File::options().append(true).open(&p).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        return Ok(p);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // Debug info and symbols are most of a release build with debug = 1; the guest
    // needs neither (every megabyte costs boot time: the kernel copies it under TCG).
    let stripped = dir.join(format!("exe.tmp-{}", std::process::id()));
    let src = match Command::new("objcopy").arg("--strip-all").arg(&exe).arg(&stripped).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => stripped.clone(),
        _ => exe.clone(),
    };
    let host = Root { dir: PathBuf::from("/"), host: true };
    let mut b = Builder::new(vec![host]);
    let base_manifest = std::fs::read_to_string(base.with_extension("host")).unwrap_or_default();
    b.skip = base_manifest.lines().filter_map(|l| l.split('\t').next()).map(String::from).collect();
    let mode = md.permissions().mode() & 0o7777;
    b.tree.put(super::GUEST_INIT, Node::File { src, mode }, true);
    let mut r = b.add_needs(&image_path(super::GUEST_INIT), &exe.display().to_string());
    if let Some((t, mode)) = tc {
        b.tree.put(super::GUEST_TC, Node::File { src: t.clone(), mode }, true);
        r = r.and_then(|_| b.add_needs(&image_path(super::GUEST_TC), &t.display().to_string()));
    }
    let r = r.and_then(|_| store(&b.tree, &b.host_manifest(), &path));
    let _ = std::fs::remove_file(&stripped);
    r?;
    prune(&dir, "exe-", 4, &path);
    Ok(path)
}

/// Keep the `keep` most recently used archives named `prefix*` (and `keep_this`).
fn prune(dir: &Path, prefix: &str, keep: usize, keep_this: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut v: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(prefix) && n.ends_with(".cpio")
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    for (_, p) in v.into_iter().skip(keep) {
        if p != keep_this {
            let _ = std::fs::remove_file(&p);
            let _ = std::fs::remove_file(p.with_extension("host"));
        }
    }
}

/// The per-run archive: `/lab/run.json`.
pub fn run_archive(run_json: &[u8]) -> Vec<u8> {
    let mut t = Tree::new();
    t.put("lab/run.json", Node::Data { data: run_json.to_vec(), mode: 0o644 }, true);
    let mut out = Vec::new();
    t.write_cpio(&mut out).expect("writing to memory");
    out
}

/// The initrd of one run: base, program and run archives, concatenated into `dst`.
pub fn assemble(dst: &Path, base: &Path, program: &Path, run_json: &[u8]) -> Result<(), String> {
    let r = (|| {
        let mut out = File::create(dst)?;
        for part in [base, program] {
            std::io::copy(&mut File::open(part)?, &mut out)?;
        }
        out.write_all(&run_archive(run_json))?;
        out.flush()
    })();
    r.map_err(|e| format!("writing {}: {e}", dst.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read a newc archive back: (name, mode, rdev, data).
    fn read_cpio(mut b: &[u8]) -> Vec<(String, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let total = b.len();
        loop {
            assert_eq!(&b[..6], b"070701");
            let hex =
                |i: usize| u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16).unwrap();
            let (mode, size, rmaj, rmin, namesize) = (hex(1), hex(6) as usize, hex(9), hex(10), hex(11) as usize);
            let name = std::str::from_utf8(&b[110..110 + namesize - 1]).unwrap().to_string();
            let data_at = (110 + namesize).next_multiple_of(4);
            let data = b[data_at..data_at + size].to_vec();
            let next = (data_at + size).next_multiple_of(4);
            b = &b[next..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty() && total.is_multiple_of(4));
                return out;
            }
            out.push((name, mode, (rmaj << 8) | rmin, data));
        }
    }

    #[test]
    fn cpio_as_the_kernel_reads_it() {
        let mut t = Tree::new();
        t.skeleton();
        t.put("/sbin/modprobe", Node::Symlink("../bin/busybox".into()), true);
        t.put("dev/console", Node::CharDev { major: 5, minor: 1, mode: 0o600 }, true);
        t.put("lab/run.json", Node::Data { data: b"{}\n".to_vec(), mode: 0o644 }, true);
        let mut buf = Vec::new();
        let len = t.write_cpio(&mut buf).unwrap();
        assert_eq!(len as usize, buf.len());
        let entries = read_cpio(&buf);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "dev",
                "dev/console",
                "lab",
                "lab/run.json",
                "lib",
                "lib64",
                "sbin",
                "usr",
                "usr/bin",
                "usr/lib",
                "usr/lib64",
                "usr/sbin",
                "usr/sbin/modprobe"
            ]
        );
        let get = |n: &str| entries.iter().find(|e| e.0 == n).unwrap();
        assert_eq!(get("dev/console").1, 0o020600);
        assert_eq!(get("dev/console").2, 0x501);
        assert_eq!(get("lab/run.json").3, b"{}\n");
        assert_eq!(get("usr/sbin/modprobe").3, b"../bin/busybox");
        assert_eq!(get("bin").1 & 0o170000, 0o120000);
        assert_eq!(get("usr").1, 0o040755);
        // A run archive is a whole archive too (concatenation needs 4-byte alignment).
        let r = run_archive(b"{\"x\":1}");
        assert_eq!(read_cpio(&r).last().unwrap().3, b"{\"x\":1}");
    }

    #[test]
    fn paths_are_merged_usr() {
        assert_eq!(image_path("/bin/ip"), "usr/bin/ip");
        assert_eq!(image_path("sbin/tc"), "usr/sbin/tc");
        assert_eq!(image_path("/lib64/ld-linux-x86-64.so.2"), "usr/lib64/ld-linux-x86-64.so.2");
        assert_eq!(image_path("usr/sbin/../bin/busybox"), "usr/bin/busybox");
        assert_eq!(image_path("/etc/iproute2/rt_tables"), "etc/iproute2/rt_tables");
        assert_eq!(image_path("/library/x"), "library/x");
        assert_eq!(
            other_layout("lib/x86_64-linux-gnu/libc.so.6").as_deref(),
            Some("usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(other_layout("usr/sbin/tc").as_deref(), Some("sbin/tc"));
        assert_eq!(other_layout("usr/share/x"), None);
        assert_eq!(other_layout("etc/x"), None);
    }

    #[test]
    fn only_the_programs_of_the_userland_packages() {
        for yes in [
            "usr/sbin/tc",
            "usr/bin/ip",
            "usr/bin/busybox",
            "usr/sbin/ethtool",
            "usr/lib/x86_64-linux-gnu/tc/normal.dist",
            "etc/iproute2/rt_tables",
            "usr/share/iproute2/rt_protos",
        ] {
            assert!(userland_wanted(yes), "{yes}");
        }
        for no in [
            "usr/sbin/arpd",
            "usr/bin/ss",
            "usr/share/doc/iperf3/copyright",
            "usr/lib/systemd/system/iperf3.service",
            "usr/lib/x86_64-linux-gnu/libiperf.so.0",
        ] {
            assert!(!userland_wanted(no), "{no}");
        }
    }

    #[test]
    fn elf_needs_of_this_test_program() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let (interp, needed) = elf_needs(&exe).expect("an ELF file");
        assert!(interp.unwrap().contains("ld-linux"));
        assert!(needed.iter().any(|n| n == "libc.so.6"), "{needed:?}");
        assert_eq!(elf_needs(b"#!/bin/sh\necho hi\n"), None);
    }

    #[test]
    fn modules_and_their_dependencies() {
        let dep = "kernel/net/sched/sch_netem.ko.xz:\n\
                   kernel/net/sched/act_ct.ko.xz: kernel/net/netfilter/nf_conntrack.ko.xz kernel/lib/libcrc32c.ko.xz\n\
                   kernel/net/netfilter/nf_conntrack.ko.xz: kernel/lib/libcrc32c.ko.xz\n\
                   kernel/lib/libcrc32c.ko.xz:\n\
                   kernel/drivers/net/veth.ko.xz:\n\
                   kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko.xz\n\
                   kernel/net/802/stp.ko.xz:\n\
                   kernel/net/ipv4/tcp_bbr.ko.xz:\n\
                   kernel/net/ipv4/tcp_diag.ko.xz:\n\
                   kernel/drivers/net/wireguard/wireguard.ko.xz:\n";
        let got = module_closure(dep, "kernel/drivers/char/virtio_console.ko\n").unwrap();
        let want: BTreeSet<String> = [
            "kernel/net/sched/sch_netem.ko.xz",
            "kernel/net/sched/act_ct.ko.xz",
            "kernel/net/netfilter/nf_conntrack.ko.xz",
            "kernel/lib/libcrc32c.ko.xz",
            "kernel/drivers/net/veth.ko.xz",
            "kernel/net/bridge/bridge.ko.xz",
            "kernel/net/802/stp.ko.xz",
            "kernel/net/ipv4/tcp_bbr.ko.xz",
        ]
        .map(String::from)
        .into();
        assert_eq!(got, want);
        assert_eq!(module_name("kernel/net/sched/sch_fq-codel.ko.zst"), "sch_fq_codel");
        let dep = "kernel/net/sched/sch_tbf.ko:\nkernel/net/sched/sch_dualpi2.ko.xz:\n";
        assert_eq!(
            lacking_modules(dep, "kernel/net/sched/sch_htb.ko\n", ["sch_tbf", "sch_htb", "sch_dualpi2", "sch_cake"]),
            ["sch_cake"]
        );
        assert_eq!(lacking_modules("kernel/net/sched/sch_tbf.ko:\n", "", ["sch_dualpi2"]), ["sch_dualpi2"]);
        let e = module_closure("kernel/net/sched/sch_tbf.ko:\n", "").unwrap_err();
        assert_eq!(e, "the kernel has no veth module and does not build it in");
    }

    #[test]
    fn cache_keys_are_stable_and_separate_their_parts() {
        assert_eq!(cache_key(&["a", "b"]), cache_key(&["a", "b"]));
        assert_ne!(cache_key(&["a", "b"]), cache_key(&["ab"]));
        assert_ne!(cache_key(&["a", "b"]), cache_key(&["a", "c"]));
        assert_eq!(cache_key(&["x"]).len(), 20);
    }

    #[test]
    fn host_manifests_notice_changes() {
        let dir = std::env::temp_dir().join(format!("qdl-manifest-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("lib.so");
        std::fs::write(&f, "one").unwrap();
        let md = std::fs::metadata(&f).unwrap();
        let line = format!("{}\t{}\t{}\n", f.display(), md.len(), mtime_ns(&md));
        assert!(manifest_current(&line));
        std::fs::write(&f, "three").unwrap();
        assert!(!manifest_current(&line));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!manifest_current(&line));
        assert!(manifest_current(""));
    }
}

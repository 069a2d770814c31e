//! Which Debian kernel, fetched and unpacked once into the cache.
//!
//! `--kernel 6.12` (default) is Debian 13's `linux-image-6.12.*-amd64` (what trixie's
//! `linux-image-amd64` depends on), `--kernel 6.1` Debian 12's `linux-image-6.1.*-amd64`
//! (bookworm's), `--kernel linux-image-…` a package by name (looked up in trixie, then
//! bookworm), `--kernel FILE.deb` a package file (e.g. scripts/build-kernel-deb.sh's
//! 6.18.15 with sch_dualpi2). A kernel from the archive is kept in `vm/kernel-<release>/`,
//! one from a file in `vm/kernel-deb-<sha256 of the file, 12 digits>/` — a rebuilt
//! package has the release of the one it was built from, and must not be taken for it —:
//! `root/` (the unpacked package, `depmod` run over it), `vmlinux` (the uncompressed ELF
//! image, for qemu's direct PVH entry), `package` (what it came from; a file's with its
//! digest), `release` and `.complete`. A release-named choice (`6.12`, `6.1`) reuses the
//! newest cached archive kernel of that release without asking the archive
//! (`QDL_VM_REFRESH=1` asks).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::apt::{self, compare_versions, Apt};

/// The `--kernel` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelChoice {
    /// Debian `codename`'s default kernel (`linux-image-amd64`), whose release starts
    /// with `series` (e.g. "6.12").
    Debian { series: String, codename: String },
    /// A `linux-image-*` package by name.
    Package(String),
    /// A `.deb` file.
    Deb(PathBuf),
}

impl Default for KernelChoice {
    fn default() -> Self {
        KernelChoice::parse("6.12").unwrap()
    }
}

/// The Debian releases whose kernels `--kernel SERIES` names.
pub const SERIES: [(&str, &str); 2] = [("6.12", "trixie"), ("6.1", "bookworm")];

impl KernelChoice {
    pub fn parse(s: &str) -> Result<KernelChoice, String> {
        let s = s.trim();
        if let Some((series, codename)) = SERIES.iter().find(|(v, _)| *v == s) {
            return Ok(KernelChoice::Debian { series: series.to_string(), codename: codename.to_string() });
        }
        if s.ends_with(".deb") {
            return Ok(KernelChoice::Deb(PathBuf::from(s)));
        }
        if s.starts_with("linux-image-")
            && s.len() > "linux-image-".len()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.~".contains(c))
        {
            return Ok(KernelChoice::Package(s.to_string()));
        }
        Err(format!(
            "--kernel {s:?}: use 6.12 (Debian 13), 6.1 (Debian 12), a package name like linux-image-6.12.57+deb13-amd64, or a .deb file"
        ))
    }
}

/// Which Debian release a kernel release string belongs to, by Debian's naming
/// (`6.12.57+deb13-amd64`, `6.1.0-37-amd64`).
pub fn codename_of_release(release: &str) -> Option<&'static str> {
    if release.contains("+deb13") {
        Some("trixie")
    } else if release.contains("+deb12") || (release.starts_with("6.1.0-") && release.ends_with("-amd64")) {
        Some("bookworm")
    } else {
        None
    }
}

/// The versioned image package a `linux-image-amd64` depends on.
pub fn image_from_depends(depends: &str) -> Option<String> {
    depends
        .split([',', '|'])
        .map(|d| d.split_whitespace().next().unwrap_or(""))
        .find(|d| d.starts_with("linux-image-") && *d != "linux-image-amd64" && !d.ends_with("-dbg"))
        .map(String::from)
}

/// A kernel ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// `uname -r`.
    pub release: String,
    /// The cache directory.
    pub dir: PathBuf,
    /// `root/lib/modules/<release>` (or under usr/).
    pub modules: PathBuf,
    /// The uncompressed ELF image when it has a PVH entry, else `None`.
    pub vmlinux: Option<PathBuf>,
    /// The bzImage.
    pub vmlinuz: PathBuf,
    /// "PACKAGE VERSION" it came from.
    pub package: String,
}

impl Kernel {
    /// A cached, complete kernel directory.
    pub fn open(dir: &Path) -> Option<Kernel> {
        if !dir.join(".complete").exists() {
            return None;
        }
        let release = match std::fs::read_to_string(dir.join("release")) {
            Ok(r) => r.trim().to_string(),
            Err(_) => dir.file_name()?.to_str()?.strip_prefix("kernel-")?.to_string(),
        };
        let modules = ["lib", "usr/lib"]
            .iter()
            .map(|l| dir.join("root").join(l).join("modules").join(&release))
            .find(|p| p.join("modules.dep").is_file())?;
        let vmlinuz = dir.join("root/boot").join(format!("vmlinuz-{release}"));
        let config =
            std::fs::read_to_string(dir.join("root/boot").join(format!("config-{release}"))).unwrap_or_default();
        let vmlinux = Some(dir.join("vmlinux")).filter(|p| p.is_file() && config.lines().any(|l| l == "CONFIG_PVH=y"));
        let package = std::fs::read_to_string(dir.join("package"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| format!("linux-image-{release}"));
        Some(Kernel { release, dir: dir.to_path_buf(), modules, vmlinux, vmlinuz, package })
    }

    /// The kernel's config (`/boot/config-*`).
    pub fn config(&self) -> String {
        std::fs::read_to_string(self.dir.join("root/boot").join(format!("config-{}", self.release))).unwrap_or_default()
    }
}

/// Cached archive kernels (not ones from a file, whatever their release) whose release
/// starts with `series.` and belongs to `codename`, newest first.
pub fn cached(vm: &Path, series: &str, codename: &str) -> Vec<Kernel> {
    let mut v: Vec<Kernel> = std::fs::read_dir(vm)
        .map(|d| d.flatten().filter_map(|e| Kernel::open(&e.path())).collect())
        .unwrap_or_default();
    v.retain(|k| {
        k.dir.file_name().is_some_and(|n| *n == *format!("kernel-{}", k.release))
            && k.release.starts_with(&format!("{series}."))
            && codename_of_release(&k.release) == Some(codename)
    });
    v.sort_by(|a, b| compare_versions(&b.release, &a.release));
    v
}

/// Get the chosen kernel into the cache (downloading it if needed). `say` reports steps.
pub fn fetch(vm: &Path, choice: &KernelChoice, say: &mut dyn FnMut(&str)) -> Result<Kernel, String> {
    let refresh = std::env::var_os("QDL_VM_REFRESH").is_some();
    let dl = vm.join("dl");
    let deb = match choice {
        KernelChoice::Deb(path) => {
            let digest = file_digest(path).map_err(|e| format!("--kernel {}: {e}", path.display()))?;
            let dir = vm.join(format!("kernel-deb-{digest}"));
            if let Some(k) = Kernel::open(&dir) {
                return Ok(k);
            }
            say("unpacking the kernel");
            return unpack_kernel(vm, path, Some(&dir), &format!(" (file sha256 {digest}…)"));
        }
        KernelChoice::Debian { series, codename } => {
            if !refresh {
                if let Some(k) = cached(vm, series, codename).into_iter().next() {
                    return Ok(k);
                }
            }
            say(&format!("looking up Debian {codename}'s kernel"));
            let apt = Apt::new(vm, codename);
            if refresh {
                apt.update()?;
            }
            let meta = apt
                .show("linux-image-amd64")?
                .ok_or_else(|| format!("Debian {codename} has no linux-image-amd64 (from {})", apt::mirror()))?;
            let image = image_from_depends(&meta.depends).ok_or_else(|| {
                format!("cannot tell which kernel {codename}'s linux-image-amd64 depends on: {}", meta.depends)
            })?;
            let p = apt.show(&image)?.ok_or_else(|| format!("{codename} lists {image} but has no such package"))?;
            if let Some(k) = find_cached_package(vm, &p.package) {
                return Ok(k);
            }
            say(&format!("downloading {} {}", p.package, p.version));
            apt.download(&p, &dl)?
        }
        KernelChoice::Package(name) => {
            if let Some(k) = find_cached_package(vm, name) {
                return Ok(k);
            }
            let mut found = None;
            for (_, codename) in SERIES.iter().copied() {
                let apt = Apt::new(vm, codename);
                if let Some(p) = apt.show(name)? {
                    found = Some((apt, p));
                    break;
                }
            }
            let (apt, p) = found.ok_or_else(|| {
                format!(
                    "--kernel {name}: no such package in Debian {} (from {})",
                    SERIES.map(|s| s.1).join(" or "),
                    apt::mirror()
                )
            })?;
            say(&format!("downloading {} {} ({})", p.package, p.version, apt.codename));
            apt.download(&p, &dl)?
        }
    };
    say("unpacking the kernel");
    unpack_kernel(vm, &deb, None, "")
}

/// The first 12 hex digits of a file's sha256 (scripts/capture-goldens-vm.sh names its
/// cached kernels the same way).
fn file_digest(path: &Path) -> Result<String, String> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect())
}

/// A cached kernel unpacked from `package`.
fn find_cached_package(vm: &Path, package: &str) -> Option<Kernel> {
    let release = package.strip_prefix("linux-image-")?.trim_end_matches("-unsigned");
    Kernel::open(&vm.join(format!("kernel-{release}")))
}

/// Unpack a kernel package into `dir`, by default `vm/kernel-<release>` (atomically: a
/// temporary directory renamed into place); `note` follows the package's name and version.
pub fn unpack_kernel(vm: &Path, deb: &Path, dir: Option<&Path>, note: &str) -> Result<Kernel, String> {
    let tmp = vm.join(format!("kernel.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let root = tmp.join("root");
    let r = (|| {
        apt::unpack(deb, &root)?;
        let (modules_parent, release) = ["lib/modules", "usr/lib/modules"]
            .iter()
            .filter_map(|d| {
                let p = root.join(d);
                let name = std::fs::read_dir(&p).ok()?.flatten().find(|e| e.path().is_dir())?.file_name();
                Some((p, name.to_string_lossy().into_owned()))
            })
            .next()
            .ok_or_else(|| format!("{}: no lib/modules/<release> inside: not a kernel image package", deb.display()))?;
        let _ = modules_parent;
        // depmod -b looks in BASE/lib/modules; merged-/usr packages (Debian 13) ship usr/lib.
        if !root.join("lib").exists() {
            std::os::unix::fs::symlink("usr/lib", root.join("lib")).map_err(|e| e.to_string())?;
        }
        let out = Command::new("depmod")
            .arg("-b")
            .arg(&root)
            .arg(&release)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("depmod (kmod): {e}"))?;
        if !out.status.success() {
            return Err(format!("depmod -b {} {release}: {}", root.display(), String::from_utf8_lossy(&out.stderr)));
        }
        let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
        let image = std::fs::read(&vmlinuz).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
        // Without an ELF image the kernel still boots, more slowly, through its bzImage.
        if let Ok(elf) = extract_vmlinux(&image) {
            std::fs::write(tmp.join("vmlinux"), elf).map_err(|e| e.to_string())?;
        }
        let name = deb.file_name().unwrap_or_default().to_string_lossy().replace("%3a", ":");
        let mut parts = name.trim_end_matches(".deb").split('_');
        let package = format!("{} {}{note}", parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        std::fs::write(tmp.join("package"), package + "\n").map_err(|e| e.to_string())?;
        std::fs::write(tmp.join("release"), format!("{release}\n")).map_err(|e| e.to_string())?;
        std::fs::write(tmp.join(".complete"), "").map_err(|e| e.to_string())?;
        Ok(release)
    })();
    let release = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| vm.join(format!("kernel-{release}")));
    let dir = dir.as_path();
    if Kernel::open(dir).is_some() {
        let _ = std::fs::remove_dir_all(&tmp);
    } else {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&tmp, dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Kernel::open(dir).ok_or_else(|| format!("{}: unpacked kernel is incomplete", dir.display()))
}

/// Where a bzImage keeps its compressed kernel: the setup header's `payload_offset` and
/// `payload_length` (Documentation/arch/x86/boot.rst), relative to the protected-mode code
/// that starts after `(setup_sects + 1) * 512` bytes.
pub fn bzimage_payload(image: &[u8]) -> Option<&[u8]> {
    let u32_at = |o: usize| image.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    if image.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let setup_sects = match *image.get(0x1f1)? {
        0 => 4,
        n => n as usize,
    };
    let start = (setup_sects + 1) * 512 + u32_at(0x248)?;
    image.get(start..start + u32_at(0x24c)?)
}

/// The compression of a payload, by its magic: the decompressor to run and how many
/// trailing bytes (the kernel's appended little-endian size) to drop first.
pub fn payload_codec(payload: &[u8]) -> Option<(&'static str, usize)> {
    if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some(("zstd", 4))
    } else if payload.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some(("xz", 4))
    } else if payload.starts_with(&[0x1f, 0x8b]) {
        Some(("gzip", 0))
    } else {
        None
    }
}

/// The uncompressed ELF kernel out of a bzImage (with zstd, xz or gzip).
pub fn extract_vmlinux(image: &[u8]) -> Result<Vec<u8>, String> {
    let payload = bzimage_payload(image).ok_or("not a bzImage (no setup header)")?;
    let (tool, trailer) = payload_codec(payload).ok_or("unknown kernel compression")?;
    let data = &payload[..payload.len() - trailer];
    let mut child = Command::new(tool)
        .args(["-d", "-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{tool}: {e} (needed to unpack the kernel image)"))?;
    let mut stdin = child.stdin.take().unwrap();
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(data);
        });
        child.wait_with_output()
    })
    .map_err(|e| format!("{tool}: {e}"))?;
    if out.stdout.starts_with(b"\x7fELF") {
        Ok(out.stdout)
    } else {
        Err(format!("{tool} did not produce an ELF kernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_choices() {
        assert_eq!(
            KernelChoice::parse("6.12").unwrap(),
            KernelChoice::Debian { series: "6.12".into(), codename: "trixie".into() }
        );
        assert_eq!(KernelChoice::default(), KernelChoice::parse("6.12").unwrap());
        assert_eq!(
            KernelChoice::parse("6.1").unwrap(),
            KernelChoice::Debian { series: "6.1".into(), codename: "bookworm".into() }
        );
        assert_eq!(
            KernelChoice::parse("linux-image-6.1.0-37-amd64").unwrap(),
            KernelChoice::Package("linux-image-6.1.0-37-amd64".into())
        );
        assert_eq!(KernelChoice::parse("./k.deb").unwrap(), KernelChoice::Deb("./k.deb".into()));
        for bad in ["6.13", "", "linux-image-", "linux-image-x;rm", "latest"] {
            assert!(KernelChoice::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn releases_and_packages() {
        assert_eq!(codename_of_release("6.12.107+deb13-amd64"), Some("trixie"));
        assert_eq!(codename_of_release("6.1.0-37-amd64"), Some("bookworm"));
        assert_eq!(codename_of_release("6.12.38+deb12-amd64"), Some("bookworm"));
        assert_eq!(codename_of_release("6.18.44-fc-v669"), None);
        assert_eq!(
            image_from_depends("linux-image-6.12.57+deb13-amd64 (= 6.12.57-1)").as_deref(),
            Some("linux-image-6.12.57+deb13-amd64")
        );
        assert_eq!(
            image_from_depends(
                "linux-image-6.1.0-37-amd64-unsigned (= 6.1.140-1) | linux-image-6.1.0-37-amd64 (= 6.1.140-1)"
            )
            .as_deref(),
            Some("linux-image-6.1.0-37-amd64-unsigned")
        );
        assert_eq!(image_from_depends("libc6"), None);
    }

    #[test]
    fn bzimage_headers() {
        // A fake bzImage: 1 setup sector + boot sector, payload at offset 16 of the
        // protected-mode part.
        let mut img = vec![0u8; 4096];
        img[0x1f1] = 1;
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&8u32.to_le_bytes());
        img[1024 + 16..1024 + 24].copy_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4]);
        let p = bzimage_payload(&img).unwrap();
        assert_eq!(p.len(), 8);
        assert_eq!(payload_codec(p), Some(("zstd", 4)));
        assert_eq!(payload_codec(&[0xfd, b'7', b'z', b'X', b'Z', 0]), Some(("xz", 4)));
        assert_eq!(payload_codec(&[0x1f, 0x8b, 8]), Some(("gzip", 0)));
        assert_eq!(bzimage_payload(&[0u8; 100]), None);
    }

    /// A kernel from a file is kept by its digest and never stands in for the archive's
    /// kernel of the same release (a rebuilt package keeps the release it was built from).
    #[test]
    fn kernels_from_files_are_kept_apart() {
        let vm = std::env::temp_dir().join(format!("qdl-kernel-test-{}", std::process::id()));
        let fake = |dir: &str, release: &str, release_file: bool| {
            let d = vm.join(dir);
            std::fs::create_dir_all(d.join("root/lib/modules").join(release)).unwrap();
            std::fs::write(d.join("root/lib/modules").join(release).join("modules.dep"), "").unwrap();
            std::fs::create_dir_all(d.join("root/boot")).unwrap();
            std::fs::write(d.join(".complete"), "").unwrap();
            if release_file {
                std::fs::write(d.join("release"), format!("{release}\n")).unwrap();
            }
        };
        fake("kernel-6.12.57+deb13-amd64", "6.12.57+deb13-amd64", false);
        fake("kernel-deb-4b0ca59eb247", "6.12.99+deb13-amd64", true);
        let k = Kernel::open(&vm.join("kernel-deb-4b0ca59eb247")).unwrap();
        assert_eq!(k.release, "6.12.99+deb13-amd64");
        let got: Vec<String> = cached(&vm, "6.12", "trixie").into_iter().map(|k| k.release).collect();
        assert_eq!(got, ["6.12.57+deb13-amd64"]);
        let deb = vm.join("k.deb");
        std::fs::write(&deb, b"abc").unwrap();
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223…
        assert_eq!(file_digest(&deb).unwrap(), "ba7816bf8f01");
        std::fs::remove_dir_all(&vm).unwrap();
    }

    /// The real thing, when a Debian kernel is in the cache.
    #[test]
    fn extracts_a_cached_debian_kernel() {
        let vm = super::super::cache_dir();
        let Some(k) = cached(&vm, "6.12", "trixie").into_iter().next() else {
            eprintln!("no cached Debian 13 kernel: nothing to check");
            return;
        };
        let image = std::fs::read(&k.vmlinuz).unwrap();
        let elf = extract_vmlinux(&image).unwrap();
        assert_eq!(&elf[..4], b"\x7fELF");
        if let Some(v) = &k.vmlinux {
            assert_eq!(std::fs::metadata(v).unwrap().len(), elf.len() as u64);
        }
    }
}

//! Debian packages without touching the machine's own apt state: one private apt
//! configuration per Debian release under the cache (`vm/apt-<codename>/`: its own
//! sources list, package lists, status and caches), used only to look packages up and
//! `apt-get download` them. Nothing is installed; `.deb` files are unpacked with
//! `dpkg-deb -x` where they are needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Debian archive (`QDL_DEBIAN_MIRROR` overrides).
pub fn mirror() -> String {
    std::env::var("QDL_DEBIAN_MIRROR").unwrap_or_else(|_| "http://deb.debian.org/debian".into())
}

/// A private apt configuration for one release (its main suite and its backports).
#[derive(Debug, Clone)]
pub struct Apt {
    pub codename: String,
    dir: PathBuf,
}

/// One package as the archive has it (`apt-cache show`).
#[derive(Debug, Clone, PartialEq)]
pub struct PackageInfo {
    pub package: String,
    pub version: String,
    pub architecture: String,
    pub depends: String,
}

impl PackageInfo {
    /// The file name `apt-get download` gives it.
    pub fn deb_name(&self) -> String {
        format!("{}_{}_{}.deb", self.package, self.version.replace(':', "%3a"), self.architecture)
    }
}

/// The first stanza of `apt-cache show` output.
pub fn parse_show(text: &str) -> Option<PackageInfo> {
    let stanza = text.split("\n\n").next()?;
    let field = |name: &str| {
        stanza
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_string()))
    };
    Some(PackageInfo {
        package: field("Package")?,
        version: field("Version")?,
        architecture: field("Architecture")?,
        depends: field("Depends").unwrap_or_default(),
    })
}

/// Versions of a package as `apt-cache madison` lists them.
pub fn parse_madison(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.split('|').nth(1)).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
}

/// Compare two Debian versions (`dpkg --compare-versions` rules: epoch, upstream,
/// revision; `~` sorts before everything, letters before other characters).
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(v: &str) -> (u64, &str, &str) {
        let (epoch, rest) = match v.split_once(':') {
            Some((e, r)) if e.chars().all(|c| c.is_ascii_digit()) => (e.parse().unwrap_or(0), r),
            _ => (0, v),
        };
        match rest.rsplit_once('-') {
            Some((u, r)) => (epoch, u, r),
            None => (epoch, rest, ""),
        }
    }
    fn order(c: Option<u8>) -> i32 {
        match c {
            None => 0,
            Some(b'~') => -1,
            Some(c) if c.is_ascii_alphabetic() => c as i32,
            Some(c) => c as i32 + 256,
        }
    }
    fn part(a: &str, b: &str) -> std::cmp::Ordering {
        let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
        while !a.is_empty() || !b.is_empty() {
            // Non-digit prefix.
            loop {
                let (ca, cb) = (
                    a.first().copied().filter(|c| !c.is_ascii_digit()),
                    b.first().copied().filter(|c| !c.is_ascii_digit()),
                );
                if ca.is_none() && cb.is_none() {
                    break;
                }
                let (oa, ob) = (order(ca), order(cb));
                if oa != ob {
                    return oa.cmp(&ob);
                }
                a = &a[ca.is_some() as usize..];
                b = &b[cb.is_some() as usize..];
            }
            // Digit run.
            let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
            let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
            let na: u128 = std::str::from_utf8(&a[..da]).unwrap().parse().unwrap_or(0);
            let nb: u128 = std::str::from_utf8(&b[..db]).unwrap().parse().unwrap_or(0);
            if na != nb {
                return na.cmp(&nb);
            }
            a = &a[da..];
            b = &b[db..];
        }
        std::cmp::Ordering::Equal
    }
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb).then_with(|| part(ua, ub)).then_with(|| part(ra, rb))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        Err(err[err.len().saturating_sub(6)..].join("\n"))
    }
}

impl Apt {
    /// The configuration for `codename` under `cache` (nothing is fetched yet).
    pub fn new(cache: &Path, codename: &str) -> Apt {
        Apt { codename: codename.into(), dir: cache.join(format!("apt-{codename}")) }
    }

    fn sources(&self) -> String {
        let m = mirror();
        let k = "signed-by=/usr/share/keyrings/debian-archive-keyring.gpg";
        format!("deb [{k}] {m} {c} main\ndeb [{k}] {m} {c}-backports main\n", c = self.codename)
    }

    fn opts(&self) -> Vec<String> {
        let d = self.dir.display();
        let mut o = vec![
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".into(),
            "Dir::Etc::PreferencesParts=/dev/null".into(),
            format!("Dir::Etc::Preferences={d}/preferences"),
            format!("Dir::State={d}/state"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::State::status={d}/status"),
            format!("Dir::Cache={d}/cache"),
            format!("Dir::Cache::Archives={d}/archives"),
            "Acquire::Languages=none".into(),
            "APT::Get::List-Cleanup=false".into(),
        ];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // apt's _apt sandbox user cannot write into a private directory under /root.
            o.push("APT::Sandbox::User=root".into());
        }
        o.into_iter().flat_map(|x| ["-o".to_string(), x]).collect()
    }

    fn prepare(&self) -> Result<(), String> {
        let e = |e: std::io::Error| format!("{}: {e}", self.dir.display());
        for sub in ["lists/partial", "archives/partial", "state", "cache"] {
            std::fs::create_dir_all(self.dir.join(sub)).map_err(e)?;
        }
        for (name, text) in
            [("sources.list", self.sources()), ("status", String::new()), ("preferences", String::new())]
        {
            let p = self.dir.join(name);
            if std::fs::read_to_string(&p).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&p, text).map_err(e)?;
            }
        }
        Ok(())
    }

    /// Whether package lists were fetched before.
    pub fn has_lists(&self) -> bool {
        std::fs::read_dir(self.dir.join("lists"))
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with("_Packages")))
            .unwrap_or(false)
    }

    /// `apt-get update` of this configuration.
    pub fn update(&self) -> Result<(), String> {
        self.prepare()?;
        run(Command::new("apt-get").args(self.opts()).args(["-q", "update"]))
            .map(|_| ())
            .map_err(|e| format!("apt-get update ({} from {}) failed:\n{e}", self.codename, mirror()))
    }

    fn ensure_lists(&self) -> Result<(), String> {
        self.prepare()?;
        if self.has_lists() {
            Ok(())
        } else {
            self.update()
        }
    }

    /// The candidate version of a package (`PKG` or `PKG=VERSION`); `None` if this
    /// release does not have it.
    pub fn show(&self, spec: &str) -> Result<Option<PackageInfo>, String> {
        self.ensure_lists()?;
        match run(Command::new("apt-cache").args(self.opts()).args(["show", "--no-all-versions", spec])) {
            Ok(text) => Ok(parse_show(&text)),
            Err(e)
                if e.contains("No packages found") || e.contains("Unable to locate") || e.contains("Can't select") =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("apt-cache show {spec} ({}): {e}", self.codename)),
        }
    }

    /// Every version of a package in this release and its backports.
    pub fn versions(&self, package: &str) -> Result<Vec<String>, String> {
        self.ensure_lists()?;
        run(Command::new("apt-cache").args(self.opts()).args(["madison", package]))
            .map(|t| parse_madison(&t))
            .map_err(|e| format!("apt-cache madison {package} ({}): {e}", self.codename))
    }

    /// Download a package (into `into`, unless a file of that name is there already);
    /// its path.
    pub fn download(&self, p: &PackageInfo, into: &Path) -> Result<PathBuf, String> {
        let path = into.join(p.deb_name());
        if path.is_file() {
            return Ok(path);
        }
        std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
        let spec = format!("{}={}", p.package, p.version);
        let mut tries = 0;
        loop {
            let r = run(Command::new("apt-get").args(self.opts()).args(["-q", "download", &spec]).current_dir(into));
            match r {
                Ok(_) if path.is_file() => return Ok(path),
                Ok(_) => return Err(format!("apt-get download {spec} did not produce {}", path.display())),
                // Stale lists (the archive moved on): refresh once.
                Err(_) if tries == 0 => {
                    tries += 1;
                    self.update()?;
                }
                Err(e) => return Err(format!("downloading {spec} ({} from {}) failed:\n{e}", self.codename, mirror())),
            }
        }
    }
}

/// Unpack a `.deb` into `dir` (created).
pub fn unpack(deb: &Path, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir))
        .map(|_| ())
        .map_err(|e| format!("dpkg-deb -x {}: {e}", deb.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn show_output() {
        let text = "Package: linux-image-amd64\nSource: linux-signed-amd64 (6.12.57+deb13)\nVersion: 6.12.57-1\n\
                    Architecture: amd64\nDepends: linux-image-6.12.57+deb13-amd64 (= 6.12.57-1)\nDescription: x\n\n\
                    Package: linux-image-amd64\nVersion: 6.12.1-1\n";
        let p = parse_show(text).unwrap();
        assert_eq!(p.version, "6.12.57-1");
        assert_eq!(p.depends, "linux-image-6.12.57+deb13-amd64 (= 6.12.57-1)");
        assert_eq!(p.deb_name(), "linux-image-amd64_6.12.57-1_amd64.deb");
        let epoch = PackageInfo {
            package: "busybox-static".into(),
            version: "1:1.35.0-4".into(),
            architecture: "amd64".into(),
            depends: String::new(),
        };
        assert_eq!(epoch.deb_name(), "busybox-static_1%3a1.35.0-4_amd64.deb");
        assert_eq!(parse_show(""), None);
    }

    #[test]
    fn madison_output() {
        let text =
            "  iproute2 | 6.15.0-1~bpo12+1 | http://deb.debian.org/debian bookworm-backports/main amd64 Packages\n\
                      iproute2 |    6.1.0-3 | http://deb.debian.org/debian bookworm/main amd64 Packages\n";
        assert_eq!(parse_madison(text), ["6.15.0-1~bpo12+1", "6.1.0-3"]);
    }

    #[test]
    fn debian_version_order() {
        assert_eq!(compare_versions("6.15.0-1~bpo12+1", "6.1.0-3"), Greater);
        assert_eq!(compare_versions("6.15.0-1~bpo12+1", "6.15.0-1"), Less);
        assert_eq!(compare_versions("1:1.0", "2.0"), Greater);
        assert_eq!(compare_versions("6.12.57-1", "6.12.107-1"), Less);
        assert_eq!(compare_versions("1.0a", "1.0+"), Less);
        assert_eq!(compare_versions("1.0", "1.0"), Equal);
        assert_eq!(compare_versions("6.1.0-37", "6.1.0-9"), Greater);
    }
}

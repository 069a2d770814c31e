//! The qemu side: which accelerator, the command line, and reading the console.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::wire::RESULT_PORT;

/// How the guest's CPUs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation (a VMX/SVM KVM).
    Kvm,
    /// qemu's software emulation.
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// The accelerator: `QDL_VM_ACCEL` (kvm|tcg) if set, else KVM only when /dev/kvm is
/// usable *and* backed by kvm_intel or kvm_amd. Other KVM backends (this CI machine's
/// kvm_pvm, a PVM host nested in Firecracker) create VMs but cannot run a stock kernel:
/// it crawls through KVM's instruction emulator and dies on CMPXCHG16B/XRSTOR/INT3
/// (found while prototyping the kernel lab).
pub fn pick_accel(env: Option<&str>, kvm_usable: bool, vmx_or_svm: bool) -> Result<Accel, String> {
    match env.map(str::trim) {
        Some("kvm") => Ok(Accel::Kvm),
        Some("tcg") => Ok(Accel::Tcg),
        Some(x) if !x.is_empty() => Err(format!("QDL_VM_ACCEL={x}: use kvm or tcg")),
        _ => Ok(if kvm_usable && vmx_or_svm { Accel::Kvm } else { Accel::Tcg }),
    }
}

/// [`pick_accel`] on this machine.
pub fn detect_accel() -> Result<Accel, String> {
    let kvm_usable = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
    let vmx_or_svm = Path::new("/sys/module/kvm_intel").exists() || Path::new("/sys/module/kvm_amd").exists();
    pick_accel(std::env::var("QDL_VM_ACCEL").ok().as_deref(), kvm_usable, vmx_or_svm)
}

/// What to boot and how.
#[derive(Debug, Clone)]
pub struct QemuSpec {
    pub accel: Accel,
    pub cpus: u32,
    pub memory_mib: u32,
    /// An ELF vmlinux (entered through its PVH note) or a bzImage.
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Host file behind the guest's result port.
    pub result: PathBuf,
    pub append: String,
}

/// The kernel command line. `rdinit` is the program the guest runs as init, and words
/// after `--` are its arguments.
///
/// Besides the console and panic handling (`panic=-1`: a panic reboots, which ends qemu
/// under `-no-reboot`), these skip boot work worth a second or more under TCG: crypto
/// self-tests, initcalls nothing here uses (the KDF self-test, the jitter entropy source,
/// encrypted/trusted keys, CRC self-tests, loading the module-signing certificates — Debian's
/// modules still load, unverified), the TSC watchdog (TCG's TSC is the host clock),
/// CPU-bug mitigations and KASLR. `extra` (`QDL_VM_APPEND`) comes after `rdinit`, so it
/// can override anything.
pub fn kernel_cmdline(init: &str, args: &[&str], extra: &str) -> String {
    let mut c = String::from(
        "console=ttyS0 quiet loglevel=3 panic=-1 nokaslr mitigations=off cryptomgr.notests tsc=reliable \
         no_timer_check 8250.nr_uarts=1 i8042.noaux i8042.nokbd \
         initcall_blacklist=crypto_kdf108_init,jent_mod_init,init_encrypted,init_trusted,crc64_rocksoft_mod_init,\
         crc_t10dif_mod_init,load_system_certificate_list",
    );
    c.push_str(&format!(" rdinit={init}"));
    if !extra.trim().is_empty() {
        c.push(' ');
        c.push_str(extra.trim());
    }
    if !args.is_empty() {
        c.push_str(" --");
        for a in args {
            c.push(' ');
            c.push_str(a);
        }
    }
    c
}

/// qemu's arguments (after the program name).
pub fn qemu_args(s: &QemuSpec) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |x: &str| a.push(x.to_string());
    push("-machine");
    push("pc");
    match s.accel {
        Accel::Kvm => {
            push("-accel");
            push("kvm");
            push("-cpu");
            push("host");
        }
        Accel::Tcg => {
            push("-accel");
            push("tcg,thread=multi");
            push("-cpu");
            push("max");
        }
    }
    for x in ["-smp", &s.cpus.to_string(), "-m", &format!("{}M", s.memory_mib)] {
        push(x);
    }
    for x in ["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio"] {
        push(x);
    }
    push("-device");
    push("virtio-serial-pci,id=qdlser");
    push("-chardev");
    push(&format!("file,id=qdlres,path={}", s.result.display()));
    push("-device");
    push(&format!("virtserialport,bus=qdlser.0,chardev=qdlres,name={RESULT_PORT}"));
    push("-kernel");
    push(&s.kernel.display().to_string());
    push("-initrd");
    push(&s.initrd.display().to_string());
    push("-append");
    push(&s.append);
    a
}

/// Follows a growing console log file, line by line.
pub struct Console {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    /// Everything read so far.
    pub text: String,
}

impl Console {
    pub fn new(path: PathBuf) -> Console {
        Console { path, offset: 0, partial: Vec::new(), text: String::new() }
    }

    /// Complete lines that arrived since the last call.
    pub fn poll(&mut self) -> Vec<String> {
        let mut buf = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(self.offset)).is_ok() {
                let _ = f.read_to_end(&mut buf);
            }
        }
        self.offset += buf.len() as u64;
        self.feed(&buf)
    }

    /// Take bytes, return the complete lines among them (and what came before).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.partial.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let s = String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']).to_string();
            self.text.push_str(&s);
            self.text.push('\n');
            lines.push(s);
        }
        lines
    }

    /// The text including an unterminated last line.
    pub fn all(&self) -> String {
        let mut t = self.text.clone();
        t.push_str(&String::from_utf8_lossy(&self.partial));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerators() {
        assert_eq!(pick_accel(None, true, true), Ok(Accel::Kvm));
        // This machine: /dev/kvm works but is kvm_pvm: a stock kernel cannot run there.
        assert_eq!(pick_accel(None, true, false), Ok(Accel::Tcg));
        assert_eq!(pick_accel(None, false, true), Ok(Accel::Tcg));
        assert_eq!(pick_accel(Some("kvm"), false, false), Ok(Accel::Kvm));
        assert_eq!(pick_accel(Some("tcg"), true, true), Ok(Accel::Tcg));
        assert_eq!(pick_accel(Some(""), true, true), Ok(Accel::Kvm));
        assert!(pick_accel(Some("hvf"), true, true).is_err());
    }

    #[test]
    fn command_lines() {
        let c = kernel_cmdline("/usr/bin/qdisc-lab", &["vm-guest"], "");
        assert!(c.starts_with("console=ttyS0 "), "{c}");
        assert!(c.contains(" panic=-1 "), "{c}");
        assert!(c.ends_with(" rdinit=/usr/bin/qdisc-lab -- vm-guest"), "{c}");
        assert!(c.contains(",crc_t10dif_mod_init,"), "{c}");
        let d = kernel_cmdline("/init", &["x"], " ignore_loglevel ");
        assert!(d.ends_with(" rdinit=/init ignore_loglevel -- x"), "{d}");
        let spec = QemuSpec {
            accel: Accel::Tcg,
            cpus: 2,
            memory_mib: 1024,
            kernel: "/c/vmlinux".into(),
            initrd: "/r/initrd".into(),
            result: "/r/result".into(),
            append: "console=ttyS0".into(),
        };
        let a = qemu_args(&spec).join(" ");
        assert_eq!(
            a,
            "-machine pc -accel tcg,thread=multi -cpu max -smp 2 -m 1024M -nodefaults -no-user-config -display none \
             -no-reboot -serial stdio -device virtio-serial-pci,id=qdlser -chardev file,id=qdlres,path=/r/result \
             -device virtserialport,bus=qdlser.0,chardev=qdlres,name=org.qdisc-lab.result -kernel /c/vmlinux \
             -initrd /r/initrd -append console=ttyS0"
        );
        let kvm = qemu_args(&QemuSpec { accel: Accel::Kvm, ..spec }).join(" ");
        assert!(kvm.contains("-accel kvm -cpu host"), "{kvm}");
    }

    #[test]
    fn console_lines_arrive_whole() {
        let mut c = Console::new("/nonexistent".into());
        assert_eq!(c.feed(b"[ 1.0] a\r\n@@QDL:PH"), ["[ 1.0] a"]);
        assert_eq!(c.feed(b"ASE setup\r\n"), ["@@QDL:PHASE setup"]);
        assert_eq!(c.feed(b"tail"), Vec::<String>::new());
        assert_eq!(c.all(), "[ 1.0] a\n@@QDL:PHASE setup\ntail");
        assert!(c.poll().is_empty());
    }
}

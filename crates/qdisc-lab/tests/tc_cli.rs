//! `qdisc-lab tc --sysctl KEY=VALUE`: devices brought up as on a host booted with the
//! sysctl, and sysctl's own messages and exit status (procps-ng 4: 1) for what it
//! refuses. (What the engine prints is checked byte for byte by crates/qdisc's goldens.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");

fn tc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).arg("tc").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const FQ_CODEL: &str =
    "limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 ";

#[test]
fn default_qdisc_at_boot() {
    let (code, out, err) = tc(&[
        "--dev",
        "eth0",
        "--dev",
        "eth1,txqueues=2",
        "--dev",
        "veth0,kind=veth",
        "--sysctl",
        "net.core.default_qdisc=fq_codel",
        "qdisc",
        "show",
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        format!(
            "qdisc fq_codel 0: dev eth0 root refcnt 2 {FQ_CODEL}\nqdisc mq 0: dev eth1 root \n\
             qdisc fq_codel 0: dev eth1 parent :2 {FQ_CODEL}\nqdisc fq_codel 0: dev eth1 parent :1 {FQ_CODEL}\n\
             qdisc noqueue 0: dev veth0 root refcnt 2 \n"
        )
    );
    // Repeated: applied in order, the last one wins; a deleted root comes back as it.
    let dir = std::env::temp_dir().join(format!("qdl-tc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let batch = dir.join("b.tc");
    std::fs::write(&batch, "qdisc add dev eth0 root handle 1: bfifo\nqdisc del dev eth0 root\nqdisc show\n").unwrap();
    let (code, out, err) = tc(&[
        "--sysctl",
        "net.core.default_qdisc=sfq",
        "--sysctl",
        "net/core/default_qdisc = pfifo",
        "-batch",
        batch.to_str().unwrap(),
    ]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "qdisc pfifo 0: dev eth0 root refcnt 2 limit 1000p\n", ""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_sysctl_refuses_stops_before_tc_runs() {
    for (setting, msg) in [
        ("net.core.foo=1", "sysctl: cannot stat /proc/sys/net/core/foo: No such file or directory\n"),
        ("net.ipv4.tcp_ecn=1", "sysctl: cannot stat /proc/sys/net/ipv4/tcp_ecn: No such file or directory\n"),
        (
            "net.core.default_qdisc=nosuchkind",
            "sysctl: setting key \"net.core.default_qdisc\": No such file or directory\n",
        ),
        ("net.core.default_qdisc", "sysctl: command line(0): invalid syntax, continuing...\n"),
    ] {
        let (code, out, err) = tc(&["--sysctl", setting, "qdisc", "show"]);
        assert_eq!((code, out.as_str(), err.as_str()), (1, "", msg), "--sysctl {setting}");
    }
}

#[test]
fn help_documents_the_flag() {
    let out = Command::new(BIN).args(["help", "tc"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--sysctl <KEY=VALUE>") && help.contains("net.core.default_qdisc=KIND"), "{help}");
}

/// Found by fuzzing: a rate, size or time that is not a number and whose first three
/// bytes end inside a character panicked (tc's strtod looked for "inf" by slicing);
/// now tc's own message.
#[test]
fn values_with_multibyte_characters_are_tc_errors() {
    for (opt, v) in [("rate", "x\u{fffd}"), ("burst", "ññ"), ("latency", "ñññ")] {
        let mut args =
            vec!["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1mbit", "burst", "10k", "latency", "50ms"];
        let i = args.iter().position(|a| *a == opt).unwrap() + 1;
        args[i] = v;
        let (code, out, err) = tc(&args);
        assert_eq!((code, out.as_str(), err), (1, "", format!("tbf: illegal value for \"{opt}\": \"{v}\"\n")), "{opt}");
    }
}

/// Found by fuzzing: `--dev` took names the kernel's dev_valid_name refuses (':',
/// tabs, ".."; and a NUL, which no argv carries but a library caller can).
#[test]
fn dev_names_the_kernel_refuses() {
    assert!(qdisc::tree::DevSpec::parse("a\0b").is_err());
    for name in ["a:b", "a\tb", "a\u{b}b", ".", "..", "a/b", "a=b", "", "abcdefghijklmnop"] {
        let (code, out, err) = tc(&["--dev", name, "qdisc", "show"]);
        assert_eq!(
            (code, out.as_str(), err),
            (
                2,
                "",
                format!(
                    "qdisc-lab: --dev {name}: invalid device name {name:?} (1-15 bytes, not . or .., no '/', ':', '=', whitespace or NUL)\n"
                )
            ),
            "{name:?}"
        );
    }
    let (code, out, _) = tc(&["--dev", "a.b-c_d@e", "qdisc", "show"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "qdisc pfifo_fast 0: dev a.b-c_d@e root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n")
    );
}

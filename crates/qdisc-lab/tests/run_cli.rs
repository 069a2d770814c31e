//! `qdisc-lab run`: exit statuses and messages of what cannot run (the host backend's
//! end-to-end runs are tested in crates/qdisc-kernel/tests/host_backend.rs).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");
const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).arg("run").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn kernel_choices_are_checked_before_anything_runs() {
    let scenario = format!("{SCENARIOS}/netem-20ms.toml");
    let (code, out, err) = run(&["--backend", "vm", "--kernel", "6.13", &scenario]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "qdisc-lab run: --kernel \"6.13\": use 6.12 (Debian 13), 6.1 (Debian 12), a package name like \
         linux-image-6.12.57+deb13-amd64, or a .deb file\n"
    );
    let (code, _, err) = run(&["--backend", "host", "--kernel", "6.12", &scenario]);
    assert_eq!(code, 2);
    assert_eq!(err, "qdisc-lab run: --kernel chooses the kernel of --backend vm\n");
}

#[test]
fn an_invalid_scenario_is_named_precisely() {
    let dir = std::env::temp_dir().join(format!("qdl-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "duration = \"10s\"\n[[host]]\nname = \"a\"\n[[traffic]]\nkind = \"tcp\"\nfrom = \"a\"\nto = \"z\"\n",
    )
    .unwrap();
    let (code, _, err) = run(&[f.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 2);
    assert_eq!(err, format!("qdisc-lab run: {}:7:6: traffic[0].to: unknown host \"z\" (hosts: a)\n", f.display()));
}

#[test]
fn the_host_backend_refuses_fq_on_a_kernel_without_it() {
    if std::env::var_os("QDISC_LAB_NO_KERNEL").is_some() {
        eprintln!("skipped: QDISC_LAB_NO_KERNEL is set");
        return;
    }
    let (code, out, err) = run(&["--backend", "host", "../../scenarios/fq-flows-plimit.toml"]);
    if code == 0 {
        eprintln!("this kernel has sch_fq: nothing to check");
        return;
    }
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("qdisc-lab run: the running kernel ("), "{err}");
    assert!(err.contains("no sch_fq, needed by:\n    ../../scenarios/fq-flows-plimit.toml:24: tc.sender: qdisc add dev eth0 root handle 1: fq maxrate 20mbit flow_limit 10\n"), "{err}");
    assert!(err.ends_with("Run it on a kernel that has them: --backend vm (a Debian kernel under qemu).\n"), "{err}");
}

//! Golden tests: every tc command captured from a real kernel with iproute2 6.15
//! (goldens/kernel/*.json, made by scripts/capture-goldens.sh) is replayed through
//! our tc, and stdout, stderr and the exit status must match byte for byte.

use std::path::PathBuf;

use qdisc::tc::{makeargs, Tc};
use qdisc::tree::DevSpec;
use qdisc::{Dequeued, Packet};
use serde_json::Value;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../goldens/kernel")
}

/// Cases whose golden documents something this engine deliberately does not do yet,
/// each with the reason. Every other case must match exactly.
const KNOWN_GAPS: &[(&str, &str)] = &[(
    "nokernel-prio",
    "captured on a kernel without sch_prio (it documents that kernel's refusal); prio is checked by tdc and unit tests",
)];

/// `# send DEV LEN COUNT` (capture-goldens.sh): COUNT frames of LEN bytes through the
/// device, which — like the capture's ifb — transmits whatever its qdisc releases at once.
fn send(tc: &mut Tc, words: &[&str]) {
    let [dev, len, count] = words else { panic!("bad send directive {words:?}") };
    let (len, count): (u32, u64) = (len.parse().unwrap(), count.parse().unwrap());
    let now = tc.now;
    let d = tc.device_mut(dev).expect("send to a declared device");
    for id in 0..count {
        d.enqueue(Packet::new(id, len), now);
        while let Dequeued::Packet(_) = d.dequeue(now) {}
    }
}

#[test]
fn kernel_goldens_match_byte_for_byte() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("goldens/kernel exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "expected the captured goldens, found {}", files.len());
    let mut failures = Vec::new();
    let (mut steps, mut skipped) = (0, 0);
    for f in &files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let name = case["case"].as_str().unwrap();
        if let Some((_, why)) = KNOWN_GAPS.iter().find(|(n, _)| *n == name) {
            eprintln!("skip {name}: {why}");
            skipped += 1;
            continue;
        }
        let specs: Vec<DevSpec> =
            case["devices"].as_array().unwrap().iter().map(|d| DevSpec::parse(d.as_str().unwrap()).unwrap()).collect();
        let mut tc = Tc::new(&specs);
        for step in case["steps"].as_array().unwrap() {
            let cmd = step["cmd"].as_str().unwrap();
            if let Some(rest) = cmd.strip_prefix("# send ") {
                send(&mut tc, &rest.split_whitespace().collect::<Vec<_>>());
                continue;
            }
            let got = tc.run(&makeargs(cmd));
            steps += 1;
            let want = (
                step["stdout"].as_str().unwrap(),
                step["stderr"].as_str().unwrap(),
                step["exit"].as_i64().unwrap() as i32,
            );
            if (got.stdout.as_str(), got.stderr.as_str(), got.code) != want {
                failures.push(format!(
                    "{name}: tc {cmd}\n  want exit {} stdout {:?} stderr {:?}\n  got  exit {} stdout {:?} stderr {:?}",
                    want.2, want.0, want.1, got.code, got.stdout, got.stderr
                ));
                break; // later steps of a case depend on earlier ones
            }
        }
    }
    eprintln!(
        "goldens: {} cases, {} steps checked, {} skipped, {} failed",
        files.len(),
        steps,
        skipped,
        failures.len()
    );
    assert!(failures.is_empty(), "{} golden case(s) differ:\n{}", failures.len(), failures.join("\n"));
}

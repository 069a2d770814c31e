//! tc parity found by the differential fuzzer (tests/tc_fuzz.rs, docs/tc-parity.md):
//! each case is what iproute2 6.15's tc printed on a 6.18 kernel for a veth made by
//! `ip link add … type veth` on a 2-CPU host (2 tx queues, 1 in use), byte for byte
//! with its exit status, and `qdisc-lab tc` must print the same. A batch file's path
//! shows in "Command failed FILE:N" lines; it is written `{FILE}` here.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qdisc-lab");
const DEV: &str = "eth0,kind=veth,txqueues=2,realtxqueues=1";

/// Run `qdisc-lab tc` with `args`; `B` in them is replaced by a file holding `batch`.
fn check(name: &str, args: &[&str], batch: Option<&[u8]>, want: (i32, &str, &str)) {
    let dir = std::env::temp_dir().join(format!("qdl-tc-parity-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("b.tc");
    let path = file.to_str().unwrap().to_string();
    if let Some(b) = batch {
        std::fs::write(&file, b).unwrap();
    }
    let args: Vec<&str> = args.iter().map(|a| if *a == "B" { path.as_str() } else { a }).collect();
    let out = Command::new(BIN).args(["tc", "--kernel", "6.18", "--dev", DEV]).args(&args).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let want = (want.0, want.1.replace("{FILE}", &path), want.2.replace("{FILE}", &path));
    assert_eq!(got, want, "{name}: tc {args:?}");
}

#[test]
fn help_exits_0() {
    check(
        "help_exits_0",
        &["help"],
        None,
        (0, "", "Usage:\ttc [ OPTIONS ] OBJECT { COMMAND | help }\n\ttc [-force] -batch filename\nwhere  OBJECT := { qdisc | class | filter | chain |\n\t\t    action | monitor | exec }\n       OPTIONS := { -V[ersion] | -s[tatistics] | -d[etails] | -r[aw] |\n\t\t    -o[neline] | -j[son] | -p[retty] | -c[olor]\n\t\t    -b[atch] [filename] | -n[etns] name | -N[umeric] |\n\t\t     -nm | -nam[es] | { -cf | -conf } path\n\t\t     -br[ief] | -echo }\n"),
    );
}

#[test]
fn dash_h_exits_0() {
    check(
        "dash_h_exits_0",
        &["-h"],
        None,
        (0, "", "Usage:\ttc [ OPTIONS ] OBJECT { COMMAND | help }\n\ttc [-force] -batch filename\nwhere  OBJECT := { qdisc | class | filter | chain |\n\t\t    action | monitor | exec }\n       OPTIONS := { -V[ersion] | -s[tatistics] | -d[etails] | -r[aw] |\n\t\t    -o[neline] | -j[son] | -p[retty] | -c[olor]\n\t\t    -b[atch] [filename] | -n[etns] name | -N[umeric] |\n\t\t     -nm | -nam[es] | { -cf | -conf } path\n\t\t     -br[ief] | -echo }\n"),
    );
}

#[test]
fn no_object_exits_0() {
    check(
        "no_object_exits_0",
        &[],
        None,
        (0, "", "Usage:\ttc [ OPTIONS ] OBJECT { COMMAND | help }\n\ttc [-force] -batch filename\nwhere  OBJECT := { qdisc | class | filter | chain |\n\t\t    action | monitor | exec }\n       OPTIONS := { -V[ersion] | -s[tatistics] | -d[etails] | -r[aw] |\n\t\t    -o[neline] | -j[son] | -p[retty] | -c[olor]\n\t\t    -b[atch] [filename] | -n[etns] name | -N[umeric] |\n\t\t     -nm | -nam[es] | { -cf | -conf } path\n\t\t     -br[ief] | -echo }\n"),
    );
}

#[test]
fn dash_is_stats() {
    check(
        "dash_is_stats",
        &["-", "qdisc", "show", "dev", "eth0"],
        None,
        (0, "qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n", ""),
    );
}

#[test]
fn c_is_conf() {
    check("c_is_conf", &["-c", "qdisc", "show"], None, (255, "", "Object \"show\" is unknown, try \"tc help\".\n"));
}

#[test]
fn netns_missing() {
    check(
        "netns_missing",
        &["-n", "nosuchns", "qdisc", "show"],
        None,
        (255, "", "Cannot open network namespace \"nosuchns\": No such file or directory\n"),
    );
}

#[test]
fn batch_needs_file() {
    check("batch_needs_file", &["-b"], None, (255, "", "Error: argument \"batch file\" is required\n"));
}

#[test]
fn double_dash_unknown() {
    check(
        "double_dash_unknown",
        &["--stats", "qdisc", "show"],
        None,
        (255, "", "Option \"--stats\" is unknown, try \"tc -help\".\n"),
    );
}

#[test]
fn color_prefix() {
    check(
        "color_prefix",
        &["-col", "qdisc", "show", "dev", "eth0"],
        None,
        (0, "qdisc noqueue 0: root refcnt 2 \n", ""),
    );
}

#[test]
fn echo_exact() {
    check("echo_exact", &["-e", "qdisc", "show"], None, (255, "", "Option \"-e\" is unknown, try \"tc -help\".\n"));
}

#[test]
fn invarg_ends_forced_batch() {
    check(
        "invarg_ends_forced_batch",
        &["-force", "-batch", "B"],
        Some(b"qdisc foo\nqdisc add dev eth0 root handle 1: handle 2: pfifo\nqdisc show dev eth0\n"),
        (255, "", "Command \"foo\" is unknown, try \"tc qdisc help\".\nCommand failed {FILE}:1\nError: duplicate \"handle\": \"handle\" is the second value.\n"),
    );
}

#[test]
fn incomplete_ends_batch() {
    check(
        "incomplete_ends_batch",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle\nqdisc show dev eth0\n"),
        (255, "", "Command line is not complete. Try option \"help\"\n"),
    );
}

#[test]
fn tokenizer() {
    check(
        "tokenizer",
        &["-force", "-batch", "B"],
        Some(b"qdisc\tshow dev eth0\r\nqdisc show dev eth0#x\nqdisc sh\"ow\" dev eth0\nqdisc \"sh\"ow dev eth0\nqdisc\xc2\xa0show dev eth0\nqdisc \\\nshow dev eth0\nqdisc show dev eth0\x00 junk\n# caf\xe9\nqdisc show dev eth0\n"),
        (1, "qdisc noqueue 0: root refcnt 2 \nqdisc noqueue 0: root refcnt 2 \nqdisc noqueue 0: root refcnt 2 \nqdisc noqueue 0: root refcnt 2 \nqdisc noqueue 0: root refcnt 2 \n", "Command \"sh\"ow\"\" is unknown, try \"tc qdisc help\".\nCommand failed {FILE}:3\nWhat is \"ow\"? Try \"tc qdisc help\".\nCommand failed {FILE}:4\nObject \"qdisc show\" is unknown, try \"tc help\".\nCommand failed {FILE}:5\n"),
    );
}

#[test]
fn missing_continuation() {
    check(
        "missing_continuation",
        &["-batch", "B"],
        Some(b"qdisc show dev eth0\nqdisc show dev eth0 \\\n"),
        (0, "qdisc noqueue 0: root refcnt 2 \n", "Missing continuation line\n"),
    );
}

#[test]
fn unterminated_quote() {
    check(
        "unterminated_quote",
        &["-force", "-batch", "B"],
        Some(b"qdisc foo\nqdisc show dev \"eth0\nqdisc show dev eth0\n"),
        (
            1,
            "",
            "Command \"foo\" is unknown, try \"tc qdisc help\".\nCommand failed {FILE}:1\nUnterminated quoted string\n",
        ),
    );
}

#[test]
fn qdisc_show_one_id() {
    check(
        "qdisc_show_one_id",
        &["-force", "-batch", "B"],
        Some(b"qdisc show dev eth0 root root\n"),
        (255, "", "Error: argument \"root\" is wrong: parent is already specified\n"),
    );
}

#[test]
fn qdisc_show_handle_then_root() {
    check(
        "qdisc_show_handle_then_root",
        &["qdisc", "show", "dev", "eth0", "handle", "1:", "root"],
        None,
        (255, "", "Error: argument \"root\" is wrong: handle is already specified\n"),
    );
}

#[test]
fn qdisc_show_help_lists() {
    check(
        "qdisc_show_help_lists",
        &["qdisc", "show", "dev", "eth0", "help"],
        None,
        (0, "qdisc noqueue 0: root refcnt 2 \n", "Usage: tc qdisc [ add | del | replace | change | show ] dev STRING\n       [ handle QHANDLE ] [ root | ingress | clsact | parent CLASSID ]\n       [ estimator INTERVAL TIME_CONSTANT ]\n       [ stab [ help | STAB_OPTIONS] ]\n       [ ingress_block BLOCK_INDEX ] [ egress_block BLOCK_INDEX ]\n       [ [ QDISC_KIND ] [ help | OPTIONS ] ]\n\n       tc qdisc { show | list } [ dev STRING ] [ QDISC_ID ] [ invisible ]\nWhere:\nQDISC_KIND := { [p|b]fifo | tbf | prio | red | etc. }\nOPTIONS := ... try tc qdisc add <desired QDISC_KIND> help\nSTAB_OPTIONS := ... try tc qdisc add stab help\nQDISC_ID := { root | ingress | handle QHANDLE | parent CLASSID }\n"),
    );
}

#[test]
fn qdisc_show_filters_persist_in_batch() {
    check(
        "qdisc_show_filters_persist_in_batch",
        &["-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: tbf rate 1mbit burst 10k latency 50ms\nqdisc add dev eth0 parent 1:1 handle 10: bfifo limit 10k\nqdisc show dev eth0 root\nqdisc show\nqdisc show handle 10:\nqdisc show\n"),
        (255, "qdisc tbf 1: root refcnt 3 rate 1Mbit burst 10Kb lat 50ms \nqdisc tbf 1: root refcnt 3 rate 1Mbit burst 10Kb lat 50ms \n", "Error: argument \"handle\" is wrong: parent is already specified\n"),
    );
}

#[test]
fn qdisc_show_statics_refuse_a_second_id() {
    check(
        "qdisc_show_statics_refuse_a_second_id",
        &["-force", "-batch", "B"],
        Some(b"qdisc show dev eth0 root\nqdisc show dev eth0 root\nqdisc show dev eth0 parent 0:\n"),
        (255, "qdisc noqueue 0: root refcnt 2 \n", "Error: argument \"root\" is wrong: parent is already specified\n"),
    );
}

#[test]
fn class_show_rules() {
    check(
        "class_show_rules",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: htb\nclass add dev eth0 parent 1: classid 1:1 htb rate 10mbit\nclass show\nclass show dev eth0 root root\nclass show dev eth0 foo\nclass show dev eth0 help\n"),
        (1, "class htb 1:1 root prio 0 rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b\n", "Error: \"root\" is duplicate parent ID\nCommand failed {FILE}:4\nWhat is \"foo\"? Try \"tc class help\".\nCommand failed {FILE}:5\nUsage: tc class [ add | del | change | replace | show ] dev STRING\n       [ classid CLASSID ] [ root | parent CLASSID ]\n       [ [ QDISC_KIND ] [ help | OPTIONS ] ]\n\n       tc class show [ dev STRING ] [ root | parent CLASSID ]\nWhere:\nQDISC_KIND := { prio | etc. }\nOPTIONS := ... try tc class add <desired QDISC_KIND> help\n"),
    );
}

#[test]
fn class_show_duplicates_exit() {
    check(
        "class_show_duplicates_exit",
        &["class", "show", "dev", "eth0", "parent", "1:", "parent", "1:"],
        None,
        (255, "", "Error: duplicate \"parent\": \"parent\" is the second value.\n"),
    );
}

#[test]
fn clsact() {
    check(
        "clsact",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 clsact handle 5:\nqdisc add dev eth0 clsact\nqdisc add dev eth0 ingress\nfilter add dev eth0 egress prio 3 u32 match u32 0 0 classid 1:1\nfilter add dev eth0 ingress prio 3 u32 match ip src 10.0.0.0/8\nfilter add dev eth0 parent ffff: prio 4 u32 match u32 0 0\nqdisc show dev eth0\nfilter show dev eth0 ingress\nfilter show dev eth0 egress\nfilter show dev eth0 parent ffff:\nqdisc add dev eth0 parent ffff:fff2 handle 5: pfifo\nqdisc del dev eth0 parent ffff:fff3\nqdisc show dev eth0\n"),
        (1, "qdisc noqueue 0: root refcnt 2 \nqdisc clsact ffff: parent ffff:fff1 \nfilter protocol all pref 3 u32 chain 0 \nfilter protocol all pref 3 u32 chain 0 fh 801: ht divisor 1 \nfilter protocol all pref 3 u32 chain 0 fh 801::800 order 2048 key ht 801 bkt 0 not_in_hw \n  match 0a000000/ff000000 at 12\nfilter protocol all pref 3 u32 chain 0 fh 800: ht divisor 1 \nfilter protocol all pref 3 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 00000000/00000000 at 0\nfilter protocol all pref 3 u32 chain 0 \nfilter protocol all pref 3 u32 chain 0 fh 801: ht divisor 1 \nfilter protocol all pref 3 u32 chain 0 fh 801::800 order 2048 key ht 801 bkt 0 not_in_hw \n  match 0a000000/ff000000 at 12\nfilter protocol all pref 3 u32 chain 0 fh 800: ht divisor 1 \nfilter protocol all pref 3 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 00000000/00000000 at 0\nqdisc noqueue 0: root refcnt 2 \n", "What is \"handle\"?\nUsage: ... clsact\nCommand failed {FILE}:1\nError: Exclusivity flag on, cannot modify.\nCommand failed {FILE}:3\nRTNETLINK answers: Invalid argument\nWe have an error talking to the kernel\nCommand failed {FILE}:6\nError: Cannot add children to ingress/clsact qdisc.\nCommand failed {FILE}:11\n"),
    );
}

#[test]
fn ingress_filters_and_queue() {
    check(
        "ingress_filters_and_queue",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 ingress\nfilter add dev eth0 parent ffff: protocol ip prio 2 u32 match ip src 10.0.0.0/8 flowid 1:1\nfilter show dev eth0 ingress\nqdisc change dev eth0 parent ffff: noqueue\nqdisc del dev eth0 ingress\nqdisc del dev eth0 ingress\nqdisc del dev eth0 parent ffff:fff1 pfifo\nqdisc del dev eth0 parent ffff:fff1\n"),
        (1, "filter parent ffff: protocol ip pref 2 u32 chain 0 \nfilter parent ffff: protocol ip pref 2 u32 chain 0 fh 800: ht divisor 1 \nfilter parent ffff: protocol ip pref 2 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 0a000000/ff000000 at 12\n", "Error: Cannot add children to ingress/clsact qdisc.\nCommand failed {FILE}:4\nError: Invalid handle.\nCommand failed {FILE}:6\nError: Invalid qdisc name: must match existing qdisc.\nCommand failed {FILE}:7\nError: Cannot delete qdisc with handle of zero.\nCommand failed {FILE}:8\n"),
    );
}

#[test]
fn ingress_parent_reserved() {
    check(
        "ingress_parent_reserved",
        &["qdisc", "add", "dev", "eth0", "parent", "ffff:fff1", "handle", "1:", "pfifo"],
        None,
        (2, "", "Error: Specified parent ID is reserved for ingress and clsact Qdiscs.\n"),
    );
}

#[test]
fn ingress_block_value() {
    check(
        "ingress_block_value",
        &["qdisc", "add", "dev", "eth0", "egress", "handle", "1:", "pfifo"],
        None,
        (255, "", "Error: argument \"handle\" is wrong: invalid egress block index value\n"),
    );
}

#[test]
fn veth_queues() {
    check(
        "veth_queues",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: mq\nqdisc show dev eth0\nclass show dev eth0\nqdisc del dev eth0 root\nqdisc add dev eth0 root handle 1: pfifo_fast\nqdisc show dev eth0\n"),
        (0, "qdisc mq 1: root \nqdisc pfifo_fast 0: parent 1:1 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\nclass mq 1:1 root \nclass mq 1:2 root \nqdisc pfifo_fast 1: root refcnt 3 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n", ""),
    );
}

#[test]
fn deep_nesting() {
    check(
        "deep_nesting",
        &["-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 1:1 handle 20: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 20:1 handle 21: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 21:1 handle 22: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 22:1 handle 23: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 23:1 handle 24: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 24:1 handle 25: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 25:1 handle 26: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 26:1 handle 27: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 27:1 handle 28: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 28:1 handle 29: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 29:1 handle 2a: tbf rate 1mbit burst 10k latency 10ms\nqdisc add dev eth0 parent 2a:1 handle 2b: tbf rate 1mbit burst 10k latency 10ms\nqdisc show dev eth0 handle 2b:\n"),
        (0, "qdisc tbf 2b: parent 2a:1 rate 1Mbit burst 10Kb lat 10ms \n", ""),
    );
}

#[test]
fn rate_nan_inf() {
    check(
        "rate_nan_inf",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: tbf rate nan burst 10k latency 10ms\nqdisc show dev eth0\nqdisc del dev eth0 root\nqdisc add dev eth0 root handle 1: tbf rate inf burst 10k latency 10ms\n"),
        (1, "qdisc tbf 1: root refcnt 3 rate 0bit burst 0b lat 0us \n", "tbf: the \"rate\" parameter is mandatory.\nUsage: ... tbf limit BYTES burst BYTES[/BYTES] rate KBPS [ mtu BYTES[/BYTES] ]\n\t[ peakrate KBPS ] [ latency TIME ] [ overhead BYTES ] [ linklayer TYPE ]\nCommand failed {FILE}:4\n"),
    );
}

#[test]
fn percent_rates() {
    check(
        "percent_rates",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: htb\nclass add dev eth0 parent 1: classid 1:1 htb rate 10% ceil 50%\nclass show dev eth0\nclass add dev eth0 parent 1: classid 1:2 htb rate -5%\nqdisc add dev eth0 parent 1:1 handle 10: tbf rate 101% burst 10k latency 1ms\nqdisc add dev eth0 parent 1:1 handle 10: tbf rate % burst 10k latency 1ms\n"),
        (1, "class htb 1:1 root prio 0 rate 1Gbit ceil 5Gbit burst 1600b cburst 1600b\n", "Warning: sch_htb: quantum of class 10001 is big. Consider r2q change.\nSpecified rate value could not be read or is malformed\nIllegal \"rate\"\nUsage: ... qdisc add ... htb [default N] [r2q N]\n                      [direct_qlen P] [offload]\n default  minor id of class to which unclassified packets are sent {0}\n r2q      DRR quantums are computed as rate in Bps/r2q {10}\n debug    string of 16 numbers each 0-3 {0}\n\n direct_qlen  Limit of the direct queue {in packets}\n offload  enable hardware offload\n... class add ... htb rate R1 [burst B1] [mpu B] [overhead O]\n                      [prio P] [slot S] [pslot PS]\n                      [ceil R2] [cburst B2] [mtu MTU] [quantum Q]\n rate     rate allocated to this class (class can still borrow)\n burst    max bytes burst which can be accumulated during idle period {computed}\n mpu      minimum packet size used in rate computations\n overhead per-packet size overhead used in rate computations\n linklay  adapting to a linklayer e.g. atm\n ceil     definite upper class rate (no borrows) {rate}\n cburst   burst but for ceil {computed}\n mtu      max packet size we create rate map for {1600}\n prio     priority of leaf; lower are served first {0}\n quantum  how much bytes to serve from leaf at once {use r2q}\n\nTC HTB version 3.3\nCommand failed {FILE}:4\nInvalid rate specified; should be between [0,100]% but is 101%\ntbf: illegal value for \"rate\": \"101%\"\nCommand failed {FILE}:5\ntbf: the \"rate\" parameter is mandatory.\nUsage: ... tbf limit BYTES burst BYTES[/BYTES] rate KBPS [ mtu BYTES[/BYTES] ]\n\t[ peakrate KBPS ] [ latency TIME ] [ overhead BYTES ] [ linklayer TYPE ]\nCommand failed {FILE}:6\n"),
    );
}

#[test]
fn u32_ether() {
    check(
        "u32_ether",
        &["filter", "add", "dev", "eth0", "parent", "1:", "u32", "match", "ether", "classid", "1:1"],
        None,
        (1, "", "Unknown match: ether classid\nIllegal \"match\"\n"),
    );
}

#[test]
fn tbf_parent_minor_zero() {
    check(
        "tbf_parent_minor_zero",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: tbf rate 1mbit burst 10k latency 50ms\nqdisc add dev eth0 parent 1:1 handle 10: bfifo limit 10k\nqdisc replace dev eth0 parent 1: handle 1: mq\nqdisc change dev eth0 parent 1: handle 20: pfifo\n"),
        (1, "", "Error: Cannot move an existing qdisc to a different parent.\nCommand failed {FILE}:3\nError: NLM_F_REPLACE needed to override.\nCommand failed {FILE}:4\n"),
    );
}

#[test]
fn size_fraction_cut() {
    check(
        "size_fraction_cut",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: bfifo limit 1.5\nqdisc show dev eth0\nqdisc replace dev eth0 root handle 1: bfifo limit -1\n"),
        (1, "qdisc bfifo 1: root refcnt 3 limit 1b\n", "bfifo: Illegal value for \"limit\": \"-1\"\nCommand failed {FILE}:3\n"),
    );
}

#[test]
fn percent_on_missing_dev() {
    check(
        "percent_on_missing_dev",
        &["class", "change", "dev", "eth1", "parent", "1:1", "htb", "rate", "10%"],
        None,
        (1, "", "fopen /sys/class/net/eth1/speed: No such file or directory\nIllegal \"rate\"\nUsage: ... qdisc add ... htb [default N] [r2q N]\n                      [direct_qlen P] [offload]\n default  minor id of class to which unclassified packets are sent {0}\n r2q      DRR quantums are computed as rate in Bps/r2q {10}\n debug    string of 16 numbers each 0-3 {0}\n\n direct_qlen  Limit of the direct queue {in packets}\n offload  enable hardware offload\n... class add ... htb rate R1 [burst B1] [mpu B] [overhead O]\n                      [prio P] [slot S] [pslot PS]\n                      [ceil R2] [cburst B2] [mtu MTU] [quantum Q]\n rate     rate allocated to this class (class can still borrow)\n burst    max bytes burst which can be accumulated during idle period {computed}\n mpu      minimum packet size used in rate computations\n overhead per-packet size overhead used in rate computations\n linklay  adapting to a linklayer e.g. atm\n ceil     definite upper class rate (no borrows) {rate}\n cburst   burst but for ceil {computed}\n mtu      max packet size we create rate map for {1600}\n prio     priority of leaf; lower are served first {0}\n quantum  how much bytes to serve from leaf at once {use r2q}\n\nTC HTB version 3.3\n"),
    );
}

#[test]
fn names_file_must_open() {
    check(
        "names_file_must_open",
        &["-nm", "-c", "class", "show"],
        None,
        (255, "", "Can't open class names file: class\n"),
    );
}

#[test]
fn class_show_json_without_dev() {
    check("class_show_json_without_dev", &["-j", "class", "show"], None, (0, "[]\n", ""));
}

#[test]
fn u32_selector_needs_a_word() {
    check(
        "u32_selector_needs_a_word",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: htb\nfilter add dev eth0 parent 1: u32 match ether classid 1:1\nfilter add dev eth0 parent 1: u32 match ip\nqdisc show dev eth0\n"),
        (255, "", "Unknown match: ether classid\nIllegal \"match\"\nCommand failed {FILE}:2\nCommand line is not complete. Try option \"help\"\n"),
    );
}

#[test]
fn gact_usage_exits() {
    check(
        "gact_usage_exits",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 root handle 1: htb\nfilter add dev eth0 parent 1: u32 match u32 0 0 classid 1:10 action gact pass help\nqdisc show dev eth0\n"),
        (255, "", "Usage: ... gact <ACTION> [RAND] [INDEX]\nWhere: \tACTION := reclassify | drop | continue | pass | pipe |\n       \t          goto chain <CHAIN_INDEX> | jump <JUMP_COUNT>\n\tRAND := random <RANDTYPE> <ACTION> <VAL>\n\tRANDTYPE := netrand | determ\n\tVAL : = value not exceeding 10000\n\tJUMP_COUNT := Absolute jump from start of action list\n\tINDEX := index value used\n\n"),
    );
}

#[test]
fn ingress_filters_survive_a_new_root() {
    check(
        "ingress_filters_survive_a_new_root",
        &["-force", "-batch", "B"],
        Some(b"qdisc add dev eth0 ingress\nfilter add dev eth0 parent ffff: protocol ip prio 2 u32 match ip src 10.0.0.0/8 flowid 1:1\nqdisc replace dev eth0 root handle 1: mq\nqdisc del dev eth0 root\nfilter show dev eth0 ingress\n"),
        (0, "filter parent ffff: protocol ip pref 2 u32 chain 0 \nfilter parent ffff: protocol ip pref 2 u32 chain 0 fh 800: ht divisor 1 \nfilter parent ffff: protocol ip pref 2 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 0a000000/ff000000 at 12\n", ""),
    );
}

#[test]
fn graph_without_classes() {
    check("graph_without_classes", &["-g", "class", "show", "dev", "eth0"], None, (0, "", ""));
}

/// Seed 31: `dev ""` is no device at all (tc tests the name's first byte), so the
/// kernel answers ENODEV to a change with ifindex 0, a class dump of ifindex 0 is
/// empty, and `N%` has no device to take a share of.
#[test]
fn empty_dev_is_no_device() {
    let enodev = "RTNETLINK answers: No such device\n";
    check("empty_dev_qdisc", &["qdisc", "add", "dev", "", "root", "handle", "1:", "htb"], None, (2, "", enodev));
    check("empty_dev_class_show", &["class", "show", "dev", ""], None, (0, "", ""));
    check(
        "empty_dev_filter",
        &["filter", "add", "dev", "", "parent", "1:", "u32", "match", "ip", "dst", "1.2.3.4/32"],
        None,
        (2, "", "RTNETLINK answers: No such device\nWe have an error talking to the kernel\n"),
    );
    let out = Command::new(BIN)
        .args(["tc", "--kernel", "6.18", "--dev", DEV, "class", "add", "dev", "", "parent", "1:", "classid", "1:1"])
        .args(["htb", "rate", "1mbit", "ceil", "10%"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.starts_with("No device specified; specify device to rate limit by percentage\nIllegal \"ceil\"\nUsage: "),
        "{err}"
    );
}

/// Seed 31: tc's get_time stores its double into an unsigned int through x86-64's
/// signed 64-bit conversion, so `nan` and `inf` are 0: an estimator interval of 0
/// has no ewma_log, and tbf's `latency 0` counts as no latency.
#[test]
fn nan_and_inf_times_are_zero() {
    let args = ["qdisc", "add", "dev", "eth0", "estimator", "nan", "1s", "root", "handle", "1:", "htb"];
    check("nan_estimator", &args, None, (255, "", "Error: estimator parameters are out of range.\n"));
    let out = Command::new(BIN)
        .args(["tc", "--kernel", "6.18", "--dev", DEV, "qdisc", "add", "dev", "eth0", "root", "handle", "1:"])
        .args(["tbf", "rate", "1mbit", "burst", "10k", "latency", "inf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("tbf: either \"limit\" or \"latency\" is required.\n"));
}

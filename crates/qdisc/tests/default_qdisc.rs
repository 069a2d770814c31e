//! `net.core.default_qdisc`: the default qdiscs devices come up with
//! (`attach_default_qdiscs`), get back when their root is deleted, and mq puts on its
//! tx queues, and what the sysctl accepts (`qdisc_set_default`). The kinds this
//! project's CI kernel has are also checked against it byte for byte by the goldens
//! (goldens/cases/default-qdisc-*.tc); fq_codel, fq and sfq are checked here against
//! what the engine prints for them — byte-exact with Debian 13's kernel by the
//! kernel-6.12 goldens — under handle 0.

use qdisc::tc::{makeargs, Tc};
use qdisc::tree::{check_default_qdisc, DevSpec, KernelVersion, Xmit, DEFAULT_QDISC};
use qdisc::{Instant, Packet};

const FQ_CODEL: &str =
    "limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 ";
const FQ: &str =
    "limit 10000p flow_limit 100p buckets 1024 orphan_mask 1023 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 \
                  1 1 1 weights 589824 196608 65536 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit \
                  refill_delay 40ms timer_slack 10us horizon 10s horizon_drop ";
const SFQ: &str = "limit 127p quantum 1514b depth 127 divisor 1024 ";
const ENOENT: &str = "sysctl: setting key \"net.core.default_qdisc\": No such file or directory";

fn specs(s: &str) -> Vec<DevSpec> {
    s.split(' ').map(|d| DevSpec::parse(d).unwrap()).collect()
}

fn booted(devs: &str, kind: &str) -> Tc {
    Tc::with_default_qdisc(&specs(devs), KernelVersion::default(), kind).unwrap()
}

fn run(tc: &mut Tc, cmd: &str) -> (String, String, i32) {
    let o = tc.run(&makeargs(cmd));
    (o.stdout, o.stderr, o.code)
}

fn show(tc: &mut Tc, cmd: &str) -> String {
    let (out, err, code) = run(tc, cmd);
    assert_eq!((code, err.as_str()), (0, ""), "tc {cmd}");
    out
}

#[test]
fn a_host_booted_with_fq_codel() {
    let mut tc = booted("eth0 eth1,txqueues=2 veth0,kind=veth", "fq_codel");
    assert_eq!(tc.default_qdisc(), "fq_codel");
    assert_eq!(
        show(&mut tc, "qdisc show"),
        format!(
            "qdisc fq_codel 0: dev eth0 root refcnt 2 {FQ_CODEL}\n\
             qdisc mq 0: dev eth1 root \n\
             qdisc fq_codel 0: dev eth1 parent :2 {FQ_CODEL}\n\
             qdisc fq_codel 0: dev eth1 parent :1 {FQ_CODEL}\n\
             qdisc noqueue 0: dev veth0 root refcnt 2 \n"
        )
    );
    assert_eq!(
        show(&mut tc, "-s qdisc show dev eth0"),
        format!(
            "qdisc fq_codel 0: root refcnt 2 {FQ_CODEL}\n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n \
             backlog 0b 0p requeues 0\n  maxpacket 0 drop_overlimit 0 new_flow_count 0 ecn_mark 0\n  \
             new_flows_len 0 old_flows_len 0\n"
        )
    );
    assert_eq!(
        show(&mut tc, "-j qdisc show dev eth0"),
        "[{\"kind\":\"fq_codel\",\"handle\":\"0:\",\"root\":true,\"refcnt\":2,\"options\":{\"limit\":10240,\
         \"flows\":1024,\"quantum\":1514,\"target\":4999,\"interval\":99999,\"memory_limit\":33554432,\"ecn\":true,\
         \"drop_batch\":64}}]\n"
    );
    // The transmit path reaches it: a packet for a busy driver is queued and counted.
    let d = tc.device_mut("eth0").unwrap();
    assert!(matches!(d.xmit(Packet::new(1, 1000), Instant::ZERO, false), Xmit::Queued(_)));
    assert!(show(&mut tc, "-s qdisc show dev eth0").contains(" backlog 1000b 1p requeues 0\n"));
}

#[test]
fn fq_and_sfq_defaults_single_and_per_tx_queue() {
    let mut tc = booted("eth0 eth1,txqueues=2", "fq");
    assert_eq!(
        show(&mut tc, "qdisc show"),
        format!(
            "qdisc fq 0: dev eth0 root refcnt 2 {FQ}\nqdisc mq 0: dev eth1 root \n\
             qdisc fq 0: dev eth1 parent :2 {FQ}\nqdisc fq 0: dev eth1 parent :1 {FQ}\n"
        )
    );
    let mut tc = booted("eth0 eth1,txqueues=2", "sfq");
    assert_eq!(
        show(&mut tc, "qdisc show"),
        format!(
            "qdisc sfq 0: dev eth0 root refcnt 2 {SFQ}\nqdisc mq 0: dev eth1 root \n\
             qdisc sfq 0: dev eth1 parent :2 {SFQ}\nqdisc sfq 0: dev eth1 parent :1 {SFQ}\n"
        )
    );
    assert_eq!(
        show(&mut tc, "-d qdisc show dev eth0"),
        "qdisc sfq 0: root refcnt 2 limit 127p quantum 1514b depth 127 flows 128 divisor 1024 \n"
    );
}

/// A default qdisc is made with no options (`ops->init(sch, NULL)`), which for these
/// kinds is what `tc qdisc add … KIND` without options makes: the same dump under
/// handle 0:.
#[test]
fn a_default_root_dumps_as_the_kind_added_without_options() {
    for kind in ["pfifo", "bfifo", "pfifo_head_drop", "codel", "fq_codel", "fq", "sfq"] {
        for dev in ["eth0", "eth0,mtu=9000,txqueuelen=50"] {
            let mut dflt = booted(dev, kind);
            let mut added = Tc::new(&specs(dev));
            show(&mut added, &format!("qdisc add dev eth0 root handle 1: {kind}"));
            for cmd in ["-d -s qdisc show dev eth0", "-s -j qdisc show dev eth0"] {
                let want = show(&mut added, cmd).replacen("1:", "0:", 1);
                assert_eq!(show(&mut dflt, cmd), want, "{kind} on {dev}: tc {cmd}");
            }
        }
    }
}

#[test]
fn kinds_that_need_options_or_another_place_fall_back_to_noqueue() {
    // The sysctl takes them (they are registered qdiscs); attach_default_qdiscs then
    // finds no qdisc on the device and warns "fallback to noqueue".
    for kind in ["htb", "tbf", "prio", "mq", "ingress"] {
        let mut tc = booted("eth0 eth1,txqueues=4 veth0,kind=veth", kind);
        assert_eq!(
            show(&mut tc, "qdisc show"),
            "qdisc noqueue 0: dev eth0 root refcnt 2 \nqdisc noqueue 0: dev eth1 root refcnt 2 \n\
             qdisc noqueue 0: dev veth0 root refcnt 2 \n",
            "{kind}"
        );
        // mq_init cannot make its tx queues' qdiscs: ENOMEM, nothing changes.
        assert_eq!(
            run(&mut tc, "qdisc add dev eth1 root mq"),
            (String::new(), "RTNETLINK answers: Cannot allocate memory\n".into(), 2),
            "{kind}"
        );
        let d = tc.device_mut("eth0").unwrap();
        assert!(matches!(d.xmit(Packet::new(1, 100), Instant::ZERO, false), Xmit::Direct(_)));
    }
}

#[test]
fn pfifo_fast_on_a_device_without_a_tx_queue_length_falls_back_too() {
    // pfifo_fast_init refuses txqueuelen 0; so does mq_init through its tx queues.
    let mut tc = Tc::new(&specs("eth0,txqueuelen=0 eth1,txqueues=4,txqueuelen=0"));
    assert_eq!(
        show(&mut tc, "qdisc show"),
        "qdisc noqueue 0: dev eth0 root refcnt 2 \nqdisc noqueue 0: dev eth1 root refcnt 2 \n"
    );
    assert_eq!(run(&mut tc, "qdisc add dev eth1 root mq").1, "RTNETLINK answers: Cannot allocate memory\n");
    // pfifo has no such limit: limit 0p on every tx queue.
    let mut tc = booted("eth1,txqueues=2,txqueuelen=0", "pfifo");
    assert_eq!(
        show(&mut tc, "qdisc show"),
        "qdisc mq 0: dev eth1 root \nqdisc pfifo 0: dev eth1 parent :2 limit 0p\n\
         qdisc pfifo 0: dev eth1 parent :1 limit 0p\n"
    );
}

#[test]
fn noqueue_as_default_puts_noqueue_on_every_tx_queue() {
    let mut tc = booted("eth0 eth1,txqueues=2", "noqueue");
    assert_eq!(
        show(&mut tc, "qdisc show"),
        "qdisc noqueue 0: dev eth0 root refcnt 2 \nqdisc mq 0: dev eth1 root \n\
         qdisc noqueue 0: dev eth1 parent :2 \nqdisc noqueue 0: dev eth1 parent :1 \n"
    );
    assert_eq!(show(&mut tc, "class show dev eth1"), "class mq :1 root \nclass mq :2 root \n");
    // No enqueue on either tx queue: packets go straight to the driver, counted nowhere.
    let d = tc.device_mut("eth1").unwrap();
    for h in [0, u32::MAX] {
        assert!(matches!(d.xmit(Packet::new(1, 100).with_hash(h), Instant::ZERO, false), Xmit::Direct(_)));
    }
    assert!(show(&mut tc, "-s qdisc show dev eth1 root").contains("Sent 0 bytes 0 pkt"));
}

#[test]
fn setting_it_later_changes_later_attachments_only() {
    let mut tc = Tc::new(&specs("eth0 eth1,txqueues=2"));
    assert_eq!(tc.default_qdisc(), DEFAULT_QDISC);
    show(&mut tc, "qdisc add dev eth0 root handle 1: bfifo");
    let before = show(&mut tc, "qdisc show");
    tc.set_default_qdisc("fq_codel").unwrap();
    assert_eq!(tc.default_qdisc(), "fq_codel");
    assert_eq!(show(&mut tc, "qdisc show"), before, "existing qdiscs are left alone");
    // The root deleted: dev_activate attaches the default of now.
    show(&mut tc, "qdisc del dev eth0 root");
    assert_eq!(show(&mut tc, "qdisc show dev eth0"), format!("qdisc fq_codel 0: root refcnt 2 {FQ_CODEL}\n"));
    // A new mq fills its tx queues with it.
    show(&mut tc, "qdisc replace dev eth1 root handle 1: mq");
    assert_eq!(
        show(&mut tc, "qdisc show dev eth1"),
        format!(
            "qdisc mq 1: root \nqdisc fq_codel 0: parent 1:2 {FQ_CODEL}\nqdisc fq_codel 0: parent 1:1 {FQ_CODEL}\n"
        )
    );
    // And so does a device created now.
    tc.add_device(&DevSpec::parse("eth2").unwrap()).unwrap();
    assert_eq!(show(&mut tc, "qdisc show dev eth2"), format!("qdisc fq_codel 0: root refcnt 2 {FQ_CODEL}\n"));
    assert_eq!(tc.add_device(&DevSpec::parse("eth2").unwrap()), Err("RTNETLINK answers: File exists".into()));
    // Back to pfifo_fast: the mq's deletion brings back the default mq with pfifo_fast.
    tc.set_default_qdisc("pfifo_fast").unwrap();
    show(&mut tc, "qdisc del dev eth1 root");
    assert_eq!(
        show(&mut tc, "qdisc show dev eth1"),
        show(&mut Tc::new(&specs("eth1,txqueues=2")), "qdisc show dev eth1")
    );
}

#[test]
fn what_the_sysctl_refuses() {
    // Unknown, not registered (noop is builtin), case matters.
    for v in ["nosuchkind", "noop", "FQ_CODEL", ""] {
        assert_eq!(check_default_qdisc(v), Err(ENOENT.into()), "{v:?}");
        assert_eq!(Tc::with_default_qdisc(&specs("eth0"), KernelVersion::V6_18, v).err(), Some(ENOENT.into()));
    }
    // proc_dostring: up to a newline or NUL, at most IFNAMSIZ-1 bytes.
    let mut tc = Tc::new(&specs("eth0"));
    for (v, kind) in [("pfifo_head_dropXYZ", "pfifo_head_drop"), ("sfq\nfq", "sfq"), ("fq\0codel", "fq")] {
        assert_eq!(check_default_qdisc(v), Ok(()));
        tc.set_default_qdisc(v).unwrap();
        assert_eq!(tc.default_qdisc(), kind);
    }
    assert_eq!(check_default_qdisc("fq_codel_fq_codel"), Err(ENOENT.into()));
    // A refused write changes nothing.
    tc.set_default_qdisc("pfifo").unwrap();
    assert_eq!(tc.set_default_qdisc("nosuchkind"), Err(ENOENT.into()));
    assert_eq!(tc.default_qdisc(), "pfifo");
    for kind in ["htb", "tbf", "prio", "mq", "ingress", "clsact", "noqueue", "pfifo_fast", "fq_codel", "cake", "taprio"]
    {
        assert_eq!(check_default_qdisc(kind), Ok(()), "{kind}");
    }
}

#[test]
fn sysctl_w_prints_what_procps_prints() {
    let mut tc = Tc::new(&specs("eth0"));
    assert_eq!(tc.sysctl_w("net.core.default_qdisc=fq_codel"), Ok("net.core.default_qdisc = fq_codel\n".into()));
    assert_eq!(tc.sysctl_w(" net/core/default_qdisc = sfq "), Ok("net.core.default_qdisc = sfq\n".into()));
    assert_eq!(tc.default_qdisc(), "sfq");
    // The value as given, though the kernel keeps 15 bytes of it.
    assert_eq!(
        tc.sysctl_w("net.core.default_qdisc=pfifo_head_dropXYZ"),
        Ok("net.core.default_qdisc = pfifo_head_dropXYZ\n".into())
    );
    assert_eq!(tc.default_qdisc(), "pfifo_head_drop");
    assert_eq!(tc.sysctl_w("net.core.default_qdisc=nosuchkind"), Err(ENOENT.into()));
    assert_eq!(
        tc.sysctl_w("net.core.foo=1"),
        Err("sysctl: cannot stat /proc/sys/net/core/foo: No such file or directory".into())
    );
    // Keys the kernel has but the engine does not model are refused the same way.
    assert_eq!(
        tc.sysctl_w("net.core.somaxconn=1024"),
        Err("sysctl: cannot stat /proc/sys/net/core/somaxconn: No such file or directory".into())
    );
    assert_eq!(
        tc.sysctl_w("net.core/default_qdisc=fq"),
        Err("sysctl: cannot stat /proc/sys/net/core.default_qdisc: No such file or directory".into())
    );
    assert_eq!(
        tc.sysctl_w("net.core.default_qdisc"),
        Err("sysctl: command line(0): invalid syntax, continuing...".into())
    );
    assert_eq!(tc.default_qdisc(), "pfifo_head_drop");
}

/// The default qdiscs a device comes up with follow the device's kernel from the
/// start: on an MTU 68 device a boot-time fq_codel's quantum is psched_mtu (82)
/// clamped to 256 on 6.12.117, and 82 itself on 6.18.44 (`KernelVersion::quantum_bounds`).
#[test]
fn default_qdiscs_follow_the_kernel_from_boot() {
    for (kernel, quantum) in [(KernelVersion::V6_12, 256), (KernelVersion::V6_18, 82)] {
        let mut tc = Tc::with_default_qdisc(&specs("eth0,mtu=68"), kernel, "fq_codel").unwrap();
        let out = show(&mut tc, "qdisc show dev eth0");
        assert!(out.contains(&format!(" quantum {quantum} ")), "{kernel}: {out}");
    }
}

//! The topology on the running kernel: namespaces, veths, addresses, and how a link's
//! rate, delay and loss are realised.
//!
//! ## Layout
//!
//! Each scenario host is a network namespace `qdl-<pid>-<run>-<host>`. The links all
//! go through one more namespace, `qdl-<pid>-<run>-_wire` (host names cannot start
//! with `_`). Link `i` between `A:ifa` and `B:ifb` is
//!
//! ```text
//!  ns A                ns _wire                               ns B
//!  ifa ══veth══ l<i>a ─┐                        ┌─ l<i>b ══veth══ ifb
//!  10.(i+1).0.1/24     └──── bridge br<i> ──────┘            10.(i+1).0.2/24
//!                      egress of l<i>b: A→B wire          egress of l<i>a: B→A wire
//! ```
//!
//! A `kind = "veth-pair"` link is one veth pair straight between the two namespaces
//! (`ifa` in A, its peer `ifb` in B, both with the link's `txqueues` tx and rx queues):
//! no wire, no bridge, nothing of the lab's on the path (it has no rate, delay or loss
//! to realise). The wire namespace exists only when some link goes through it.
//!
//! ## Why the wire is a separate hop
//!
//! A veth has no rate of its own, and the user's tc script owns `ifa`/`ifb` entirely
//! (root, ingress, filters) exactly as written. So the wire is realised where nothing
//! of the user's lives: on the egress of the wire namespace's port facing the
//! receiver, one qdisc per direction:
//!
//! * rate only → `tbf rate R burst max(1 ms at R, 2 MTU-sized frames) latency 50ms`;
//! * any delay or loss → `netem delay D [loss random L%] [rate R] limit N` (N: twice
//!   the packets in flight at R over D + 50 ms, at least 1000);
//! * neither → nothing (a bare bridge: the link is as fast as the CPUs move packets).
//!
//! ## Fidelity limits (also in docs/scenarios.md)
//!
//! * The wire is a *downstream* bottleneck with its own queue, not the sender NIC's
//!   serialisation: the user's qdisc gets no backpressure from the link rate. When the
//!   user's tree shapes below the link rate (the usual case — htb 100mbit on a 1gbit
//!   link), the queue forms in the user's qdisc as on real hardware. When the link rate
//!   is the bottleneck, the queue forms in the wire's tbf (a 50 ms drop-tail buffer,
//!   like a switch port), and the user's root qdisc stays nearly empty.
//! * veth keeps its offloads (TSO/GSO): the user's qdisc sees GSO packets as a real
//!   host's qdisc does; tc byte counters include every segment's headers.
//! * Rates are only honest while the machine has CPU to spare: everything shares its
//!   cores.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qdisc::tc::units::fmt_rate;
use qdisc_scenario::scenario::{host_route, Link, LinkKind, Scenario};

use crate::proc;

/// The namespaces and scratch directory of one run; dropping it tears everything down.
pub struct Lab {
    pub prefix: String,
    pub tc: PathBuf,
    /// Namespaces created, in creation order.
    namespaces: Vec<String>,
    pub dir: PathBuf,
}

/// Run a command, Err(stderr) on failure.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(if err.is_empty() { format!("{cmd:?} exited with {}", out.status) } else { err })
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args)).map_err(|e| format!("ip {}: {e}", args.join(" ")))
}

/// Run commands in one `PROGRAM -n NS -batch -` (one process instead of one per
/// command: under a VM's emulated CPU a process start costs ~0.1 s). On failure, names
/// the command that failed (batch mode stops there).
pub fn batch(program: &Path, ns: &str, cmds: &[Vec<String>]) -> Result<(), String> {
    if cmds.is_empty() {
        return Ok(());
    }
    let text: String = cmds.iter().map(|c| c.join(" ") + "\n").collect();
    let mut child = Command::new(program)
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let _ = child.stdin.take().expect("piped").write_all(text.as_bytes());
    let out = child.wait_with_output().map_err(|e| format!("{}: {e}", program.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let failed = batch_failures(&err);
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    match failed.first() {
        Some((n, msg)) if *n >= 1 && *n <= cmds.len() => {
            Err(format!("{name} -n {ns} {}: {}", cmds[n - 1].join(" "), msg.trim()))
        }
        _ => Err(format!("{name} -n {ns} -batch: {}", err.trim())),
    }
}

/// The failures a `-batch -` run reported: (1-based line, what was printed before its
/// `Command failed -:LINE`).
pub fn batch_failures(stderr: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut msg = String::new();
    for l in stderr.lines() {
        if let Some(n) = l.strip_prefix("Command failed -:").and_then(|n| n.trim().parse().ok()) {
            out.push((n, std::mem::take(&mut msg)));
        } else {
            msg.push_str(l);
            msg.push('\n');
        }
    }
    out
}

/// Run `f` on a thread that has entered network namespace `ns` (`/run/netns/NS`).
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> std::io::Result<T> + Send) -> std::io::Result<T> {
    let fd = std::fs::File::open(Path::new("/run/netns").join(ns))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a namespace file we hold open; it affects this thread only,
            // which ends right after `f`.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
    })
}

/// `struct ifreq` with the flags member (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// In the calling thread's namespace: IPv6 off (all, default) and `lo` up — what
/// `ip netns exec NS sh -c 'echo 1 > …'` twice and `ip link set dev lo up` do, without
/// starting three processes.
fn quiet_and_lo_up() -> std::io::Result<()> {
    for key in ["all", "default"] {
        // Not fatal: a kernel without IPv6 has nothing to disable.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6"), "1");
    }
    // SAFETY: a datagram socket for interface ioctls, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut req = IfReqFlags { name: [0; 16], flags: 0, _pad: [0; 22] };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write a struct ifreq we own.
    let r = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) != 0 {
            -1
        } else {
            req.flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(sock, libc::SIOCSIFFLAGS, &req)
        }
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the socket opened above.
    unsafe { libc::close(sock) };
    if r != 0 {
        return Err(err);
    }
    Ok(())
}

/// Delete a namespace as `ip netns del` does: detach its bind mount, remove the file.
fn del_netns(ns: &str) -> Result<(), String> {
    let path = Path::new("/run/netns").join(ns);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return ip(&["netns", "del", ns]).map(|_| ());
    }
    std::fs::remove_file(&path).or_else(|_| ip(&["netns", "del", ns]).map(|_| ()))
}

impl Lab {
    /// An empty lab: nothing exists yet.
    pub fn new(prefix: String, tc: PathBuf) -> std::io::Result<Lab> {
        let dir = std::env::temp_dir().join(prefix.trim_end_matches('-'));
        std::fs::create_dir_all(&dir)?;
        proc::register_dir(&dir);
        Ok(Lab { prefix, tc, namespaces: Vec::new(), dir })
    }

    pub fn host_ns(&self, host: &str) -> String {
        format!("{}{host}", self.prefix)
    }

    pub fn wire_ns(&self) -> String {
        format!("{}_wire", self.prefix)
    }

    /// Create a namespace with lo up and IPv6 off (no router solicitations or DAD
    /// packets in the tc counters).
    pub fn add_netns(&mut self, name: &str) -> Result<(), String> {
        proc::register_netns(name);
        ip(&["netns", "add", name])?;
        self.namespaces.push(name.to_string());
        if in_netns(name, quiet_and_lo_up).is_err() {
            // The same with the tools.
            for key in ["all", "default"] {
                let path = format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6");
                let _ = run(Command::new("ip").args(["netns", "exec", name, "sh", "-c", &format!("echo 1 > {path}")]));
            }
            ip(&["-n", name, "link", "set", "dev", "lo", "up"])?;
        }
        Ok(())
    }

    /// Namespaces, veths, bridges, addresses; the links' qdiscs.
    pub fn build(&mut self, s: &Scenario) -> Result<(), String> {
        let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        for h in &s.hosts {
            self.add_netns(&self.host_ns(&h.name))?;
            // The host's ifb devices, up (ifb_setup gives them txqueuelen 32).
            let cmds: Vec<Vec<String>> = h
                .ifb
                .iter()
                .flat_map(|d| [v(&["link", "add", "name", d, "type", "ifb"]), v(&["link", "set", "dev", d, "up"])])
                .collect();
            if !cmds.is_empty() {
                batch(Path::new("ip"), &self.host_ns(&h.name), &cmds)
                    .map_err(|e| format!("host {}: ifb: {e}", h.name))?;
            }
        }
        if s.links.is_empty() {
            return Ok(());
        }
        let wire = self.wire_ns();
        if s.links.iter().any(has_wire) {
            self.add_netns(&wire)?;
        }
        // One `ip -batch` per namespace and link, one `tc -batch` for the link's wire.
        let ipb = Path::new("ip");
        for (i, l) in s.links.iter().enumerate() {
            if !has_wire(l) {
                // One veth pair, end a in A's namespace, its peer in B's (the queue
                // counts on both ends, as below).
                let q = l.txqueues.to_string();
                let (na, nb) = (self.host_ns(&l.a.host), self.host_ns(&l.b.host));
                let cmd = veth_add(&l.a.iface, &l.b.iface, &q, &nb);
                batch(ipb, &na, &[cmd])?;
                for (b_side, ep) in [(false, &l.a), (true, &l.b)] {
                    let addr = format!("{}/24", Link::address(i, b_side));
                    let cmds =
                        [v(&["addr", "add", &addr, "dev", &ep.iface]), v(&["link", "set", "dev", &ep.iface, "up"])];
                    batch(ipb, &self.host_ns(&ep.host), &cmds)?;
                }
                continue;
            }
            let br = format!("br{i}");
            let mut wire_cmds = vec![v(&["link", "add", "name", &br, "type", "bridge"])];
            for (b_side, ep) in [(false, &l.a), (true, &l.b)] {
                let port = port_name(i, b_side);
                let hns = self.host_ns(&ep.host);
                let q = l.txqueues.to_string();
                wire_cmds.push(veth_add(&port, &ep.iface, &q, &hns));
                wire_cmds.push(v(&["link", "set", "dev", &port, "master", &br]));
                wire_cmds.push(v(&["link", "set", "dev", &port, "up"]));
            }
            wire_cmds.push(v(&["link", "set", "dev", &br, "up"]));
            batch(ipb, &wire, &wire_cmds)?;
            for (b_side, ep) in [(false, &l.a), (true, &l.b)] {
                let addr = format!("{}/24", Link::address(i, b_side));
                let cmds = [v(&["addr", "add", &addr, "dev", &ep.iface]), v(&["link", "set", "dev", &ep.iface, "up"])];
                batch(ipb, &self.host_ns(&ep.host), &cmds)?;
            }
            let qdiscs: Vec<Vec<String>> =
                [false, true].iter().filter_map(|&b_side| l.wire_qdisc(&port_name(i, b_side))).collect();
            batch(&self.tc, &wire, &qdiscs).map_err(|e| format!("link {i}: {e}"))?;
        }
        let routes = routes(s);
        if !routes.is_empty() {
            for h in &s.hosts {
                let ns = self.host_ns(&h.name);
                // (no sysctl binary in the VM backend's guest: write the proc file)
                run(Command::new("ip").args([
                    "netns",
                    "exec",
                    &ns,
                    "sh",
                    "-c",
                    "echo 1 > /proc/sys/net/ipv4/ip_forward",
                ]))
                .map_err(|e| format!("host {}: enabling forwarding: {e}", h.name))?;
            }
        }
        for r in routes {
            ip(&["-n", &self.host_ns(&r.host), "route", "add", &r.subnet, "via", &r.via, "dev", &r.dev])
                .map_err(|e| format!("host {}: route to {}: {e}", r.host, r.subnet))?;
        }
        Ok(())
    }

    /// Delete every namespace (killing a namespace's processes is the caller's job:
    /// they are `Proc`s, dropped before the lab).
    pub fn teardown(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = del_netns(&ns) {
                errors.push(e);
            }
            proc::forget_netns(&ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        proc::forget_dir(&self.dir);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Whether a link goes through the wire namespace (every kind but a veth pair).
pub fn has_wire(l: &Link) -> bool {
    l.kind != LinkKind::VethPair
}

/// A static route a host needs for multi-hop traffic.
#[derive(Debug, PartialEq, Eq)]
pub struct Route {
    pub host: String,
    /// `10.(i+1).0.0/24` of a link the host is not on.
    pub subnet: String,
    /// The next hop's address on the first link of the way there.
    pub via: String,
    pub dev: String,
}

/// For every host and every link it is not on, the route towards the nearer end of
/// that link (the scenario's shortest-path rule, so every backend forwards alike:
/// [`host_route`]).
pub fn routes(s: &Scenario) -> Vec<Route> {
    let mut out = Vec::new();
    for h in &s.hosts {
        for i in 0..s.links.len() {
            let Some(r) = host_route(&s.links, &h.name, i) else { continue };
            let Some(via) = r.via else { continue };
            out.push(Route { host: h.name.clone(), subnet: format!("10.{}.0.0/24", i + 1), via, dev: r.dev });
        }
    }
    out
}

/// `ip link add name A numtxqueues Q numrxqueues Q type veth peer name B numtxqueues Q
/// numrxqueues Q netns NS` (without `ip -n`): the queue counts on both sides, before
/// `type` and after `peer` — a veth end created without IFLA_NUM_TX_QUEUES of its own
/// gets real_num_tx_queues = 1 (`veth_init_queues`), whatever it allocated.
fn veth_add(a: &str, b: &str, q: &str, peer_ns: &str) -> Vec<String> {
    ["link", "add", "name", a, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", b]
        .into_iter()
        .chain(["numtxqueues", q, "numrxqueues", q, "netns", peer_ns])
        .map(String::from)
        .collect()
}

/// The wire namespace's port of link `i` facing endpoint a (`l<i>a`) or b (`l<i>b`).
pub fn port_name(i: usize, b_side: bool) -> String {
    format!("l{i}{}", if b_side { 'b' } else { 'a' })
}

/// What realises a link, in words (for the result's metadata).
pub fn describe(l: &Link, i: usize) -> String {
    if !has_wire(l) {
        return "one veth pair between the two namespaces (kind veth-pair): no bridge, no wire namespace, \
                no rate/delay/loss of its own"
            .into();
    }
    match l.wire_qdisc(&port_name(i, true)) {
        None => "a bridge in the wire namespace, no rate/delay/loss of its own".into(),
        Some(args) => {
            let kind = if l.wire_needs_netem() { "netem" } else { "tbf" };
            let what = l.rate.map(|r| fmt_rate(r, false)).unwrap_or_else(|| "unlimited".into());
            format!(
                "{kind} on the egress of each wire-namespace port ({what}); a→b: tc {}; b→a: the same on {}",
                args.join(" "),
                port_name(i, false)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdisc_scenario::scenario::Endpoint;

    fn link(rate: Option<u64>, delay: u64, loss: f64) -> Link {
        let e = |h: &str| Endpoint { host: h.into(), iface: "eth0".into() };
        Link {
            a: e("a"),
            b: e("b"),
            kind: Default::default(),
            txqueues: 1,
            rate,
            delay,
            loss,
            veth_bql: Default::default(),
            line: 1,
        }
    }

    #[test]
    fn batch_errors_name_their_line() {
        let err = "Error: either \"to\" is duplicate, or \"x\" is a garbage.\nCommand failed -:2\n\
                   RTNETLINK answers: File exists\nCommand failed -:4\n";
        assert_eq!(
            batch_failures(err),
            [
                (2, "Error: either \"to\" is duplicate, or \"x\" is a garbage.\n".to_string()),
                (4, "RTNETLINK answers: File exists\n".to_string())
            ]
        );
        assert_eq!(batch_failures(""), []);
    }

    #[test]
    fn wire_qdiscs() {
        assert_eq!(link(None, 0, 0.0).wire_qdisc("l0b"), None);
        assert_eq!(
            link(Some(125_000_000), 0, 0.0).wire_qdisc("l0b").unwrap().join(" "),
            "qdisc add dev l0b root handle 1: tbf rate 1000000000bit burst 125000 latency 50ms"
        );
        assert_eq!(
            link(Some(125_000), 0, 0.0).wire_qdisc("l0b").unwrap().join(" "),
            "qdisc add dev l0b root handle 1: tbf rate 1000000bit burst 3028 latency 50ms"
        );
        assert_eq!(
            link(Some(12_500_000), 20_000_000, 0.5).wire_qdisc("l0a").unwrap().join(" "),
            "qdisc add dev l0a root handle 1: netem delay 20ms loss random 0.5% rate 100000000bit limit 1167"
                .replace("1167", &((12_500_000f64 * 0.07 / 1500.0 * 2.0).ceil() as u64).max(1000).to_string())
        );
        assert!(describe(&link(Some(125_000_000), 0, 0.0), 0).starts_with("tbf on the egress"));
        let pair = Link { kind: LinkKind::VethPair, ..link(None, 0, 0.0) };
        assert!(!has_wire(&pair) && has_wire(&link(None, 0, 0.0)));
        assert!(describe(&pair, 0).starts_with("one veth pair between the two namespaces"));
        assert_eq!(pair.wire_qdisc("l0b"), None);
    }
}

#[cfg(test)]
mod route_tests {
    use super::*;

    #[test]
    fn dumbbell_routes_go_through_the_router() {
        let toml = r#"
duration = "1s"
[[host]]
name = "snd"
[[host]]
name = "rtr"
[[host]]
name = "rcv"
[[link]]
between = ["snd:eth0", "rtr:eth0"]
[[link]]
between = ["rtr:eth1", "rcv:eth0"]
[[traffic]]
kind = "ping"
from = "snd"
to = "rcv"
"#;
        let s = Scenario::from_bytes(toml.as_bytes(), "d.toml").unwrap();
        assert_eq!(s.dst_address("snd", "rcv").unwrap(), "10.2.0.2");
        let r = |host: &str, subnet: &str, via: &str, dev: &str| Route {
            host: host.into(),
            subnet: subnet.into(),
            via: via.into(),
            dev: dev.into(),
        };
        assert_eq!(
            routes(&s),
            vec![r("snd", "10.2.0.0/24", "10.1.0.2", "eth0"), r("rcv", "10.1.0.0/24", "10.2.0.1", "eth0")]
        );
    }
}

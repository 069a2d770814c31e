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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qdisc::tc::units::fmt_rate;
use qdisc_scenario::scenario::{Link, Scenario};

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

impl Lab {
    /// An empty lab: nothing exists yet.
    pub fn new(prefix: String, tc: PathBuf) -> std::io::Result<Lab> {
        let dir = std::env::temp_dir().join(prefix.trim_end_matches('-'));
        std::fs::create_dir_all(&dir)?;
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
        for key in ["all", "default"] {
            let path = format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6");
            // Not fatal: a kernel without IPv6 has nothing to disable.
            let _ = run(Command::new("ip").args(["netns", "exec", name, "sh", "-c", &format!("echo 1 > {path}")]));
        }
        ip(&["-n", name, "link", "set", "dev", "lo", "up"])?;
        Ok(())
    }

    /// Namespaces, veths, bridges, addresses; the links' qdiscs.
    pub fn build(&mut self, s: &Scenario) -> Result<(), String> {
        for h in &s.hosts {
            self.add_netns(&self.host_ns(&h.name))?;
        }
        if s.links.is_empty() {
            return Ok(());
        }
        let wire = self.wire_ns();
        self.add_netns(&wire)?;
        for (i, l) in s.links.iter().enumerate() {
            let br = format!("br{i}");
            ip(&["-n", &wire, "link", "add", "name", &br, "type", "bridge"])?;
            for (b_side, ep) in [(false, &l.a), (true, &l.b)] {
                let port = port_name(i, b_side);
                let hns = self.host_ns(&ep.host);
                ip(&[
                    "-n", &wire, "link", "add", "name", &port, "type", "veth", "peer", "name", &ep.iface, "netns", &hns,
                ])?;
                ip(&["-n", &wire, "link", "set", "dev", &port, "master", &br])?;
                ip(&["-n", &wire, "link", "set", "dev", &port, "up"])?;
                let addr = format!("{}/24", Link::address(i, b_side));
                ip(&["-n", &hns, "addr", "add", &addr, "dev", &ep.iface])?;
                ip(&["-n", &hns, "link", "set", "dev", &ep.iface, "up"])?;
            }
            ip(&["-n", &wire, "link", "set", "dev", &br, "up"])?;
            for b_side in [false, true] {
                if let Some(args) = wire_qdisc(l, &port_name(i, b_side)) {
                    run(Command::new(&self.tc).arg("-n").arg(&wire).args(&args))
                        .map_err(|e| format!("link {i}: tc {}: {e}", args.join(" ")))?;
                }
            }
        }
        let routes = routes(s);
        if !routes.is_empty() {
            for h in &s.hosts {
                let ns = self.host_ns(&h.name);
                run(Command::new("ip").args(["netns", "exec", &ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"]))
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
            if let Err(e) = ip(&["netns", "del", &ns]) {
                errors.push(e);
            }
            proc::forget_netns(&ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
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

/// The wire namespace's port of link `i` facing endpoint a (`l<i>a`) or b (`l<i>b`).
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
/// that link (the scenario's shortest-path rule, so every backend forwards alike).
pub fn routes(s: &Scenario) -> Vec<Route> {
    let mut out = Vec::new();
    for h in &s.hosts {
        for (i, l) in s.links.iter().enumerate() {
            if l.a.host == h.name || l.b.host == h.name {
                continue;
            }
            let (pa, pb) = (s.path(&h.name, &l.a.host), s.path(&h.name, &l.b.host));
            let Some(p) = [pa, pb].into_iter().flatten().min_by_key(|p| p.len()) else { continue };
            let (first, from_b) = p[0];
            let fl = &s.links[first];
            let (me, next) = if from_b { (&fl.b, &fl.a) } else { (&fl.a, &fl.b) };
            out.push(Route {
                host: h.name.clone(),
                subnet: format!("10.{}.0.0/24", i + 1),
                via: s.address_on(first, &next.host),
                dev: me.iface.clone(),
            });
        }
    }
    out
}

pub fn port_name(i: usize, b_side: bool) -> String {
    format!("l{i}{}", if b_side { 'b' } else { 'a' })
}

/// The tc command (without "tc -n NS") realising a link's direction on `dev`, the
/// wire port whose egress carries it; `None` when the link has nothing to realise.
pub fn wire_qdisc(l: &Link, dev: &str) -> Option<Vec<String>> {
    let mut a: Vec<String> = ["qdisc", "add", "dev", dev, "root", "handle", "1:"].map(String::from).to_vec();
    if l.delay > 0 || l.loss > 0.0 {
        a.push("netem".into());
        a.extend(["delay".into(), exact_time(l.delay)]);
        if l.loss > 0.0 {
            a.extend(["loss".into(), "random".into(), format!("{}%", l.loss)]);
        }
        if let Some(r) = l.rate {
            a.extend(["rate".into(), format!("{}bit", r * 8)]);
        }
        // Everything in flight over the delay line plus 50 ms of queue, twice, in
        // 1500-byte packets; no rate: assume 10 Gbit/s.
        let bps = l.rate.unwrap_or(1_250_000_000) as f64;
        let packets = (bps * (l.delay as f64 / 1e9 + 0.05) / 1500.0 * 2.0).ceil() as u64;
        a.extend(["limit".into(), packets.max(1000).to_string()]);
        Some(a)
    } else if let Some(r) = l.rate {
        let burst = (r / 1000).max(2 * 1514);
        a.extend(["tbf", "rate"].map(String::from));
        a.push(format!("{}bit", r * 8));
        a.extend(["burst".into(), burst.to_string(), "latency".into(), "50ms".into()]);
        Some(a)
    } else {
        None
    }
}

/// A time in tc units without rounding.
fn exact_time(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1000) {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}

/// What realises a link, in words (for the result's metadata).
pub fn describe(l: &Link, i: usize) -> String {
    match wire_qdisc(l, &port_name(i, true)) {
        None => "a bridge in the wire namespace, no rate/delay/loss of its own".into(),
        Some(args) => {
            let kind = if l.delay > 0 || l.loss > 0.0 { "netem" } else { "tbf" };
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
        Link { a: e("a"), b: e("b"), kind: Default::default(), rate, delay, loss, line: 1 }
    }

    #[test]
    fn wire_qdiscs() {
        assert_eq!(wire_qdisc(&link(None, 0, 0.0), "l0b"), None);
        assert_eq!(
            wire_qdisc(&link(Some(125_000_000), 0, 0.0), "l0b").unwrap().join(" "),
            "qdisc add dev l0b root handle 1: tbf rate 1000000000bit burst 125000 latency 50ms"
        );
        assert_eq!(
            wire_qdisc(&link(Some(125_000), 0, 0.0), "l0b").unwrap().join(" "),
            "qdisc add dev l0b root handle 1: tbf rate 1000000bit burst 3028 latency 50ms"
        );
        assert_eq!(
            wire_qdisc(&link(Some(12_500_000), 20_000_000, 0.5), "l0a").unwrap().join(" "),
            "qdisc add dev l0a root handle 1: netem delay 20ms loss random 0.5% rate 100000000bit limit 1167"
                .replace("1167", &((12_500_000f64 * 0.07 / 1500.0 * 2.0).ceil() as u64).max(1000).to_string())
        );
        assert!(describe(&link(Some(125_000_000), 0, 0.0), 0).starts_with("tbf on the egress"));
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

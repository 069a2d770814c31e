//! CPU cost profiles: what the simulator's CPU model charges, in nanoseconds, for each
//! step of the kernel's packet path, named after the kernel function that does it.
//!
//! A profile is data, not code: a TOML file whose every constant carries its source and
//! how it was measured (`[cost.NAME] ns = …, source = "…"`). The bundled default
//! (`profiles/default.toml` in this crate) was fitted to measurements of the real
//! kernel on the project's CI machine (`profiles/calibration/`); constants a 2-core
//! machine cannot measure (cache-line transfers between many cores) name their
//! literature source. The simulator reports everything derived from a profile as a
//! model, not a measurement.
//!
//! A scenario names a profile per host: `profile = "default"` or a path to a file of
//! the same format (relative to the scenario file). Unknown fields are errors, so a
//! misspelt cost never silently falls back to a default.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The bundled default profile.
pub const DEFAULT: &str = include_str!("../profiles/default.toml");

/// One constant: nanoseconds and where the number comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    pub ns: u64,
    pub source: String,
}

/// Per-packet costs of one qdisc kind's enqueue and dequeue (`<kind>_enqueue`,
/// `<kind>_dequeue`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdiscCost {
    pub enqueue: u64,
    pub dequeue: u64,
    pub source: String,
}

/// Every cost the CPU model charges. Field names are the kernel functions (or the
/// span of the path) they stand for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// The application's own work per send call (iperf3's loop), user time.
    pub app_send: Cost,
    /// `sendto`/`write` of one UDP datagram: syscall entry, `udp_sendmsg`, skb
    /// allocation and `ip_output` up to `dev_queue_xmit` (sys time).
    pub udp_sendmsg: Cost,
    /// `tcp_sendmsg` per skb built, without the copy of its payload.
    pub tcp_sendmsg: Cost,
    /// Copying one KiB between user and kernel memory (`copy_from_user`,
    /// `skb_copy_datagram_iter`).
    pub copy_per_kib: Cost,
    /// `tcp_write_xmit`/`__tcp_transmit_skb` per skb sent (headers, clone).
    pub tcp_transmit_skb: Cost,
    /// `__dev_queue_xmit` before the qdisc: `netdev_core_pick_tx`, `validate_xmit_skb`.
    pub dev_queue_xmit: Cost,
    /// `sch_direct_xmit`/`qdisc_restart` bookkeeping per packet sent from a qdisc.
    pub sch_direct_xmit: Cost,
    /// A NIC driver's `ndo_start_xmit` per skb (descriptor write, doorbell).
    pub ndo_start_xmit: Cost,
    /// `veth_xmit` per skb: the peer's `__netif_rx` and its `process_backlog` up to the
    /// peer's protocol handler (the receive half runs on the sending CPU).
    pub veth_xmit: Cost,
    /// TX completion per skb: the driver's TX poll, `napi_consume_skb`, BQL.
    pub napi_consume_skb: Cost,
    /// Receive per packet in the NIC's NAPI poll: descriptor, `build_skb`,
    /// `napi_gro_receive`, `__netif_receive_skb_core`.
    pub napi_gro_receive: Cost,
    /// `ip_rcv` through the routing decision (`ip_rcv_finish`, `fib_table_lookup`).
    pub ip_rcv: Cost,
    /// `ip_forward` up to the egress `dev_queue_xmit` (TTL, netfilter hooks, neighbour).
    pub ip_forward: Cost,
    /// `udp_rcv` through `__udp_enqueue_schedule_skb` (into the socket).
    pub udp_rcv: Cost,
    /// `tcp_v4_rcv` per segment (or GRO train) in softirq: ACK processing included.
    pub tcp_v4_rcv: Cost,
    /// `icmp_rcv` of an echo request up to its reply's `ip_output`.
    pub icmp_rcv: Cost,
    /// A blocked receiver's `recvmsg` returning one datagram or segment train (sys).
    pub recvmsg: Cost,
    /// `loopback_xmit` per skb (lo's driver: stats, `skb_orphan`, then `__netif_rx`).
    pub loopback_xmit: Cost,
    /// `enqueue_to_backlog` per packet (`netif_rx` of lo and of a veth without NAPI,
    /// and RPS steering): the per-CPU backlog's lock and queue.
    pub netif_rx: Cost,
    /// Raising a NET_RX softirq on another CPU (an IPI: RPS, a kicked defer list), on
    /// the sending CPU.
    pub ipi: Cost,
    /// Freeing a received skb after the socket consumed it (`__kfree_skb`,
    /// `skb_release_data`), per skb.
    pub kfree_skb: Cost,
    /// Freeing one 4 KiB page of a received skb's payload (`put_page`), per page.
    pub page_free: Cost,
    /// Software GSO (`skb_segment`) per segment, when the device does not do TSO.
    pub skb_segment: Cost,
    /// pktgen's per-packet loop in its kernel thread (`pktgen_xmit` without the
    /// `dev_queue_xmit` it calls): taking a reference on its skb, counters, pacing.
    pub pktgen_xmit: Cost,
    /// From a wake-up (`try_to_wake_up`) of a sleeping thread to it running again.
    pub wakeup_latency: Cost,
    /// The kernel lab's wire namespace (bridge between two veth pairs): latency per
    /// packet and direction. Not charged to any host's CPU.
    pub bridge_forward: Cost,
}

/// Spinlock costs (queued spinlocks: `native_queued_spin_lock_slowpath`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockCosts {
    /// Acquire and release of a lock whose line this CPU owns already.
    pub uncontended: Cost,
    /// Handing a lock (and the lines its critical section touches) to another CPU: one
    /// cache-line transfer plus the misses of the next critical section.
    pub transfer: Cost,
    /// Extra handover cost per CPU already waiting (model: coherence traffic grows
    /// with the spinners), counted up to `waiters_cap`.
    pub per_waiter: Cost,
    pub waiters_cap: u32,
}

/// A CPU cost profile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// "default", or the file it was read from.
    #[serde(skip)]
    pub origin: String,
    pub name: String,
    /// The machine it describes.
    pub machine: String,
    /// How the constants were obtained.
    pub method: String,
    pub cost: Costs,
    pub lock: LockCosts,
    /// Per qdisc kind; `default` for kinds without an entry of their own.
    pub qdisc: BTreeMap<String, QdiscCost>,
}

impl Profile {
    /// The bundled default.
    pub fn default_profile() -> Profile {
        Profile::parse(DEFAULT, "default").expect("the bundled profile parses")
    }

    /// A profile named in a scenario: "default", or a file relative to `scenario_dir`.
    pub fn load(spec: &str, scenario_dir: &Path) -> Result<Profile, String> {
        if spec == "default" {
            return Ok(Profile::default_profile());
        }
        let path = scenario_dir.join(spec);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!("unknown profile {spec:?}: not \"default\" and {} cannot be read: {e}", path.display())
        })?;
        Profile::parse(&text, &path.display().to_string())
    }

    /// Parse a profile's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, String> {
        let mut p: Profile = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim_end().replace('\n', " ");
            match e.span() {
                Some(s) => {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!("{origin}:{line}: {msg}")
                }
                None => format!("{origin}: {msg}"),
            }
        })?;
        if !p.qdisc.contains_key("default") {
            return Err(format!("{origin}: [qdisc.default] is missing (the costs of kinds without their own entry)"));
        }
        p.origin = origin.to_string();
        Ok(p)
    }

    /// The enqueue/dequeue costs of a qdisc kind.
    pub fn qdisc_cost(&self, kind: &str) -> &QdiscCost {
        self.qdisc.get(kind).unwrap_or_else(|| &self.qdisc["default"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_default_parses_and_covers_every_kind() {
        let p = Profile::default_profile();
        assert_eq!(p.origin, "default");
        assert!(p.cost.udp_sendmsg.ns > 0 && p.lock.transfer.ns > 0);
        assert_eq!(p.qdisc_cost("no-such-kind"), &p.qdisc["default"]);
    }

    #[test]
    fn errors_name_the_line() {
        let bad = DEFAULT.replacen("[cost.udp_sendmsg]", "[cost.udp_sendmsgg]", 1);
        let e = Profile::parse(&bad, "x.toml").unwrap_err();
        assert!(e.starts_with("x.toml:") && e.contains("udp_sendmsgg"), "{e}");
        let e = Profile::load("nope.toml", Path::new("/nonexistent")).unwrap_err();
        assert!(e.contains("unknown profile \"nope.toml\""), "{e}");
    }
}

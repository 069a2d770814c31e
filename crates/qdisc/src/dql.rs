//! Byte queue limits: dynamic queue limits (DQL) per transmit queue (§3 of docs/kernel-notes.md).
//!
//! A driver ring is a producer/consumer queue: the stack queues bytes (`sent`), the NIC
//! retires them and the driver reports them at TX completion (`completed`). BQL keeps
//! only as many bytes in the ring as are needed not to starve the wire between two
//! completions; everything beyond waits in the qdisc, where it can be scheduled.
//!
//! The limit is learnt from completions (mirrors `dql_completed` in
//! lib/dynamic_queue_limits.c):
//! * **starved** — the queue was over its limit and ran dry before the completion came
//!   (or it was over the limit in the previous interval and everything queued then has
//!   completed): grow the limit by the bytes sent and completed since the previous
//!   completion plus the previous over-limit;
//! * **busy the whole interval** — shrink by the smallest slack (limit beyond twice the
//!   completed bytes) seen over a hold time (1 s, `HZ` jiffies, as every txq is
//!   initialised);
//! * clamp to `[min_limit, max_limit]`.
//!
//! Counters are wrapping `u32`s compared with signed differences, as the kernel's are.
//! Stall detection (`stall_thrs`) is off by default in the kernel and not modelled.

use crate::time::{Duration, Instant};

/// `DQL_MAX_LIMIT`: `UINT_MAX / 2 - UINT_MAX / 16`.
pub const DQL_MAX_LIMIT: u32 = u32::MAX / 2 - u32::MAX / 16;

/// `x - y` if positive, else 0 (wrap-safe `POSDIFF`).
fn posdiff(x: u32, y: u32) -> u32 {
    if (x.wrapping_sub(y) as i32) > 0 {
        x.wrapping_sub(y)
    } else {
        0
    }
}

/// `x >= y` in wrapping arithmetic (`AFTER_EQ`).
fn after_eq(x: u32, y: u32) -> bool {
    (x.wrapping_sub(y) as i32) >= 0
}

/// The DQL state of one transmit queue (`struct dql`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dql {
    pub num_queued: u32,
    pub num_completed: u32,
    /// Current byte limit (sysfs `limit`).
    pub limit: u32,
    /// `limit + num_completed`: `avail = adj_limit - num_queued`.
    pub adj_limit: u32,
    pub last_obj_cnt: u32,
    pub prev_last_obj_cnt: u32,
    pub prev_num_queued: u32,
    pub prev_ovlimit: u32,
    pub lowest_slack: u32,
    pub slack_start_time: Instant,
    /// sysfs `hold_time` (default 1 s).
    pub slack_hold_time: Duration,
    /// sysfs `limit_min` (default 0).
    pub min_limit: u32,
    /// sysfs `limit_max` (default [`DQL_MAX_LIMIT`]).
    pub max_limit: u32,
}

impl Dql {
    /// `dql_init(dql, HZ)` at `now`.
    pub fn new(now: Instant) -> Self {
        let mut d = Dql {
            num_queued: 0,
            num_completed: 0,
            limit: 0,
            adj_limit: 0,
            last_obj_cnt: 0,
            prev_last_obj_cnt: 0,
            prev_num_queued: 0,
            prev_ovlimit: 0,
            lowest_slack: u32::MAX,
            slack_start_time: now,
            slack_hold_time: Duration::from_secs(1),
            min_limit: 0,
            max_limit: DQL_MAX_LIMIT,
        };
        d.reset(now);
        d
    }

    /// `dql_reset`: limit back to `min_limit`, everything else cleared.
    pub fn reset(&mut self, now: Instant) {
        self.limit = self.min_limit;
        self.adj_limit = self.min_limit;
        self.num_queued = 0;
        self.num_completed = 0;
        self.last_obj_cnt = 0;
        self.prev_num_queued = 0;
        self.prev_last_obj_cnt = 0;
        self.prev_ovlimit = 0;
        self.lowest_slack = u32::MAX;
        self.slack_start_time = now;
    }

    /// `dql_avail`: bytes that may still be queued (negative: over the limit).
    pub fn avail(&self) -> i32 {
        self.adj_limit.wrapping_sub(self.num_queued) as i32
    }

    /// Bytes handed to the device and not completed yet.
    pub fn inflight(&self) -> u32 {
        self.num_queued.wrapping_sub(self.num_completed)
    }

    /// `dql_queued` (`netdev_tx_sent_queue`): `count` bytes handed to the driver.
    /// Returns whether the queue must now stop (`avail < 0`, STACK_XOFF).
    pub fn queued(&mut self, count: u32) -> bool {
        self.last_obj_cnt = count;
        self.num_queued = self.num_queued.wrapping_add(count);
        self.avail() < 0
    }

    /// `dql_completed` (`netdev_tx_completed_queue`): `count` bytes completed at `now`.
    pub fn completed(&mut self, count: u32, now: Instant) {
        let num_queued = self.num_queued;
        debug_assert!(count <= num_queued.wrapping_sub(self.num_completed), "completing more than queued");
        let completed = self.num_completed.wrapping_add(count);
        let mut limit = self.limit;
        let mut ovlimit = posdiff(num_queued.wrapping_sub(self.num_completed), limit);
        let inprogress = num_queued.wrapping_sub(completed);
        let prev_inprogress = self.prev_num_queued.wrapping_sub(self.num_completed);
        let all_prev_completed = after_eq(completed, self.prev_num_queued);

        if (ovlimit != 0 && inprogress == 0) || (self.prev_ovlimit != 0 && all_prev_completed) {
            // Starved: grow by what could have been sent meanwhile.
            limit = limit.wrapping_add(posdiff(completed, self.prev_num_queued)).wrapping_add(self.prev_ovlimit);
            self.slack_start_time = now;
            self.lowest_slack = u32::MAX;
        } else if inprogress != 0 && prev_inprogress != 0 && !all_prev_completed {
            // Busy all interval: remember the smallest excess, shed it after hold time.
            let mut slack = posdiff(
                limit.wrapping_add(self.prev_ovlimit),
                completed.wrapping_sub(self.num_completed).wrapping_mul(2),
            );
            let slack_last_objs =
                if self.prev_ovlimit != 0 { posdiff(self.prev_last_obj_cnt, self.prev_ovlimit) } else { 0 };
            slack = slack.max(slack_last_objs);
            self.lowest_slack = self.lowest_slack.min(slack);
            if now > self.slack_start_time + self.slack_hold_time {
                limit = posdiff(limit, self.lowest_slack);
                self.slack_start_time = now;
                self.lowest_slack = u32::MAX;
            }
        }

        limit = limit.clamp(self.min_limit, self.max_limit);
        if limit != self.limit {
            self.limit = limit;
            ovlimit = 0;
        }
        self.adj_limit = limit.wrapping_add(completed);
        self.prev_ovlimit = ovlimit;
        self.prev_last_obj_cnt = self.last_obj_cnt;
        self.num_completed = completed;
        self.prev_num_queued = num_queued;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn first_packet_stops_the_queue_and_its_completion_grows_the_limit() {
        let mut d = Dql::new(t(0));
        assert_eq!(d.avail(), 0);
        // limit 0: one packet puts the queue over its limit.
        assert!(d.queued(1514));
        assert_eq!(d.avail(), -1514);
        // Completion with nothing else in flight: starved, limit grows by the
        // completed bytes beyond prev_num_queued (0) plus prev_ovlimit (0) = 1514.
        d.completed(1514, t(10));
        assert_eq!(d.limit, 1514);
        assert_eq!(d.adj_limit, 1514 + 1514);
        assert_eq!(d.avail(), 1514);
        assert_eq!(d.prev_ovlimit, 0, "limit changed: over-limit is forgotten");
        // Two packets: the second goes over; both complete together → starved again,
        // grow by completed − prev_num_queued = 3028 + 0 (prev_ovlimit 0).
        assert!(!d.queued(1514));
        assert!(d.queued(1514));
        d.completed(3028, t(20));
        assert_eq!(d.limit, 1514 + 3028);
    }

    #[test]
    fn busy_queue_sheds_slack_after_hold_time() {
        let mut d = Dql::new(t(0));
        d.limit = 100_000;
        d.adj_limit = 100_000;
        // Keep ~30 kB in flight, completing 10 kB at a time: slack = 100000 − 20000.
        d.queued(30_000);
        d.completed(10_000, t(100));
        d.queued(10_000);
        d.completed(10_000, t(200));
        assert_eq!(d.limit, 100_000, "not before the hold time");
        assert_eq!(d.lowest_slack, 80_000);
        d.queued(10_000);
        d.completed(10_000, Instant::from_millis(1001));
        assert_eq!(d.limit, 20_000, "limit − lowest slack (80000)");
        assert_eq!(d.lowest_slack, u32::MAX);
    }

    #[test]
    fn clamps_to_limit_min_and_max() {
        let mut d = Dql::new(t(0));
        d.max_limit = 2000;
        d.queued(1514);
        d.queued(1514);
        d.completed(3028, t(5));
        assert_eq!(d.limit, 2000);
        d.min_limit = 5000;
        d.reset(t(6));
        assert_eq!((d.limit, d.avail()), (5000, 5000));
    }

    #[test]
    fn wrapping_counters() {
        let mut d = Dql::new(t(0));
        d.num_queued = u32::MAX - 100;
        d.num_completed = u32::MAX - 100;
        d.prev_num_queued = u32::MAX - 100;
        d.adj_limit = d.num_completed;
        assert!(d.queued(1514));
        d.completed(1514, t(1));
        assert_eq!(d.limit, 1514);
        assert_eq!(d.inflight(), 0);
    }
}

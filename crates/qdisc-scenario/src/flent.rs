//! A [`RunResult`] as a flent data file (`.flent.gz`), so flent's own loader and
//! plotter (`flent -i FILE -p totals`, `-f csv`, its GUI) read any backend's run.
//!
//! The format is flent 2.3's (`ResultSet.serialise` in tohojo/flent
//! `flent/resultset.py`, file format version 4): one JSON object
//!
//! ```text
//! { "version": 4,
//!   "metadata":   { NAME, TITLE, TIME, T0, LENGTH, TOTAL_LENGTH, STEP_SIZE, HOST, HOSTS,
//!                   LOCAL_HOST, TEST_PARAMETERS, SERIES_META{series → {UNITS, MEAN_VALUE…}},
//!                   FLENT_VERSION, IP_VERSION, KERNEL_NAME, KERNEL_RELEASE, NOTE, … },
//!   "x_values":   [0, STEP_SIZE, 2·STEP_SIZE, …],              seconds from T0
//!   "results":    { series → [value | null per x] },            interpolated
//!   "raw_values": { series → [{t, val, …} per measurement] } }  t: Unix time
//! ```
//!
//! gzip-compressed with a zero mtime and no file name, so the bytes depend only on the
//! result.
//!
//! How a scenario maps onto a flent test. flent runs on one machine (the "local host")
//! against a server: the local host here is the `from` of the first ping entry, else of
//! the first tcp entry. Every tcp stream that host sends is an upload, every tcp stream
//! it receives a download:
//!
//! | traffic of the local host       | flent test       | series                                   |
//! |---------------------------------|------------------|------------------------------------------|
//! | uploads only                    | `tcp_nup`        | `TCP upload::1` … `TCP upload::N`        |
//! | downloads only                  | `tcp_ndown`      | `TCP download::1` …                      |
//! | both                            | `rrul_be_nflows` | `TCP upload BE::1` …, `TCP download BE::1` … |
//! | no tcp, a ping                  | `ping`           | —                                        |
//!
//! plus `Ping (ms) ICMP` from the first ping entry of the local host. Streams are
//! numbered across entries in file order; the test parameters (`upload_streams`,
//! `download_streams`) say how many there are, as `flent -t upload_streams=N` would.
//! What flent computes from these (`TCP upload sum`, `avg`, `fairness`, `TCP totals`)
//! is left to flent, which computes it when it loads the file. Entries flent cannot
//! show — udp, tcp between two other hosts, further pings — are not in the file and
//! are listed in `NOTE`.
//!
//! Values: a tcp stream's measurements are its interval reports (`t` = the interval's
//! end, `val` = Mbit/s, `dur` = its length, `tcp_rtt` = the sender's smoothed RTT in ms
//! where the result has it), as flent's netperf runner records netperf's interim
//! results; a ping's are its replies (`t` = arrival, `val` = RTT in ms, `seq`).
//! `results` is flent's timeseries aggregation of those measurements
//! (`TimeseriesAggregator.aggregate` in `flent/aggregators.py`): steps of `STEP_SIZE`
//! (the result's reporting interval) from the first measurement `T0`, each series
//! linearly interpolated between its neighbours no more than 5 steps apart. Times are
//! the scenario clock plus the run's wall-clock start (`wallclock.started_at`); a
//! backend without a wall clock (the simulator) starts at the Unix epoch,
//! 1970-01-01T00:00:00Z, so the same result gives the same bytes. `DELAY` is 0: flent
//! idles DELAY seconds before and after its streams and cuts that off its CDF and box
//! plots, a scenario has no such frame.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Map, Value};

use crate::iperf3::{civil_from_days, unix_of_rfc3339};
use crate::result::{RunResult, TrafficResult};

/// The flent release whose data format this writes.
pub const FLENT_VERSION: &str = "2.3.0";
/// flent's `FILEFORMAT_VERSION` (flent/resultset.py).
const FILEFORMAT_VERSION: u32 = 4;
/// flent's `TimeseriesAggregator`: a value is interpolated from measurements at most
/// this many steps away.
const MAX_DISTANCE_STEPS: f64 = 5.0;

/// The flent data file of `r`, gzip-compressed (what `flent` writes as `*.flent.gz`).
pub fn to_flent_gz(r: &RunResult) -> Result<Vec<u8>, String> {
    let text = to_flent_json(r)?;
    let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).and_then(|_| gz.finish()).map_err(|e| format!("gzip: {e}"))
}

/// The flent data file of `r`, uncompressed JSON (flent also reads this, as `*.flent`).
pub fn to_flent_json(r: &RunResult) -> Result<String, String> {
    Ok(serde_json::to_string_pretty(&document(r)?).expect("serialises") + "\n")
}

/// One measured series: its name, flent's per-series metadata, and its measurements
/// (time on the scenario clock, value, the rest of the raw record).
struct Series {
    name: String,
    meta: Map<String, Value>,
    points: Vec<(f64, f64, Map<String, Value>)>,
}

fn document(r: &RunResult) -> Result<Value, String> {
    let ping = r.rtt.first();
    let local = match (ping, r.throughput.iter().find(|t| t.kind == "tcp")) {
        (Some(p), _) => p.from.clone(),
        (None, Some(t)) => t.from.clone(),
        (None, None) => return Err("no tcp or ping traffic: nothing a flent test shows".into()),
    };
    let mut skipped = Vec::new();
    let (mut up, mut down): (Vec<&TrafficResult>, Vec<&TrafficResult>) = (Vec::new(), Vec::new());
    for t in &r.throughput {
        match t.kind.as_str() {
            "tcp" if t.from == local && t.to != local => up.push(t),
            "tcp" if t.to == local && t.from != local => down.push(t),
            _ => skipped.push(format!("traffic[{}] ({} {} -> {})", t.traffic, t.kind, t.from, t.to)),
        }
    }
    let ping = ping.filter(|p| p.from == local);
    for p in r.rtt.iter().filter(|p| !ping.is_some_and(|q| std::ptr::eq(*p, q))) {
        skipped.push(format!("traffic[{}] (ping {} -> {})", p.traffic, p.from, p.to));
    }
    let streams = |ts: &[&TrafficResult]| ts.iter().map(|t| t.streams.len()).sum::<usize>();
    let (name, up_prefix, down_prefix) = match (up.is_empty(), down.is_empty()) {
        (false, true) => ("tcp_nup", "TCP upload", ""),
        (true, false) => ("tcp_ndown", "", "TCP download"),
        (false, false) => ("rrul_be_nflows", "TCP upload BE", "TCP download BE"),
        (true, true) if ping.is_some() => ("ping", "", ""),
        (true, true) => return Err(format!("no traffic of host {local:?} that a flent test shows")),
    };
    let mut params = Map::new();
    if !up.is_empty() {
        params.insert("upload_streams".into(), streams(&up).to_string().into());
    }
    if !down.is_empty() {
        params.insert("download_streams".into(), streams(&down).to_string().into());
    }

    let mut series = Vec::new();
    for (prefix, entries) in [(up_prefix, &up), (down_prefix, &down)] {
        let mut k = 0;
        for t in entries.iter() {
            for s in &t.streams {
                k += 1;
                let mut meta = Map::new();
                meta.insert("UNITS".into(), "Mbits/s".into());
                meta.insert("MEAN_VALUE".into(), (s.sender.bits_per_second / 1e6).into());
                meta.insert("ELAPSED_TIME".into(), s.sender.seconds.into());
                meta.insert("BYTES_SENT".into(), s.sender.bytes.into());
                meta.insert("BYTES_RECVD".into(), s.receiver.bytes.into());
                if let Some(cc) = &t.cc {
                    meta.insert("CONG_CONTROL".into(), cc.clone().into());
                }
                if let Some(mss) = t.tcp_mss {
                    meta.insert("TCP_MSS".into(), mss.into());
                }
                if let Some(rx) = s.sender.retransmits {
                    meta.insert("TCP_RETRANSMIT".into(), rx.into());
                }
                let points = s
                    .intervals
                    .iter()
                    .map(|iv| {
                        let mut raw = Map::new();
                        raw.insert("dur".into(), (iv.end - iv.start).into());
                        if let Some(us) = iv.tcp_rtt_us {
                            raw.insert("tcp_rtt".into(), (us as f64 / 1000.0).into());
                        }
                        (iv.end, iv.bits_per_second / 1e6, raw)
                    })
                    .collect();
                series.push(Series { name: format!("{prefix}::{k}"), meta, points });
            }
        }
    }
    if let Some(p) = ping {
        let mut meta = Map::new();
        meta.insert("UNITS".into(), "ms".into());
        if let Some(st) = &p.stats {
            meta.insert("MEAN_VALUE".into(), st.avg.into());
            meta.insert("MIN_VALUE".into(), st.min.into());
            meta.insert("MAX_VALUE".into(), st.max.into());
        }
        let points = p
            .samples
            .iter()
            .map(|s| {
                let mut raw = Map::new();
                raw.insert("seq".into(), (s.seq as f64).into());
                (s.t, s.rtt_ms, raw)
            })
            .collect();
        series.push(Series { name: "Ping (ms) ICMP".into(), meta, points });
    }

    let epoch = match &r.wallclock {
        Some(w) => unix_of_rfc3339(&w.started_at)
            .ok_or_else(|| format!("wallclock.started_at {:?} is not RFC 3339 UTC", w.started_at))?,
        None => 0.0,
    };
    let step = r.metadata.interval_s;
    if !step.is_finite() || step <= 0.0 {
        return Err(format!("metadata.interval_s {step} is not a positive step"));
    }
    let measured: Vec<Vec<(f64, f64)>> =
        series.iter().map(|s| s.points.iter().map(|(t, v, _)| (epoch + t, *v)).collect()).collect();
    let (t0, x_values, columns) = aggregate(&measured, step)
        .ok_or_else(|| "no measurement in any series (no interval report, no ping reply)".to_string())?;

    let server = ping.map(|p| p.dst.clone()).or_else(|| up.first().or(down.first()).map(|t| t.dst.clone()));
    let mut results = Map::new();
    let mut raw_values = Map::new();
    let mut series_meta = Map::new();
    for (s, col) in series.into_iter().zip(columns) {
        results.insert(s.name.clone(), col.into_iter().map(Value::from).collect());
        let raw: Vec<Value> = s
            .points
            .into_iter()
            .map(|(t, v, mut raw)| {
                raw.insert("t".into(), (epoch + t).into());
                raw.insert("val".into(), v.into());
                Value::Object(raw)
            })
            .collect();
        raw_values.insert(s.name.clone(), raw.into());
        series_meta.insert(s.name, s.meta.into());
    }
    let m = &r.metadata;
    let time = iso_utc(epoch);
    let mut note = format!("written by qdisc-lab {} from a {} backend run", m.qdisc_lab, m.backend);
    if !skipped.is_empty() {
        note += &format!("; not shown (no flent series for them): {}", skipped.join(", "));
    }
    let data_filename = format!("{name}-{}.flent.gz", time.trim_end_matches('Z').replace(':', ""));
    let metadata: BTreeMap<&str, Value> = BTreeMap::from([
        ("NAME", name.into()),
        ("TITLE", r.scenario.name.clone().into()),
        ("NOTE", note.into()),
        ("TIME", time.into()),
        ("T0", iso_utc(t0).into()),
        ("LENGTH", r.scenario.duration_s.into()),
        ("TOTAL_LENGTH", r.scenario.duration_s.into()),
        // flent frames its streams with DELAY idle seconds and cuts them off its box
        // and CDF plots; a scenario has no such frame (flent reads every metadata key
        // as a setting).
        ("DELAY", 0.into()),
        ("STEP_SIZE", step.into()),
        ("HOST", server.clone().into()),
        ("HOSTS", server.map(|s| vec![Value::from(s)]).unwrap_or_default().into()),
        ("LOCAL_HOST", local.into()),
        ("IP_VERSION", 4.into()),
        ("TEST_PARAMETERS", params.into()),
        ("SERIES_META", series_meta.into()),
        ("FLENT_VERSION", FLENT_VERSION.into()),
        ("DATA_FILENAME", data_filename.into()),
        ("KERNEL_NAME", "Linux".into()),
        ("KERNEL_RELEASE", m.kernel.clone().into()),
        ("FAILED_RUNNERS", 0.into()),
        ("BATCH_NAME", Value::Null),
        ("BATCH_TIME", Value::Null),
        ("BATCH_TITLE", Value::Null),
        ("BATCH_UUID", Value::Null),
    ]);
    Ok(json!({
        "version": FILEFORMAT_VERSION,
        "metadata": metadata,
        "x_values": x_values,
        "results": results,
        "raw_values": raw_values,
    }))
}

/// flent's timeseries aggregation (mirrors `TimeseriesAggregator.aggregate`, flent
/// 2.3): from `t0`, the earliest first measurement, as many steps as reach past the
/// latest last one; at each step every series takes the value interpolated between
/// its measurements either side, or the next one alone before its first (only within
/// half a step) and after its last (once), or nothing when the nearest is more than
/// [`MAX_DISTANCE_STEPS`] steps away. Returns `(t0, x values, one column per series)`;
/// `None` when no series has a measurement.
#[allow(clippy::type_complexity)]
fn aggregate(series: &[Vec<(f64, f64)>], step: f64) -> Option<(f64, Vec<f64>, Vec<Vec<Option<f64>>>)> {
    let t0 = series.iter().filter_map(|s| s.first()).map(|p| p.0).reduce(f64::min)?;
    let t_max = series.iter().filter_map(|s| s.last()).map(|p| p.0).reduce(f64::max)?;
    let steps = ((t_max - t0) / step).ceil() as usize;
    let mut x_values = Vec::with_capacity(steps);
    let mut columns: Vec<Vec<Option<f64>>> = vec![Vec::with_capacity(steps); series.len()];
    for k in 0..steps {
        x_values.push(step * k as f64);
        let t = t0 + step * k as f64;
        for (s, col) in series.iter().zip(columns.iter_mut()) {
            if s.is_empty() {
                // flent leaves a series without measurements out of the step; its
                // column still gets a null there (ResultSet.append_datapoint).
                col.push(None);
                continue;
            }
            let mut max_dist = step * MAX_DISTANCE_STEPS;
            let (prev, next, last) = match s.iter().position(|p| p.0 > t) {
                Some(0) => {
                    max_dist = step * 0.5;
                    (None, s[0], false)
                }
                Some(i) => (Some(s[i - 1]), s[i], false),
                None => (None, s[s.len() - 1], true),
            };
            let v = if (t - next.0).abs() > max_dist {
                None
            } else {
                match prev {
                    None if last && col.last().is_none_or(|v| *v == Some(next.1) || v.is_none()) => None,
                    None => Some(next.1),
                    Some(p) => Some(p.1 + (next.1 - p.1) / (next.0 - p.0) * (t - p.0)),
                }
            };
            col.push(v);
        }
    }
    Some((t0, x_values, columns))
}

/// flent's time format for metadata: `%Y-%m-%dT%H:%M:%S.%fZ` (UTC, microseconds).
fn iso_utc(unix: f64) -> String {
    let micros = (unix * 1e6).round() as i64;
    let (secs, us) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{us:06}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_host() -> RunResult {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../qdisc-lab/tests/fixtures/small-host-a.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn doc(r: &RunResult) -> Value {
        serde_json::from_str(&to_flent_json(r).unwrap()).unwrap()
    }

    /// A real host run (2 cubic uploads and a ping): tcp_nup, the raw records are the
    /// result's numbers on the wall clock, and the bytes are the same every time.
    #[test]
    fn uploads_and_a_ping_are_tcp_nup() {
        let r = small_host();
        let d = doc(&r);
        let m = &d["metadata"];
        assert_eq!(m["NAME"], "tcp_nup");
        assert_eq!(m["TEST_PARAMETERS"], json!({"upload_streams": "2"}));
        assert_eq!(m["TIME"], "2026-11-22T13:20:06.216000Z");
        assert_eq!(
            (&m["HOST"], &m["LOCAL_HOST"], &m["STEP_SIZE"]),
            (&json!("10.1.0.2"), &json!("client"), &json!(0.1))
        );
        assert_eq!(m["SERIES_META"]["TCP upload::2"]["CONG_CONTROL"], "cubic");
        let epoch = 1_795_353_606.216;
        let iv = &r.throughput[0].streams[1].intervals[3];
        let raw = &d["raw_values"]["TCP upload::2"][3];
        assert_eq!(raw["t"], epoch + iv.end);
        assert_eq!(raw["val"], iv.bits_per_second / 1e6);
        assert_eq!(raw["tcp_rtt"], iv.tcp_rtt_us.unwrap() as f64 / 1000.0);
        let ping = &r.rtt[0].samples[5];
        assert_eq!(
            d["raw_values"]["Ping (ms) ICMP"][5],
            json!({"t": epoch + ping.t, "val": ping.rtt_ms, "seq": ping.seq as f64})
        );
        assert_eq!(d["raw_values"]["Ping (ms) ICMP"].as_array().unwrap().len(), r.rtt[0].samples.len());
        // T0 is the first measurement: the first ping reply (before any interval's end).
        assert_eq!(m["T0"], iso_utc(epoch + r.rtt[0].samples[0].t));
        let gz = to_flent_gz(&r).unwrap();
        assert_eq!(gz, to_flent_gz(&r).unwrap());
        assert_eq!(&gz[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255], "gzip header: no name, mtime 0");
    }

    #[test]
    fn downloads_ping_only_and_nothing_to_show() {
        let mut r = small_host();
        let t = &mut r.throughput[0];
        (t.from, t.to) = (t.to.clone(), t.from.clone());
        let d = doc(&r);
        assert_eq!(d["metadata"]["NAME"], "tcp_ndown");
        assert_eq!(d["metadata"]["TEST_PARAMETERS"], json!({"download_streams": "2"}));
        assert!(d["results"]["TCP download::1"].is_array());
        // A udp entry is left out and named.
        r.throughput[0].kind = "udp".into();
        let d = doc(&r);
        assert_eq!(d["metadata"]["NAME"], "ping");
        assert!(d["metadata"]["NOTE"]
            .as_str()
            .unwrap()
            .ends_with("not shown (no flent series for them): traffic[0] (udp server -> client)"));
        assert_eq!(d["results"].as_object().unwrap().keys().collect::<Vec<_>>(), ["Ping (ms) ICMP"]);
        r.rtt.clear();
        assert_eq!(to_flent_json(&r).unwrap_err(), "no tcp or ping traffic: nothing a flent test shows");
    }

    #[test]
    fn iso_times_as_flent_writes_them() {
        assert_eq!(iso_utc(0.0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(iso_utc(1_795_353_398.25), "2026-11-22T13:16:38.250000Z");
    }

    /// Hand-computed steps of flent's aggregation: interpolation between neighbours,
    /// the first value only within half a step, the last value once, gaps past 5 steps.
    #[test]
    fn aggregation_follows_flent() {
        let a = vec![(10.0, 1.0), (10.5, 2.0)];
        let b = vec![(10.25, 4.0), (10.75, 8.0), (13.0, 0.0)];
        let (t0, x, cols) = aggregate(&[a, b], 0.25).unwrap();
        assert_eq!(t0, 10.0);
        // ceil((13 - 10) / 0.25) = 12 steps.
        assert_eq!(x, (0..12).map(|k| 0.25 * k as f64).collect::<Vec<_>>());
        // a: t=10 → next is 10.5 (the first after t), prev 10.0: 1.0; t=10.25 → 1.5;
        // t=10.5 → past its last: 2.0 once (the previous value 1.5 differs), then
        // None (the previous value is 2.0), then None for good.
        assert_eq!(&cols[0][..4], &[Some(1.0), Some(1.5), Some(2.0), None]);
        assert!(cols[0][4..].iter().all(Option::is_none));
        // b: t=10 → before its first, 0.25 away, more than half a step → None;
        // t=10.25 → 4.0; t=10.5 → 4 + 8·0.25 = 6.0; t=10.75 → the next (13.0) is
        // 2.25 s = 9 steps away → None, up to t=11.5 (1.5 s away); t=11.75 is
        // exactly 5 steps away → interpolated.
        assert_eq!(&cols[1][..4], &[None, Some(4.0), Some(6.0), None]);
        assert!(cols[1][3..7].iter().all(Option::is_none));
        assert_eq!(cols[1][7], Some(8.0 + (0.0 - 8.0) / (13.0 - 10.75) * (11.75 - 10.75)));
        assert_eq!(aggregate(&[vec![], vec![]], 0.1), None);
    }
}

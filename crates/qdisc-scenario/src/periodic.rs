//! [`Periodic`]: a run's periodic tc snapshots, kept out of memory.
//!
//! A snapshot holds every qdisc's and class's `tc -s -j` figures, so over a long run (a
//! snapshot every 100 ms) or a large tree they are most of a result: 36,000 of them for
//! an hour. The simulator appends each one, as `tc` printed it, to an unlinked temporary
//! file as it is taken, and they are read back one at a time when the result is written
//! or plotted: memory does not grow with the run's duration. The JSON they serialise to
//! is exactly that of the `Vec<TcSample>` they stand for (the schema says so too).

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::ser::{Error as _, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::result::{DeviceSnapshot, TcSample};

/// The periodic snapshots of a run, in the order taken.
pub struct Periodic {
    store: Store,
}

enum Store {
    Mem(Vec<TcSample>),
    /// `len` records appended to an unlinked file (freed when the last handle closes, a
    /// crash included); `end` is where the next one goes.
    File {
        file: Arc<File>,
        end: u64,
        len: usize,
    },
}

/// The JSON of one device's tc output: an array, or an empty one when it is not JSON
/// (what a snapshot records for a `tc` that printed an error).
pub fn parse_tc_json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or(serde_json::Value::Array(Vec::new()))
}

impl Periodic {
    /// An empty list that spills to a temporary file as samples come in (in memory when
    /// no temporary file can be made).
    pub fn spilled() -> Periodic {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "qdisc-lab-periodic-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::options().read(true).write(true).create_new(true).open(&path);
        let store = match file {
            Ok(f) if std::fs::remove_file(&path).is_ok() => Store::File { file: Arc::new(f), end: 0, len: 0 },
            _ => Store::Mem(Vec::new()),
        };
        Periodic { store }
    }

    pub fn len(&self) -> usize {
        match &self.store {
            Store::Mem(v) => v.len(),
            Store::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Samples held in memory (0 when spilled): what a test of bounded memory checks.
    pub fn in_memory(&self) -> usize {
        match &self.store {
            Store::Mem(v) => v.len(),
            Store::File { .. } => 0,
        }
    }

    /// Append a sample taken at `t`: per device (host, dev, `tc -s -j qdisc show`,
    /// `tc -s -j class show`) as tc printed them, parsed only when read back.
    pub fn push_raw<'a>(&mut self, t: f64, devices: impl IntoIterator<Item = [&'a str; 4]>) -> std::io::Result<()> {
        match &mut self.store {
            Store::Mem(v) => {
                let devices = devices.into_iter().map(|[host, dev, q, c]| device(host, dev, q, c)).collect();
                v.push(TcSample { t, devices });
            }
            Store::File { file, end, len } => {
                // t, then each device's four strings length-prefixed (length + 1); a 0
                // ends the record.
                let mut rec = t.to_bits().to_le_bytes().to_vec();
                for s in devices.into_iter().flatten() {
                    rec.extend_from_slice(&(s.len() as u64 + 1).to_le_bytes());
                    rec.extend_from_slice(s.as_bytes());
                }
                rec.extend_from_slice(&0u64.to_le_bytes());
                file.write_all_at(&rec, *end)?;
                *end += rec.len() as u64;
                *len += 1;
            }
        }
        Ok(())
    }

    /// Append a parsed sample (a periodic sample has no `tc -s` text: none is kept).
    pub fn push(&mut self, sample: TcSample) -> std::io::Result<()> {
        if let Store::Mem(v) = &mut self.store {
            v.push(sample);
            return Ok(());
        }
        let json: Vec<[String; 2]> =
            sample.devices.iter().map(|d| [d.qdisc.to_string(), d.class.to_string()]).collect();
        let devices = sample.devices.iter().zip(&json).map(|(d, [q, c])| [d.host.as_str(), &d.dev, q, c]);
        self.push_raw(sample.t, devices)
    }

    /// The samples, read back one at a time.
    pub fn iter(&self) -> Box<dyn Iterator<Item = TcSample> + '_> {
        match &self.store {
            Store::Mem(v) => Box::new(v.iter().cloned()),
            Store::File { file, len, .. } => {
                Box::new(read_back(file, *len).map(|x| x.expect("reading back the tc snapshots' temporary file")))
            }
        }
    }

    pub fn last(&self) -> Option<TcSample> {
        self.iter().last()
    }
}

fn device(host: &str, dev: &str, qdisc: &str, class: &str) -> DeviceSnapshot {
    DeviceSnapshot {
        host: host.into(),
        dev: dev.into(),
        qdisc: parse_tc_json(qdisc),
        class: parse_tc_json(class),
        qdisc_text: None,
        class_text: None,
    }
}

/// Reads a file from `pos` on, without moving its shared offset.
struct At<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The first `len` records of `file`, one at a time.
fn read_back(file: &File, len: usize) -> impl Iterator<Item = std::io::Result<TcSample>> + '_ {
    let mut r = BufReader::with_capacity(1 << 16, At { file, pos: 0 });
    (0..len).map(move |_| read_record(&mut r))
}

fn read_record(r: &mut impl Read) -> std::io::Result<TcSample> {
    let mut word = [0u8; 8];
    let mut next = |r: &mut dyn Read| -> std::io::Result<u64> {
        r.read_exact(&mut word)?;
        Ok(u64::from_le_bytes(word))
    };
    let t = f64::from_bits(next(r)?);
    let mut strings = Vec::with_capacity(4);
    let mut devices = Vec::new();
    loop {
        let n = next(r)?;
        if n == 0 {
            break;
        }
        let mut s = vec![0u8; n as usize - 1];
        r.read_exact(&mut s)?;
        strings.push(String::from_utf8(s).map_err(std::io::Error::other)?);
        if let [host, dev, q, c] = &strings[..] {
            devices.push(device(host, dev, q, c));
            strings.clear();
        }
    }
    Ok(TcSample { t, devices })
}

impl From<Vec<TcSample>> for Periodic {
    fn from(v: Vec<TcSample>) -> Periodic {
        Periodic { store: Store::Mem(v) }
    }
}

impl Default for Periodic {
    fn default() -> Periodic {
        Periodic::from(Vec::new())
    }
}

impl FromIterator<TcSample> for Periodic {
    fn from_iter<I: IntoIterator<Item = TcSample>>(it: I) -> Periodic {
        Periodic::from(it.into_iter().collect::<Vec<_>>())
    }
}

/// A copy in memory (results are cloned only by tests and small tools).
impl Clone for Periodic {
    fn clone(&self) -> Periodic {
        self.iter().collect()
    }
}

impl PartialEq for Periodic {
    fn eq(&self, other: &Periodic) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Periodic {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        match &self.store {
            Store::Mem(v) => v.iter().try_for_each(|x| seq.serialize_element(x))?,
            Store::File { file, len, .. } => {
                for x in read_back(file, *len) {
                    seq.serialize_element(&x.map_err(S::Error::custom)?)?;
                }
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Periodic {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Periodic, D::Error> {
        Vec::<TcSample>::deserialize(d).map(Periodic::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_samples_read_back_as_they_were() {
        let dev = |host: &str, q: serde_json::Value| DeviceSnapshot {
            host: host.into(),
            dev: "eth0".into(),
            qdisc: q,
            class: serde_json::json!([]),
            qdisc_text: None,
            class_text: None,
        };
        let samples = vec![
            TcSample { t: 0.0, devices: vec![] },
            TcSample {
                t: 0.1,
                devices: vec![
                    dev("a", serde_json::json!([{"kind": "htb", "bytes": u64::MAX, "rate": 0.30000000000000004}])),
                    dev("link[0]", serde_json::json!([{"kind": "tbf", "note": "é \" \n"}])),
                ],
            },
        ];
        let mut spilled = Periodic::spilled();
        for x in &samples {
            spilled.push(x.clone()).unwrap();
        }
        // tc's output that is not JSON reads back as an empty list, as it did parsed.
        spilled.push_raw(0.2, [["b", "eth1", "Error: no device", "[]"]]).unwrap();
        let mut mem = Periodic::from(samples);
        mem.push(TcSample {
            t: 0.2,
            devices: vec![DeviceSnapshot { dev: "eth1".into(), ..dev("b", serde_json::json!([])) }],
        })
        .unwrap();
        assert_eq!((spilled.len(), spilled.in_memory(), mem.in_memory()), (3, 0, 3));
        assert_eq!(spilled, mem);
        assert_eq!(serde_json::to_string_pretty(&spilled).unwrap(), serde_json::to_string_pretty(&mem).unwrap());
        // Two readers at once, and a copy in memory.
        assert_eq!(spilled.iter().zip(spilled.iter()).filter(|(a, b)| a == b).count(), 3);
        assert_eq!(spilled.clone().in_memory(), 3);
        assert_eq!(spilled.last().unwrap().devices[0].dev, "eth1");
    }
}

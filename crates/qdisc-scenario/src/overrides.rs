//! Scenario overrides: `PATH=VALUE` edits of a scenario's TOML, shared by
//! `qdisc-lab run --set` and the Python package (`Scenario.set`, sweep grids).
//!
//! A path names a key of the file as written: `duration`, `seed`, `link[1].rate`,
//! `traffic[0].flows`, `host[0].cpus`, `tc.router.script`, `link[0].between[1]`.
//! `host`, `link` and `traffic` are arrays of tables (`[[link]]`), indexed from 0;
//! `tc` is a table of tables keyed by host name.
//!
//! The document is edited with `toml_edit`, not re-serialised: every line an override
//! does not touch keeps its text (and, above the first edit, its line number), so the
//! loader's `FILE:LINE:COL` messages still point into something the user recognises.
//! The edited text is then validated by the one loader ([`Scenario::from_bytes`]); an
//! error about a field an override set is prefixed with that override, so a sweep
//! refused before it starts says which grid value is wrong. A path that leads nowhere
//! (an unknown array, an index out of range) is refused here, naming what exists; an
//! unknown key at the end of a path is left to the loader, which lists the known ones.

use toml_edit::{DocumentMut, Item, Table, TableLike, Value};

use crate::Scenario;

/// One `PATH=VALUE` edit.
#[derive(Debug, Clone)]
pub struct Override {
    pub path: String,
    pub value: Value,
}

impl Override {
    /// `PATH=VALUE` as given on a command line: VALUE is a TOML literal if it parses
    /// as one (`100`, `true`, `"x"`, `[1, 2]`), else a string (`10mbit`, `fq_codel`).
    pub fn parse(arg: &str) -> Result<Override, String> {
        let Some((path, value)) = arg.split_once('=') else {
            return Err(format!("{arg:?}: expected PATH=VALUE (e.g. link[0].rate=10mbit)"));
        };
        let path = path.trim();
        if path.is_empty() {
            return Err(format!("{arg:?}: empty PATH (e.g. link[0].rate=10mbit)"));
        }
        Ok(Override { path: path.to_string(), value: literal(value) })
    }

    /// `PATH=VALUE` with the value as TOML writes it (`link[0].rate="10mbit"`).
    pub fn describe(&self) -> String {
        format!("{}={}", self.path, self.value.to_string().trim())
    }
}

/// A command-line value: a TOML literal if it is one, else the text as a string.
pub fn literal(text: &str) -> Value {
    let t = text.trim();
    match t.parse::<Value>() {
        // A bare word that TOML reads as a number (`inf`, `nan`) is meant as text.
        Ok(Value::Float(f)) if !f.value().is_finite() => Value::from(text),
        Ok(v) => v,
        Err(_) => Value::from(text),
    }
}

/// One step of a path: a key, and an index when the key names an array.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    key: String,
    index: Option<usize>,
}

fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| format!("bad path {path:?}: {why} (e.g. link[1].rate, tc.router.script, duration)");
    let mut steps = Vec::new();
    for part in path.split('.') {
        let (key, index) = match part.split_once('[') {
            None => (part, None),
            Some((key, rest)) => {
                let digits = rest.strip_suffix(']').ok_or_else(|| bad("an index is written [N]"))?;
                let n = digits.parse::<usize>().map_err(|_| bad("an index is a number from 0"))?;
                (key, Some(n))
            }
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(bad("a key is letters, digits, '_' and '-'"));
        }
        steps.push(Step { key: key.to_string(), index });
    }
    Ok(steps)
}

/// The keys a table has, for an error listing what exists.
fn keys_of(t: &dyn TableLike) -> String {
    let keys: Vec<&str> = t.iter().map(|(k, _)| k).collect();
    if keys.is_empty() {
        "nothing".to_string()
    } else {
        keys.join(", ")
    }
}

/// Set `value` at `path` in `doc`. Errors name the part of the path that failed.
fn set(doc: &mut DocumentMut, path: &str, value: &Value) -> Result<(), String> {
    let steps = parse_path(path)?;
    let mut table: &mut dyn TableLike = doc.as_table_mut();
    let mut here = String::new();
    for (i, step) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        let parent = if here.is_empty() { "the scenario".to_string() } else { here.clone() };
        if !here.is_empty() {
            here.push('.');
        }
        here.push_str(&step.key);
        if let Some(n) = step.index {
            let what = keys_of(table);
            let Some(item) = table.get_mut(&step.key) else {
                return Err(format!("{path}: {parent} has no {} (it has: {what})", step.key));
            };
            let len = match &*item {
                Item::ArrayOfTables(a) => a.len(),
                Item::Value(Value::Array(a)) => a.len(),
                _ => return Err(format!("{path}: {here} is not an array")),
            };
            if n >= len {
                let range =
                    if len == 0 { "none".to_string() } else { format!("{}[0]..{}[{}]", step.key, step.key, len - 1) };
                return Err(format!(
                    "{path}: index {n} out of range: {parent} has {len} {} entries ({range})",
                    step.key
                ));
            }
            here.push_str(&format!("[{n}]"));
            match item {
                Item::ArrayOfTables(a) => {
                    if last {
                        return Err(format!(
                            "{path}: a whole [[{}]] entry cannot be set; set one of its keys",
                            step.key
                        ));
                    }
                    table = a.get_mut(n).expect("index checked");
                }
                Item::Value(Value::Array(a)) => {
                    let slot = a.get_mut(n).expect("index checked");
                    if last {
                        replace(slot, value);
                        return Ok(());
                    }
                    match slot {
                        Value::InlineTable(t) => table = t,
                        _ => return Err(format!("{path}: {here} is not a table")),
                    }
                }
                _ => unreachable!("matched above"),
            }
            continue;
        }
        if last {
            match table.get_mut(&step.key) {
                Some(Item::Value(old)) => replace(old, value),
                Some(Item::None) | None => {
                    table.insert(&step.key, Item::Value(value.clone()));
                }
                Some(_) => return Err(format!("{path}: {here} is a table, not a value; set one of its keys")),
            }
            return Ok(());
        }
        // A table on the way: created when missing (`tc.router.script` for a host
        // without a script yet; the loader checks the host exists).
        if table.get(&step.key).is_none() {
            table.insert(&step.key, Item::Table(Table::new()));
        }
        let item = table.get_mut(&step.key).expect("just inserted");
        table = match item {
            Item::Table(t) => t,
            Item::Value(Value::InlineTable(t)) => t,
            Item::ArrayOfTables(_) => {
                return Err(format!("{path}: {here} is an array of tables: give an index ({}[0])", step.key))
            }
            _ => return Err(format!("{path}: {here} is a value, not a table")),
        };
    }
    Ok(())
}

/// Replace a value in place, keeping what surrounds it (spaces, a trailing comment).
fn replace(old: &mut Value, new: &Value) {
    let decor = old.decor().clone();
    *old = new.clone();
    *old.decor_mut() = decor;
}

/// Apply `overrides` to a scenario's TOML text, in order; the edited text (not yet
/// validated).
pub fn apply(text: &str, overrides: &[Override]) -> Result<String, String> {
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string().trim_end().to_string())?;
    for o in overrides {
        set(&mut doc, &o.path, &o.value).map_err(|e| format!("override {}: {e}", o.describe()))?;
    }
    Ok(doc.to_string())
}

/// A scenario's text with `overrides` applied, validated by the loader (`file` names
/// it in errors); returns the scenario and the edited text. A loader error about a
/// field an override set (or a part of one) is prefixed with that override; any other
/// error of an edited file with all of them.
pub fn load(text: &str, file: &str, overrides: &[Override]) -> Result<(Scenario, String), String> {
    // A file that is not TOML at all is the loader's to report, located.
    let edited = match text.parse::<DocumentMut>() {
        Ok(_) if !overrides.is_empty() => apply(text, overrides)?,
        _ => text.to_string(),
    };
    match Scenario::from_bytes(edited.as_bytes(), file) {
        Ok(s) => Ok((s, edited)),
        Err(e) if overrides.is_empty() => Err(e.to_string()),
        Err(e) => {
            let about = |o: &&Override| {
                !e.field.is_empty()
                    && (e.field == o.path
                        || e.field.starts_with(&format!("{}.", o.path))
                        || e.field.starts_with(&format!("{}[", o.path))
                        || o.path.starts_with(&format!("{}.", e.field)))
            };
            let culprits: Vec<String> = match overrides.iter().filter(about).collect::<Vec<_>>() {
                v if v.is_empty() => {
                    // Not about a field that was set: the file's own mistake, if it
                    // has one, is reported as the file's.
                    if let Err(own) = Scenario::from_bytes(text.as_bytes(), file) {
                        return Err(own.to_string());
                    }
                    overrides.iter().map(Override::describe).collect()
                }
                v => v.iter().map(|o| o.describe()).collect(),
            };
            Err(format!("override {}: {e}", culprits.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"name = "t"
duration = "2s"
seed = 1

[[host]]
name = "a"

[[host]]
name = "b"
cpus = 2

[[link]]
between = ["a:eth0", "b:eth0"]
rate = "100mbit" # the bottleneck
delay = "10ms"

[tc.a]
script = "qdisc replace dev eth0 root fq_codel"

[[traffic]]
kind = "tcp"
from = "a"
to = "b"
flows = 2
"#;

    fn set1(path: &str, v: &str) -> Result<(Scenario, String), String> {
        load(BASE, "base.toml", &[Override::parse(&format!("{path}={v}")).unwrap()])
    }

    #[test]
    fn literals_and_strings() {
        assert_eq!(literal("100").as_integer(), Some(100));
        assert_eq!(literal("true").as_bool(), Some(true));
        assert_eq!(literal("10mbit").as_str(), Some("10mbit"));
        assert_eq!(literal("\"10s\"").as_str(), Some("10s"));
        assert_eq!(literal("nan").as_str(), Some("nan"));
        assert_eq!(literal("2.5").as_float(), Some(2.5));
        assert!(Override::parse("rate").is_err());
        assert!(Override::parse("=3").is_err());
    }

    #[test]
    fn edits_in_place_and_keeps_lines() {
        let (s, text) = set1("link[0].rate", "10mbit").unwrap();
        assert_eq!(s.links[0].rate, Some(10_000_000 / 8));
        // Only the value changed: same line count, same comment, same other lines.
        assert_eq!(text.lines().count(), BASE.lines().count());
        assert!(text.contains("rate = \"10mbit\" # the bottleneck\n"), "{text}");
        let diff: Vec<_> = BASE.lines().zip(text.lines()).filter(|(a, b)| a != b).collect();
        assert_eq!(diff.len(), 1);
        let (s, _) = set1("traffic[0].flows", "7").unwrap();
        assert!(matches!(s.traffic[0].kind, crate::scenario::TrafficKind::Tcp { flows: 7, .. }));
        let (s, _) = set1("host[1].cpus", "8").unwrap();
        assert_eq!(s.hosts[1].cpus, 8);
        let (s, _) = set1("seed", "42").unwrap();
        assert_eq!(s.seed, 42);
        let (s, _) = set1("duration", "5s").unwrap();
        assert_eq!(s.duration, 5_000_000_000);
        let (s, _) = set1("tc.a.script", "qdisc replace dev eth0 root pfifo limit 10").unwrap();
        assert_eq!(s.tc_of("a").unwrap().lines[0].args.last().map(String::as_str), Some("10"));
    }

    #[test]
    fn adds_missing_keys_and_tables() {
        let (s, text) = set1("host[0].cpus", "3").unwrap();
        assert_eq!(s.hosts[0].cpus, 3);
        assert!(text.contains("name = \"a\"\ncpus = 3\n"), "{text}");
        let (s, _) = set1("tc.b.script", "qdisc replace dev eth0 root pfifo").unwrap();
        assert!(s.tc_of("b").is_some());
        // An element of an inline array; a link from a host to itself is the loader's to refuse.
        let e = set1("link[0].between[1]", "a").unwrap_err();
        assert!(e.starts_with("override link[0].between[1]=\"a\": base.toml:13:"), "{e}");
    }

    #[test]
    fn paths_that_lead_nowhere() {
        assert_eq!(
            set1("link[2].rate", "1mbit").unwrap_err(),
            "override link[2].rate=\"1mbit\": link[2].rate: index 2 out of range: the scenario has 1 link entries (link[0]..link[0])"
        );
        assert_eq!(
            set1("links[0].rate", "1mbit").unwrap_err(),
            "override links[0].rate=\"1mbit\": links[0].rate: the scenario has no links (it has: name, duration, seed, host, link, tc, traffic)"
        );
        assert_eq!(
            set1("link.rate", "1mbit").unwrap_err(),
            "override link.rate=\"1mbit\": link.rate: link is an array of tables: give an index (link[0])"
        );
        assert_eq!(
            set1("link[0]", "1").unwrap_err(),
            "override link[0]=1: link[0]: a whole [[link]] entry cannot be set; set one of its keys"
        );
        assert!(set1("link[x].rate", "1")
            .unwrap_err()
            .contains("bad path \"link[x].rate\": an index is a number from 0"));
    }

    #[test]
    fn loader_errors_say_which_override() {
        let e = set1("link[0].rate", "fast").unwrap_err();
        assert!(
            e.starts_with("override link[0].rate=\"fast\": base.toml:14:8: link[0].rate: invalid rate \"fast\""),
            "{e}"
        );
        let e = set1("traffic[0].flows", "many").unwrap_err();
        assert!(e.starts_with("override traffic[0].flows=\"many\": base.toml:24:9: traffic[0].flows:"), "{e}");
        // An unknown key: the loader names the keys it knows.
        // The file's own mistake is the file's.
        let bad = BASE.replace("delay = \"10ms\"", "delay = \"later\"");
        let e = load(&bad, "base.toml", &[Override::parse("seed=2").unwrap()]).unwrap_err();
        assert!(e.starts_with("base.toml:15:9: link[0].delay:"), "{e}");
        let e = set1("link[0].bandwidth", "1mbit").unwrap_err();
        assert!(e.starts_with("override link[0].bandwidth=\"1mbit\": base.toml:"), "{e}");
        assert!(e.contains("rate"), "{e}");
        // Two overrides, one bad: only that one is named.
        let o = [Override::parse("seed=3").unwrap(), Override::parse("link[0].delay=soon").unwrap()];
        let e = load(BASE, "base.toml", &o).unwrap_err();
        assert!(e.starts_with("override link[0].delay=\"soon\": base.toml:15:9: link[0].delay:"), "{e}");
    }
}

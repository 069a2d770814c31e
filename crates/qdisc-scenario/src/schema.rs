//! A small JSON Schema checker for the subset of draft 2020-12 that the result schema
//! uses (what schemars generates: `type` (one or several), `properties`, `required`,
//! `additionalProperties: false`, `items`, `prefixItems`, `minItems`/`maxItems`,
//! `$ref` to `#/$defs/…`, `anyOf`/`oneOf`, `enum`, `const`, `minimum`, `format`
//! of unsigned integers). Anything else in a schema is an error, so the checker cannot
//! silently accept what it does not understand. Used to check real results against
//! `docs/run-result.schema.json`.

use serde_json::Value;

/// Check `instance` against `schema` (the root, holding `$defs`). Errors name the
/// JSON path.
pub fn check(schema: &Value, instance: &Value) -> Result<(), String> {
    Checker { root: schema }.check(schema, instance, "$")
}

struct Checker<'a> {
    root: &'a Value,
}

const KNOWN: &[&str] = &[
    "$schema",
    "$defs",
    "$ref",
    "title",
    "description",
    // An annotation (no effect on validity): the value a missing property stands for.
    "default",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "anyOf",
    "oneOf",
    "enum",
    "const",
    "minimum",
    "maximum",
    "format",
];

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => false,
    }
}

impl Checker<'_> {
    fn check(&self, s: &Value, v: &Value, path: &str) -> Result<(), String> {
        let s = match s {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{path}: nothing is allowed here")),
            Value::Object(o) => o,
            _ => return Err(format!("{path}: schema is not an object")),
        };
        if let Some(k) = s.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!("{path}: schema keyword {k:?} is not supported by this checker"));
        }
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/").ok_or_else(|| format!("{path}: unsupported $ref {r}"))?;
            let def =
                self.root.get("$defs").and_then(|d| d.get(name)).ok_or_else(|| format!("{path}: no $defs/{name}"))?;
            self.check(def, v, path)?;
        }
        if let Some(t) = s.get("type") {
            let ok = match t {
                Value::String(t) => type_ok(t, v),
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
                _ => false,
            };
            if !ok {
                return Err(format!("{path}: {v} is not of type {t}"));
            }
        }
        if let Some(f) = s.get("format").and_then(Value::as_str) {
            if f.starts_with("uint") && v.is_number() && !v.is_u64() {
                return Err(format!("{path}: {v} is not an unsigned integer ({f})"));
            }
        }
        if let Some(m) = s.get("minimum").and_then(Value::as_f64) {
            if v.as_f64().is_some_and(|x| x < m) {
                return Err(format!("{path}: {v} < minimum {m}"));
            }
        }
        if let Some(m) = s.get("maximum").and_then(Value::as_f64) {
            if v.as_f64().is_some_and(|x| x > m) {
                return Err(format!("{path}: {v} > maximum {m}"));
            }
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                return Err(format!("{path}: {v} is not one of {}", Value::Array(e.clone())));
            }
        }
        if let Some(c) = s.get("const") {
            if c != v {
                return Err(format!("{path}: {v} is not {c}"));
            }
        }
        for (key, all) in [("anyOf", false), ("oneOf", true)] {
            if let Some(subs) = s.get(key).and_then(Value::as_array) {
                let n = subs.iter().filter(|sub| self.check(sub, v, path).is_ok()).count();
                if n == 0 || (all && n > 1) {
                    return Err(format!("{path}: matches {n} of the {key} alternatives"));
                }
            }
        }
        if let Value::Object(o) = v {
            let props = s.get("properties").and_then(Value::as_object);
            for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
                let r = r.as_str().unwrap_or("");
                if !o.contains_key(r) {
                    return Err(format!("{path}: missing required property {r:?}"));
                }
            }
            for (k, val) in o {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => self.check(ps, val, &format!("{path}.{k}"))?,
                    None => match s.get("additionalProperties") {
                        Some(Value::Bool(false)) => return Err(format!("{path}: property {k:?} is not allowed")),
                        Some(ap @ Value::Object(_)) => self.check(ap, val, &format!("{path}.{k}"))?,
                        _ => {}
                    },
                }
            }
        }
        if let Value::Array(a) = v {
            let prefix = s.get("prefixItems").and_then(Value::as_array);
            let n_prefix = prefix.map_or(0, Vec::len);
            if let Some(p) = prefix {
                for (i, (ps, item)) in p.iter().zip(a).enumerate() {
                    self.check(ps, item, &format!("{path}[{i}]"))?;
                }
            }
            if let Some(items) = s.get("items") {
                for (i, item) in a.iter().enumerate().skip(n_prefix) {
                    self.check(items, item, &format!("{path}[{i}]"))?;
                }
            }
            if let Some(m) = s.get("minItems").and_then(Value::as_u64) {
                if (a.len() as u64) < m {
                    return Err(format!("{path}: fewer than {m} items"));
                }
            }
            if let Some(m) = s.get("maxItems").and_then(Value::as_u64) {
                if (a.len() as u64) > m {
                    return Err(format!("{path}: more than {m} items"));
                }
            }
        }
        Ok(())
    }
}

//! [`record_update_owned`](super::record_update_owned) driven by what the write changed.
//!
//! The general path decodes every manager's field set, walks every leaf of the object and
//! encodes every set again. A write usually touches one corner of an object (an annotation,
//! one condition of a status) while its managed fields describe all of it, so here only the
//! parts of the object that differ are walked, other managers' `fieldsV1` are read only where
//! the object changed under them and are kept verbatim when nothing they own was touched, and
//! the writer's own entry is edited in its encoded form. The result is the general path's,
//! byte for byte; debug builds check every call against it.
//!
//! It declines (and the general path runs) when the request brings managed fields of its own,
//! and when a keyed list has items the general path would look up ambiguously.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{
    ApplyOptions, EntryHead, Operation, Path, excluded_paths, is_excluded, item_key_fields,
    key_matches, parse_elem, typed_before,
};
use crate::patch::{ListType, MergeKeys, resolve_list_type};
use crate::value::{equal, equal_opt, identical};

/// The recorded object, or `obj` back (its request managed fields possibly dropped, which the
/// general path then reads from `before` alike) when this path does not apply.
pub(super) fn record_update(
    before: &Value,
    mut obj: Value,
    manager: &str,
    opts: ApplyOptions<'_>,
) -> Result<Value, Value> {
    let stored = before.pointer("/metadata/managedFields");
    let sent = obj.pointer("/metadata/managedFields");
    // A patch starts from the stored object, so it carries the stored entries as they are:
    // those are taken instead of copied. Entries equal but in another key order (a client
    // sending back what it read) are read from the store, whose order the result keeps.
    let same = sent.zip(stored).is_some_and(|(a, b)| identical(a, b));
    if let Some(sent) = sent
        && !same
        && Some(sent) != stored
    {
        return Err(obj);
    }
    let carried = obj
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove("managedFields"))
        .filter(|_| same);
    // Compared once here: every walk below starts from a difference.
    let changed = !equal(before, &obj);
    let mut touched = BTreeSet::new();
    if changed {
        let typed = typed_before(before, &obj, opts.list_types);
        if !touched_paths(
            Some(typed.as_ref().unwrap_or(before)),
            &obj,
            &mut Vec::new(),
            &mut Vec::new(),
            opts.list_types,
            &mut touched,
        ) {
            return Err(obj);
        }
    }
    let excluded = excluded_paths(opts.reset_fields);
    touched.retain(|p| !is_excluded(p, &excluded));

    let api_version = opts.api_version_for(&obj);
    let entries = match carried {
        Some(Value::Array(a)) => a,
        _ => stored
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    let mut kept: Vec<Entry> = Vec::new();
    let mut mine: Option<Map<String, Value>> = None;
    for mut raw in entries {
        let Some(head) = EntryHead::of(&raw) else {
            continue;
        };
        let is_self = head.manager == manager
            && head.operation == Operation::Update
            && head.subresource.as_deref() == opts.subresource
            && head.api_version == api_version;
        if is_self {
            if mine.is_none() {
                let fields = raw.get_mut("fieldsV1").and_then(Value::as_object_mut);
                mine = Some(fields.map(std::mem::take).unwrap_or_default());
            }
            continue;
        }
        let Some(fields) = raw.get_mut("fieldsV1").and_then(Value::as_object_mut) else {
            continue;
        };
        fields.remove(".");
        if changed {
            drop_owned(
                fields,
                &mut Vec::new(),
                Some(before),
                Some(&obj),
                &touched,
                true,
            );
        }
        if !fields.is_empty() {
            kept.push(Entry { head, raw });
        }
    }

    // The writer keeps what it owned and is still there, and takes what it changed.
    let mut fields = mine.unwrap_or_default();
    fields.remove(".");
    if changed {
        drop_owned(
            &mut fields,
            &mut Vec::new(),
            Some(before),
            Some(&obj),
            &BTreeSet::new(),
            true,
        );
    }
    for p in &touched {
        insert_owned(&mut fields, p);
    }
    if !fields.is_empty() {
        let head = EntryHead {
            manager: manager.to_string(),
            operation: Operation::Update,
            api_version,
            time: Some(opts.time.to_string()),
            subresource: opts.subresource.map(str::to_string),
        };
        let raw = head.to_json(fields);
        kept.push(Entry { head, raw });
    }
    kept.sort_by(|a, b| a.head.order().cmp(&b.head.order()));

    if let Some(meta) = obj.as_object_mut().and_then(|root| {
        root.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
    }) {
        if kept.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert(
                "managedFields".into(),
                Value::Array(kept.into_iter().map(|e| e.raw).collect()),
            );
        }
    }
    Ok(obj)
}

/// A stored entry, its field set left encoded.
struct Entry {
    head: EntryHead,
    raw: Value,
}

/// The paths `after` sets whose value the write changed and the containers it added (the
/// general path's `touched`), for values known to differ. Each child is compared once, by its parent, before anything is
/// allocated for it: a write changes a few corners of an object, and comparing a changed
/// subtree again at every level below was most of the cost. `false` when a keyed item is not
/// the one a lookup by its key finds (duplicate or overlapping keys), which only the general
/// path settles.
fn touched_paths(
    before: Option<&Value>,
    after: &Value,
    wire: &mut Path,
    names: &mut Vec<String>,
    lt: &dyn MergeKeys,
    out: &mut BTreeSet<Path>,
) -> bool {
    match after {
        // An atomic object is one value, and it differs.
        Value::Object(_) if super::is_atomic(lt, names) => {
            out.insert(wire.clone());
        }
        Value::Object(m) if !m.is_empty() || wire.is_empty() => {
            if !wire.is_empty() && !before.is_some_and(Value::is_object) {
                out.insert(wire.clone());
            }
            let b = before.and_then(Value::as_object);
            for (k, child) in m {
                let old = b.and_then(|b| b.get(k));
                if equal_opt(old, Some(child)) {
                    continue;
                }
                wire.push(format!("f:{k}"));
                names.push(k.clone());
                let ok = touched_paths(old, child, wire, names, lt, out);
                names.pop();
                wire.pop();
                if !ok {
                    return false;
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let b = before.and_then(Value::as_array);
            let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            match resolve_list_type(lt, &name_refs) {
                ListType::Atomic => {
                    out.insert(wire.clone());
                }
                ListType::Set => {
                    if b.is_none() {
                        out.insert(wire.clone());
                    }
                    for item in items {
                        if !b.is_some_and(|b| b.contains(item)) {
                            let mut p = wire.clone();
                            p.push(format!("v:{item}"));
                            out.insert(p);
                        }
                    }
                }
                ListType::Map(keys) => {
                    if b.is_none() {
                        out.insert(wire.clone());
                    }
                    let before_index = match b {
                        Some(b) => key_index(b, &keys).map(Some),
                        None => Some(None),
                    };
                    let indexed = key_index(items, &keys).zip(before_index);
                    for (i, item) in items.iter().enumerate() {
                        // The item's key text and its old version, found by the index or by
                        // scans; `None` for an item without its key, which makes the whole
                        // list the write's.
                        let found = match &indexed {
                            Some(((texts, first), before_index)) => {
                                let text = &texts[i];
                                if first.get(text) != Some(&i) {
                                    return false;
                                }
                                let old = before_index
                                    .as_ref()
                                    .and_then(|(_, at)| at.get(text))
                                    .and_then(|&j| b?.get(j));
                                Some((text.clone(), old))
                            }
                            None => match item_key_fields(item, &keys) {
                                None => None,
                                Some(k) => {
                                    let first = items.iter().find(|i| key_matches(i, &k));
                                    if !first.is_some_and(|f| std::ptr::eq(f, item)) {
                                        return false;
                                    }
                                    let old = b.and_then(|b| b.iter().find(|i| key_matches(i, &k)));
                                    Some((Value::Object(k).to_string(), old))
                                }
                            },
                        };
                        let Some((text, old)) = found else {
                            out.insert(wire.clone());
                            continue;
                        };
                        if equal_opt(old, Some(item)) {
                            continue;
                        }
                        wire.push(format!("k:{text}"));
                        if old.is_none() {
                            out.insert(wire.clone());
                        }
                        let ok = touched_paths(old, item, wire, names, lt, out);
                        wire.pop();
                        if !ok {
                            return false;
                        }
                    }
                }
            }
        }
        _ => {
            // A field present in both as objects is judged by its contents.
            if !(before.is_some_and(Value::is_object) && after.is_object()) {
                out.insert(wire.clone());
            }
        }
    }
    true
}

/// Each item's key as a field set spells it, and where each key first appears, when every
/// item has every key field as a string: a lookup by that text then finds what a scan with
/// [`key_matches`] finds, where the scans made a list of conditions cost its length squared.
/// `None` otherwise, and the scans run.
fn key_index(
    items: &[Value],
    keys: &[String],
) -> Option<(Vec<String>, std::collections::HashMap<String, usize>)> {
    let mut texts = Vec::with_capacity(items.len());
    let mut first = std::collections::HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let fields = item.as_object()?;
        if !keys
            .iter()
            .all(|k| fields.get(k.as_str()).is_some_and(Value::is_string))
        {
            return None;
        }
        let text = Value::Object(item_key_fields(item, keys)?).to_string();
        first.entry(text.clone()).or_insert(i);
        texts.push(text);
    }
    Some((texts, first))
}

/// Removes from an encoded field set (`t`, at `path`) the fields the write took over
/// (`touched`) and those gone from the object, where `before` and `after` are known to differ
/// (or `before` is absent). Children whose value did not change are left as they are without a
/// visit, as the general path leaves them. Returns whether the node at `path` is left neither
/// owned nor holding owned fields.
fn drop_owned(
    t: &mut Map<String, Value>,
    path: &mut Path,
    before: Option<&Value>,
    after: Option<&Value>,
    touched: &BTreeSet<Path>,
    root: bool,
) -> bool {
    let member = !root && (t.is_empty() || t.contains_key("."));
    let keep_self = member && after.is_some() && !touched.contains(path);
    let changed: Vec<(String, Option<&Value>, Option<&Value>)> = t
        .iter()
        .filter(|(k, _)| *k != ".")
        .filter_map(|(k, v)| {
            let (b, a) = (step(before, k), step(after, k));
            // A malformed entry (not an object) goes whatever changed.
            (b.is_none() || !equal_opt(b, a) || !v.is_object()).then(|| (k.clone(), b, a))
        })
        .collect();
    for (k, b, a) in changed {
        let gone = match t.get_mut(&k).and_then(Value::as_object_mut) {
            Some(child) => {
                path.push(k.clone());
                let gone = drop_owned(child, path, b, a, touched, false);
                path.pop();
                gone
            }
            // Malformed: decoding ignores it, and so does encoding.
            None => true,
        };
        if gone {
            t.shift_remove(&k);
        }
    }
    let has_children = t.keys().any(|k| k != ".");
    if keep_self {
        // An owned node with fields under it already says so with `.`.
        if !has_children {
            t.remove(".");
        }
        false
    } else {
        t.remove(".");
        !has_children
    }
}

/// Marks `path` owned in an encoded field set, keeping its keys in the order encoding gives
/// them (sorted, `.` first) and the ownership of a leaf that gains fields under it.
fn insert_owned(root: &mut Map<String, Value>, path: &[String]) {
    let mut t = root;
    let mut fresh = true;
    for (depth, e) in path.iter().enumerate() {
        if depth > 0 && !fresh && t.is_empty() {
            t.insert(".".into(), Value::Object(Map::new()));
        }
        fresh = !t.contains_key(e);
        if fresh {
            let at = t.keys().position(|k| k > e).unwrap_or(t.len());
            t.shift_insert(at, e.clone(), Value::Object(Map::new()));
        }
        let Some(next) = t.get_mut(e).and_then(Value::as_object_mut) else {
            return;
        };
        t = next;
    }
    if !path.is_empty() && !t.is_empty() && !t.contains_key(".") {
        t.shift_insert(0, ".".into(), Value::Object(Map::new()));
    }
}

/// One element down, as [`super::lookup`] goes.
fn step<'v>(v: Option<&'v Value>, e: &str) -> Option<&'v Value> {
    let v = v?;
    if let Some(name) = e.strip_prefix("f:") {
        return v.as_object()?.get(name);
    }
    match parse_elem(e)? {
        super::Elem::Field(n) => v.as_object()?.get(&n),
        super::Elem::Key(k) => v.as_array()?.iter().find(|i| key_matches(i, &k)),
        super::Elem::Val(x) => v.as_array()?.iter().find(|i| **i == x),
        super::Elem::Index(i) => v.as_array()?.get(i),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{apply, record_update_general};
    use super::*;
    use crate::patch::MergeKeyTable;
    use proptest::prelude::*;
    use serde_json::json;

    fn keys() -> MergeKeyTable {
        let mut t = MergeKeyTable::metadata_only();
        t.insert("status.conditions", ListType::map(["type"]))
            .insert("spec.taints", ListType::map(["key", "effect"]))
            .insert("spec.cidrs", ListType::Set)
            .insert_atomic("spec.ref");
        t
    }

    /// One client write: which manager, through which endpoint, and what it changes.
    #[derive(Debug, Clone)]
    struct Write {
        manager: usize,
        status: bool,
        keep_managed_fields: bool,
        edits: Vec<(u8, u8, u8)>,
    }

    fn edit(obj: &mut Value, (kind, a, b): (u8, u8, u8)) {
        let name = ["a", "b", "c", "d"][usize::from(a % 4)];
        let val = json!(["x", "y", "z"][usize::from(b % 3)]);
        let cond = |obj: &mut Value| -> Vec<Value> {
            obj["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        match kind % 14 {
            0 => obj["metadata"]["annotations"][name] = val,
            1 => {
                if let Some(m) = obj["metadata"]["annotations"].as_object_mut() {
                    m.shift_remove(name);
                }
            }
            2 | 3 => {
                let mut cs = cond(obj);
                let field = ["status", "message", "reason"][usize::from(b % 3)];
                match cs.iter_mut().find(|c| c["type"] == name) {
                    Some(c) => c[field] = json!(format!("{field}-{kind}")),
                    None => cs.push(json!({"type": name, field: "new"})),
                }
                obj["status"]["conditions"] = Value::Array(cs);
            }
            4 => {
                let mut cs = cond(obj);
                cs.retain(|c| c["type"] != name);
                obj["status"]["conditions"] = Value::Array(cs);
            }
            5 => {
                let mut cs = cond(obj);
                cs.reverse();
                obj["status"]["conditions"] = Value::Array(cs);
            }
            6 => {
                let mut fs = obj["metadata"]["finalizers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if fs.contains(&val) {
                    fs.retain(|f| *f != val);
                } else {
                    fs.push(val);
                }
                obj["metadata"]["finalizers"] = Value::Array(fs);
            }
            7 => obj["spec"]["args"] = json!(vec![val; usize::from(a % 3)]),
            8 => {
                if !obj["spec"]["nested"].is_object() {
                    obj["spec"]["nested"] = json!({});
                }
                if !obj["spec"]["nested"][name].is_object() {
                    obj["spec"]["nested"][name] = json!({});
                }
                obj["spec"]["nested"][name]["leaf"] = val;
            }
            9 => {
                obj["spec"]["nested"] = match b % 3 {
                    0 => json!("flat"),
                    1 => json!({}),
                    _ => json!({name: {}}),
                }
            }
            10 => {
                // Optional second keys: items a lookup by key can confuse.
                let mut ts = obj["spec"]["taints"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let t = if b % 2 == 0 {
                    json!({"key": name, "effect": "NoSchedule", "value": val})
                } else {
                    json!({"key": name, "value": val})
                };
                if a % 5 == 4 {
                    ts.clear();
                } else {
                    ts.push(t);
                }
                obj["spec"]["taints"] = Value::Array(ts);
            }
            11 => obj["spec"]["cidrs"] = json!([val, "10.0.0.0/8"]),
            // An atomic struct: one field changed, or the whole replaced.
            12 => match b % 3 {
                0 => obj["spec"]["ref"] = json!({}),
                _ => {
                    if !obj["spec"]["ref"].is_object() {
                        obj["spec"]["ref"] = json!({});
                    }
                    obj["spec"]["ref"][name] = val;
                }
            },
            // Owner references: atomic items of a keyed list.
            _ => {
                let mut rs = obj["metadata"]["ownerReferences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                match rs.iter_mut().find(|r| r["uid"] == name) {
                    Some(r) if a % 5 == 4 => r["controller"] = json!(b % 2 == 0),
                    Some(r) => r["name"] = val,
                    None => rs.push(json!({"uid": name, "name": val, "kind": "K"})),
                }
                obj["metadata"]["ownerReferences"] = Value::Array(rs);
            }
        }
    }

    fn write() -> impl Strategy<Value = Write> {
        (
            0..3usize,
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..4),
        )
            .prop_map(|(manager, status, keep_managed_fields, edits)| Write {
                manager,
                status,
                keep_managed_fields,
                edits,
            })
    }

    /// Every write recorded by diff gives the general path's object, byte for byte; and over the
    /// whole run nearly all writes are recorded by diff. Declining is for overlapping keys only, which
    /// few sequences make, but one random sequence may make several: the share is a property of
    /// the run, not of each case.
    #[test]
    fn same_as_the_general_path() {
        // As `proptest!` would set it up, so the saved regressions run first.
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            source_file: Some(file!()),
            ..ProptestConfig::with_cases(400)
        });
        let totals = std::cell::Cell::new((0usize, 0usize));
        let sequences = proptest::collection::vec(write(), 1..12);
        let result = runner.run(&sequences, |writes| {
            let keys = keys();
            let created = json!({"apiVersion": "v1", "kind": "Thing",
                "metadata": {"name": "t", "labels": {"l": "1"}, "annotations": {"a": "x"}},
                "spec": {"nested": {"a": {"leaf": "x"}}, "args": ["x"]},
                "status": {"conditions": [{"type": "a", "status": "True"}]}});
            let mut live = apply(
                None,
                &created,
                "creator",
                false,
                ApplyOptions::new("2026-01-01T00:00:00Z", &keys),
            )
            .unwrap();
            let mut by_diff = 0;
            for (i, w) in writes.iter().enumerate() {
                let time = format!("2026-01-01T00:{i:02}:00Z");
                let opts = if w.status {
                    ApplyOptions::for_status(&time, &keys)
                } else {
                    ApplyOptions::new(&time, &keys).with_reset_fields(&["status"])
                };
                let mut next = live.clone();
                if !w.keep_managed_fields {
                    next["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .remove("managedFields");
                }
                for e in &w.edits {
                    edit(&mut next, *e);
                }
                let manager = ["daemon", "controller", "creator"][w.manager];
                let general = record_update_general(Some(&live), next.clone(), manager, opts);
                if let Ok(fast) = record_update(&live, next, manager, opts) {
                    by_diff += 1;
                    prop_assert_eq!(
                        serde_json::to_string_pretty(&fast).unwrap(),
                        serde_json::to_string_pretty(&general).unwrap()
                    );
                }
                live = general;
            }
            let (d, all) = totals.get();
            totals.set((d + by_diff, all + writes.len()));
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        let (by_diff, all) = totals.get();
        // About 99 % in practice; one random sequence may decline several times, a run of
        // thousands of writes barely moves.
        assert!(
            by_diff * 10 >= all * 9,
            "only {by_diff} of {all} writes were recorded by diff"
        );
    }

    /// A write that touches one condition leaves every other manager's entry as stored.
    #[test]
    fn untouched_entries_are_kept_verbatim() {
        let keys = keys();
        let t1 = "2026-01-01T00:00:00Z";
        let obj = json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"},
            "spec": {"args": ["x"]},
            "status": {"conditions": [{"type": "a", "status": "True"}, {"type": "b", "status": "False"}]}});
        let live = apply(None, &obj, "creator", false, ApplyOptions::new(t1, &keys)).unwrap();
        let mut next = live.clone();
        next["status"]["conditions"][1]["status"] = json!("True");
        let out = record_update(&live, next, "daemon", ApplyOptions::new(t1, &keys)).unwrap();
        let entries = out["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1]["manager"], "daemon");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"b\"}": {"f:status": {}}}}})
        );
        let creator = &entries[0]["fieldsV1"]["f:status"]["f:conditions"];
        assert!(creator["k:{\"type\":\"b\"}"].get("f:status").is_none());
        assert!(creator["k:{\"type\":\"a\"}"].get("f:status").is_some());
    }

    /// Keyed items looked up by key text (string keys) and by scans (any other key) record the
    /// same fields, as the general path does (debug builds check each against it).
    #[test]
    fn keyed_items_are_found_with_or_without_the_index() {
        let mut keys = keys();
        keys.insert("spec.ports", ListType::map(["port"]));
        let t1 = "2026-01-01T00:00:00Z";
        let obj = json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"},
            "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}],
                "taints": [{"key": "k", "effect": "NoSchedule", "value": "a"}]}});
        let live = apply(None, &obj, "creator", false, ApplyOptions::new(t1, &keys)).unwrap();
        let mut next = live.clone();
        next["spec"]["ports"][1]["name"] = json!("tls");
        next["spec"]["taints"][0]["value"] = json!("b");
        let out = record_update(&live, next, "editor", ApplyOptions::new(t1, &keys)).unwrap();
        let mine = &out["metadata"]["managedFields"][1];
        assert_eq!(mine["manager"], "editor");
        assert_eq!(
            mine["fieldsV1"],
            json!({"f:spec": {
                "f:ports": {"k:{\"port\":443}": {"f:name": {}}},
                "f:taints": {"k:{\"effect\":\"NoSchedule\",\"key\":\"k\"}": {"f:value": {}}},
            }})
        );
    }

    /// Entries sent back equal to the stored ones but with their keys in another order (as a
    /// typed client serializes them) come out in the stored order: only a patch's copy of the
    /// stored entries, identical to them, is taken as it is.
    #[test]
    fn entries_sent_back_reordered_keep_the_stored_order() {
        let keys = keys();
        let opts = ApplyOptions::new("2026-01-01T00:00:00Z", &keys);
        let obj = json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"},
            "spec": {"args": ["x"]}, "status": {"phase": "a"}});
        let live = apply(None, &obj, "creator", false, opts).unwrap();
        let reordered: Vec<Value> = live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let mut keys: Vec<(&String, &Value)> = e.as_object().unwrap().iter().collect();
                keys.reverse();
                Value::Object(
                    keys.into_iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            })
            .collect();
        let mut next = live.clone();
        next["metadata"]["managedFields"] = Value::Array(reordered);
        next["status"]["phase"] = json!("b");
        let out = record_update(&live, next, "daemon", opts).unwrap();
        let stored_order = |v: &Value| -> Vec<String> {
            v["metadata"]["managedFields"][0]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(stored_order(&out), stored_order(&live));
    }

    /// Managed fields in the request other than the stored ones are the general path's.
    #[test]
    fn declines_sent_managed_fields() {
        let keys = keys();
        let opts = ApplyOptions::new("2026-01-01T00:00:00Z", &keys);
        let obj = json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"args": ["x"]}});
        let live = apply(None, &obj, "creator", false, opts).unwrap();
        let mut next = live.clone();
        next["metadata"]["managedFields"] = json!([]);
        assert!(record_update(&live, next, "daemon", opts).is_err());
    }
}

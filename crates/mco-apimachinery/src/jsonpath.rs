//! The JSONPath dialect of kubectl and kube-apiserver (client-go `util/jsonpath`),
//! reduced to what `additionalPrinterColumns` and field lookups use.
//!
//! Supported: `.a.b`, backslash-escaped dots inside keys
//! (`.metadata.annotations.example\.com/key`), `['key']`, `[n]` and negative
//! indices, `[start:end]`, `[*]`, `.*`, recursive descent `..name`, and filters
//! `[?(@.type=="Updated")]` with `==`, `!=`, `<`, `<=`, `>`, `>=` or bare
//! existence `[?(@.x)]`. An optional surrounding `{...}` is accepted, because
//! upstream wraps column paths that way before parsing.
//!
//! Missing keys yield no match rather than an error: kube-apiserver evaluates
//! printer columns with `AllowMissingKeys(true)`.

use std::cmp::Ordering;

use serde_json::Value;
use thiserror::Error;

/// A JSONPath expression could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid JSONPath {path:?}: {reason}")]
pub struct JsonPathError {
    /// The expression as given.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A parsed JSONPath expression.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    source: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `.*`: every value of an object (or element of an array).
    Wildcard,
    /// `..name` (or `..*` when `None`): descendants at any depth.
    Recursive(Option<String>),
    /// `[n]`.
    Index(i64),
    /// `[start:end]` (either side optional), with an optional step.
    Slice(Option<i64>, Option<i64>, Option<i64>),
    /// `[*]`: every element of an array (or value of an object).
    All,
    /// `[?(...)]`.
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// A path relative to the current element (`@.x.y`).
    Path(Vec<Step>),
    Literal(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    /// `None` means an existence test of `left`.
    cmp: Option<(Op, Operand)>,
}

impl JsonPath {
    /// Parses an expression such as `.status.conditions[?(@.type=="Ready")].status`.
    pub fn parse(expr: &str) -> Result<Self, JsonPathError> {
        let err = |reason: String| JsonPathError {
            path: expr.to_string(),
            reason,
        };
        let mut text = expr.trim();
        if let Some(inner) = text.strip_prefix('{') {
            text = inner
                .strip_suffix('}')
                .ok_or_else(|| err("unclosed '{'".to_string()))?
                .trim();
        }
        // `$` names the root, as in `{$.metadata.name}`.
        if let Some(rest) = text.strip_prefix('$') {
            text = rest;
        }
        let chars: Vec<char> = text.chars().collect();
        let mut p = Parser { chars, pos: 0 };
        let steps = p.parse_steps(false).map_err(err)?;
        if p.pos != p.chars.len() {
            return Err(err(format!("unexpected character at offset {}", p.pos)));
        }
        Ok(JsonPath {
            source: expr.to_string(),
            steps,
        })
    }

    /// The expression as it was given to [`JsonPath::parse`].
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Every value the expression selects in `root`, in document order.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        eval_steps(&self.steps, vec![root])
    }

    /// The first selected value, if any.
    pub fn find_first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        self.find(root).into_iter().next()
    }
}

/// Renders one JSONPath result the way client-go's `PrintResults` does: strings
/// raw, scalars in Go's `%v` form, objects and arrays as compact JSON.
pub fn print_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format_go_number(n),
        Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

/// Go prints `float64` values with `%v` (shortest form, exponent from 1e21 up
/// and below 1e-4); integers print plainly.
pub(crate) fn format_go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    format_go_float(n.as_f64().unwrap_or(0.0))
}

/// Go's `%v` for a `float64`.
pub(crate) fn format_go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, as Go does.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..21).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat((-point) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        format!("{sign}{digits}{zeros}")
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(c) if c.is_whitespace()) {
            self.pos += 1;
        }
    }

    /// Parses steps until the end, or (inside a filter) until an operator or `)`.
    fn parse_steps(&mut self, in_filter: bool) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        loop {
            match self.peek() {
                None => break,
                Some('.') => {
                    self.pos += 1;
                    if self.eat('.') {
                        if self.eat('*') {
                            steps.push(Step::Recursive(None));
                        } else {
                            let name = self.parse_name();
                            if name.is_empty() {
                                return Err("expected a field name after '..'".into());
                            }
                            steps.push(Step::Recursive(Some(name)));
                        }
                    } else if self.eat('*') {
                        steps.push(Step::Wildcard);
                    } else {
                        let name = self.parse_name();
                        // A lone trailing `.` (as in `{.}`) names the current value.
                        if !name.is_empty() {
                            steps.push(Step::Field(name));
                        }
                    }
                }
                Some('[') => {
                    self.pos += 1;
                    steps.push(self.parse_bracket()?);
                }
                Some(c) if in_filter && (c.is_whitespace() || "=!<>)&|".contains(c)) => break,
                Some(c) if steps.is_empty() && !in_filter && is_name_char(c) => {
                    // Tolerate a missing leading dot (`metadata.name`).
                    let name = self.parse_name();
                    steps.push(Step::Field(name));
                }
                Some(c) => return Err(format!("unexpected character {c:?}")),
            }
        }
        Ok(steps)
    }

    /// A field name: everything up to an unescaped `.` or `[` (or a filter
    /// operator), with `\x` standing for a literal `x`.
    fn parse_name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c == '\\' {
                if let Some(next) = self.peek_at(1) {
                    name.push(next);
                    self.pos += 2;
                    continue;
                }
                self.pos += 1;
                break;
            }
            if !is_name_char(c) {
                break;
            }
            name.push(c);
            self.pos += 1;
        }
        name
    }

    fn parse_bracket(&mut self) -> Result<Step, String> {
        self.skip_ws();
        let step = match self.peek() {
            Some('*') => {
                self.pos += 1;
                Step::All
            }
            Some('?') => {
                self.pos += 1;
                self.skip_ws();
                if !self.eat('(') {
                    return Err("expected '(' after '?'".into());
                }
                let filter = self.parse_filter()?;
                self.skip_ws();
                if !self.eat(')') {
                    return Err("expected ')' to close the filter".into());
                }
                Step::Filter(filter)
            }
            Some(q @ ('\'' | '"')) => {
                self.pos += 1;
                let s = self.parse_quoted(q)?;
                Step::Field(s)
            }
            _ => self.parse_index_or_slice()?,
        };
        self.skip_ws();
        if !self.eat(']') {
            return Err("expected ']'".into());
        }
        Ok(step)
    }

    fn parse_int(&mut self) -> Result<Option<i64>, String> {
        self.skip_ws();
        let start = self.pos;
        if self.peek() == Some('-') {
            self.pos += 1;
        }
        while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        self.skip_ws();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<i64>()
            .map(Some)
            .map_err(|_| format!("invalid array index {text:?}"))
    }

    fn parse_index_or_slice(&mut self) -> Result<Step, String> {
        let first = self.parse_int()?;
        if !self.eat(':') {
            return first
                .map(Step::Index)
                .ok_or_else(|| "expected an index, '*', a quoted key or a filter".to_string());
        }
        let second = self.parse_int()?;
        let third = if self.eat(':') {
            self.parse_int()?
        } else {
            None
        };
        Ok(Step::Slice(first, second, third))
    }

    fn parse_quoted(&mut self, quote: char) -> Result<String, String> {
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string".into()),
                Some('\\') => {
                    let next = self.peek_at(1).ok_or("unterminated string")?;
                    s.push(match next {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                    self.pos += 2;
                }
                Some(c) if c == quote => {
                    self.pos += 1;
                    return Ok(s);
                }
                Some(c) => {
                    s.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn parse_filter(&mut self) -> Result<Filter, String> {
        self.skip_ws();
        let left = self.parse_operand()?;
        self.skip_ws();
        let op = match (self.peek(), self.peek_at(1)) {
            (Some('='), Some('=')) => Some((Op::Eq, 2)),
            (Some('!'), Some('=')) => Some((Op::Ne, 2)),
            (Some('<'), Some('=')) => Some((Op::Le, 2)),
            (Some('>'), Some('=')) => Some((Op::Ge, 2)),
            (Some('<'), _) => Some((Op::Lt, 1)),
            (Some('>'), _) => Some((Op::Gt, 1)),
            _ => None,
        };
        let cmp = match op {
            Some((op, width)) => {
                self.pos += width;
                self.skip_ws();
                Some((op, self.parse_operand()?))
            }
            None => None,
        };
        Ok(Filter { left, cmp })
    }

    fn parse_operand(&mut self) -> Result<Operand, String> {
        match self.peek() {
            Some('@') => {
                self.pos += 1;
                Ok(Operand::Path(self.parse_steps(true)?))
            }
            Some(q @ ('\'' | '"')) => {
                self.pos += 1;
                Ok(Operand::Literal(Value::String(self.parse_quoted(q)?)))
            }
            Some(_) => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if !c.is_whitespace() && !"=!<>)".contains(c)) {
                    self.pos += 1;
                }
                let word: String = self.chars[start..self.pos].iter().collect();
                match word.as_str() {
                    "true" => Ok(Operand::Literal(Value::Bool(true))),
                    "false" => Ok(Operand::Literal(Value::Bool(false))),
                    "nil" | "null" => Ok(Operand::Literal(Value::Null)),
                    _ => serde_json::from_str::<serde_json::Number>(&word)
                        .map(|n| Operand::Literal(Value::Number(n)))
                        .map_err(|_| format!("unrecognized filter operand {word:?}")),
                }
            }
            None => Err("expected a filter operand".into()),
        }
    }
}

fn is_name_char(c: char) -> bool {
    !matches!(
        c,
        '.' | '[' | ']' | '(' | ')' | '{' | '}' | '=' | '!' | '<' | '>' | '&' | '|'
    ) && !c.is_whitespace()
}

fn eval_steps<'a>(steps: &[Step], mut current: Vec<&'a Value>) -> Vec<&'a Value> {
    for step in steps {
        let mut next = Vec::new();
        for value in current {
            apply_step(step, value, &mut next);
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    current
}

fn apply_step<'a>(step: &Step, value: &'a Value, out: &mut Vec<&'a Value>) {
    match step {
        Step::Field(name) => {
            if let Some(v) = value.as_object().and_then(|m| m.get(name)) {
                out.push(v);
            }
        }
        Step::Wildcard | Step::All => match value {
            Value::Array(items) => out.extend(items.iter()),
            Value::Object(map) => out.extend(map.values()),
            _ => {}
        },
        Step::Recursive(name) => collect_recursive(value, name.as_deref(), out),
        Step::Index(i) => {
            if let Some(items) = value.as_array() {
                let len = items.len() as i64;
                let idx = if *i < 0 { len + i } else { *i };
                if (0..len).contains(&idx) {
                    out.push(&items[idx as usize]);
                }
            }
        }
        Step::Slice(start, end, step) => {
            if let Some(items) = value.as_array() {
                let len = items.len() as i64;
                let clamp = |v: i64| if v < 0 { (len + v).max(0) } else { v.min(len) };
                let s = start.map(clamp).unwrap_or(0);
                let e = end.map(clamp).unwrap_or(len);
                let st = step.unwrap_or(1).max(1) as usize;
                if s < e {
                    out.extend(items[s as usize..e as usize].iter().step_by(st));
                }
            }
        }
        Step::Filter(filter) => {
            let candidates: Vec<&Value> = match value {
                Value::Array(items) => items.iter().collect(),
                _ => Vec::new(),
            };
            out.extend(candidates.into_iter().filter(|item| filter.matches(item)));
        }
    }
}

fn collect_recursive<'a>(value: &'a Value, name: Option<&str>, out: &mut Vec<&'a Value>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if name.is_none_or(|n| n == k) {
                    out.push(v);
                }
            }
            for v in map.values() {
                collect_recursive(v, name, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                if name.is_none() {
                    out.push(v);
                }
                collect_recursive(v, name, out);
            }
        }
        _ => {}
    }
}

impl Filter {
    fn matches(&self, item: &Value) -> bool {
        let left = operand_values(&self.left, item);
        match &self.cmp {
            None => !left.is_empty(),
            Some((op, right)) => {
                let right = operand_values(right, item);
                // Like upstream, a missing side never matches, not even with `!=`.
                left.iter()
                    .any(|l| right.iter().any(|r| compare(*op, l, r)))
            }
        }
    }
}

fn operand_values<'a>(operand: &'a Operand, item: &'a Value) -> Vec<&'a Value> {
    match operand {
        Operand::Path(steps) => eval_steps(steps, vec![item]),
        Operand::Literal(v) => vec![v],
    }
}

fn compare(op: Op, left: &Value, right: &Value) -> bool {
    let ord = match (left, right) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        _ => None,
    };
    match (op, ord) {
        (Op::Eq, Some(o)) => o == Ordering::Equal,
        (Op::Ne, Some(o)) => o != Ordering::Equal,
        // Values of different kinds are simply unequal.
        (Op::Ne, None) => true,
        (Op::Lt, Some(o)) => o == Ordering::Less,
        (Op::Le, Some(o)) => o != Ordering::Greater,
        (Op::Gt, Some(o)) => o == Ordering::Greater,
        (Op::Ge, Some(o)) => o != Ordering::Less,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "metadata": {
                "name": "worker-0",
                "annotations": {
                    "machineconfiguration.openshift.io/generated-by-controller-version": "4.16.0",
                    "plain": "p"
                },
                "labels": {"a": "1", "b": "2"}
            },
            "spec": {
                "items": [
                    {"name": "x", "n": 1},
                    {"name": "y", "n": 2},
                    {"name": "z", "n": 3}
                ],
                "config": {"ignition": {"version": "3.4.0"}}
            },
            "status": {
                "conditions": [
                    {"type": "Updated", "status": "True"},
                    {"type": "Updating", "status": "False"},
                    {"type": "Degraded", "status": "False"}
                ],
                "machineCount": 3
            }
        })
    }

    fn find(expr: &str) -> Vec<Value> {
        let doc = sample();
        JsonPath::parse(expr)
            .unwrap_or_else(|e| panic!("{e}"))
            .find(&doc)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn table_of_expressions() {
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (".metadata.name", vec![json!("worker-0")]),
            ("{.metadata.name}", vec![json!("worker-0")]),
            ("{$.metadata.name}", vec![json!("worker-0")]),
            ("metadata.name", vec![json!("worker-0")]),
            (
                ".metadata.annotations.machineconfiguration\\.openshift\\.io/generated-by-controller-version",
                vec![json!("4.16.0")],
            ),
            (
                ".metadata.annotations['machineconfiguration.openshift.io/generated-by-controller-version']",
                vec![json!("4.16.0")],
            ),
            (".spec.config.ignition.version", vec![json!("3.4.0")]),
            (".spec.items[0].name", vec![json!("x")]),
            (".spec.items[2].name", vec![json!("z")]),
            (".spec.items[-1].name", vec![json!("z")]),
            (".spec.items[5].name", vec![]),
            (
                ".spec.items[*].name",
                vec![json!("x"), json!("y"), json!("z")],
            ),
            (".spec.items[0:2].name", vec![json!("x"), json!("y")]),
            (".spec.items[1:].n", vec![json!(2), json!(3)]),
            (".metadata.labels.*", vec![json!("1"), json!("2")]),
            (".status.machineCount", vec![json!(3)]),
            (".status.missing", vec![]),
            (".nope.deeper.still", vec![]),
            (
                ".status.conditions[?(@.type==\"Updated\")].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type=='Degraded')].status",
                vec![json!("False")],
            ),
            (
                ".status.conditions[?(@.type!=\"Updated\")].type",
                vec![json!("Updating"), json!("Degraded")],
            ),
            (".status.conditions[?(@.type==\"Nope\")].status", vec![]),
            (".spec.items[?(@.n>1)].name", vec![json!("y"), json!("z")]),
            (".spec.items[?(@.n<=1)].name", vec![json!("x")]),
            (".spec.items[?(@.n==2)].name", vec![json!("y")]),
            (
                ".spec.items[?(@.name)].n",
                vec![json!(1), json!(2), json!(3)],
            ),
            (".spec.items[?(@.missing)].n", vec![]),
            // An element without the compared field never matches, even with `!=`.
            (".status.conditions[?(@.reason!=\"x\")].type", vec![]),
            (
                "{.status.conditions[?(@.type == 'Updating')].status}",
                vec![json!("False")],
            ),
            ("..version", vec![json!("3.4.0")]),
        ];
        for (expr, want) in cases {
            assert_eq!(find(expr), want, "expression {expr}");
        }
    }

    #[test]
    fn parse_errors() {
        for bad in [".a[", ".a[?(@.x==)]", "{.a", ".a[abc]", ".a[?(@.x==\"y\"]"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn printing_follows_client_go() {
        assert_eq!(print_value(&json!("abc")), "abc");
        assert_eq!(print_value(&json!(5)), "5");
        assert_eq!(print_value(&json!(1.5)), "1.5");
        assert_eq!(print_value(&json!(true)), "true");
        assert_eq!(print_value(&json!(["a", "b"])), r#"["a","b"]"#);
        assert_eq!(print_value(&json!({"k": 1})), r#"{"k":1}"#);
    }

    #[test]
    fn go_float_formatting() {
        let cases = [
            (1.5, "1.5"),
            (10.0, "10"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (-2.25, "-2.25"),
            (123456.789, "123456.789"),
        ];
        for (f, want) in cases {
            assert_eq!(format_go_float(f), want, "{f}");
        }
    }
}

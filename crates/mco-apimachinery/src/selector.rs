//! Label and field selectors, as kube-apiserver parses and evaluates them.
//!
//! Two label selector forms exist: the query-string form clients put in
//! `?labelSelector=` ([`LabelSelector::parse`]) and the structured
//! `metav1.LabelSelector` that objects embed ([`LabelSelector::from_k8s`]). Both
//! produce the same [`LabelSelector`] so that list, watch and object-level
//! matching share one evaluator.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;
use thiserror::Error;

/// Upstream caps label names at 63 characters and prefixes at 253.
const MAX_NAME_LEN: usize = 63;
const MAX_PREFIX_LEN: usize = 253;

/// A label selector could not be parsed or is invalid.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    /// The text does not follow the grammar; worded as upstream's parser words it.
    #[error("{0}")]
    Syntax(String),
    /// A requirement's values break its operator's rule; `part` is the key.
    #[error("unable to parse requirement: {part:?}: {reason}")]
    Parse { part: String, reason: String },
    /// A key or value does not satisfy the label syntax rules.
    #[error("unable to parse requirement: invalid {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// A structured selector used an operator upstream does not know.
    #[error("{0:?} is not a valid label selector operator")]
    BadOperator(String),
    /// A structured selector's shape is wrong (not an object, values not strings, ...).
    #[error("invalid label selector: {0}")]
    Malformed(String),
}

/// How a single requirement compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `a=b`
    Equals,
    /// `a==b` (kept apart from `=` only so that display round-trips)
    DoubleEquals,
    /// `a!=b`: also true when the label is absent, as upstream.
    NotEquals,
    /// `a in (x,y)`
    In,
    /// `a notin (x,y)`: also true when the label is absent.
    NotIn,
    /// `a`
    Exists,
    /// `!a`
    DoesNotExist,
    /// `a>3`: the label is an integer greater than the value.
    GreaterThan,
    /// `a<3`: the label is an integer less than the value.
    LessThan,
}

/// One clause of a selector; a selector is the AND of its requirements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: Operator,
    /// Sorted and deduplicated, so that equal selectors compare equal.
    values: Vec<String>,
}

impl Requirement {
    /// Builds a validated requirement.
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, SelectorError> {
        let key = key.into();
        validate_key(&key)?;
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        values.sort();
        values.dedup();
        match op {
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    return Err(SelectorError::Parse {
                        part: key,
                        reason: "exact-match compatibility requires one single value".into(),
                    });
                }
            }
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(SelectorError::Parse {
                        part: key,
                        reason: "for 'in', 'notin' operators, values set can't be empty".into(),
                    });
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 || values[0].parse::<i64>().is_err() {
                    return Err(SelectorError::Parse {
                        part: key,
                        reason: "for 'Gt', 'Lt' operators, exactly one integer value is required"
                            .into(),
                    });
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(SelectorError::Parse {
                        part: key,
                        reason: "values set must be empty for exists and does not exist".into(),
                    });
                }
            }
        }
        // Gt/Lt values are integers (possibly negative), not label values.
        if !matches!(op, Operator::GreaterThan | Operator::LessThan) {
            for v in &values {
                validate_value(v)?;
            }
        }
        Ok(Self { key, op, values })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.op
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Evaluates this clause against a label set.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_lookup(|k| labels.get(k).map(String::as_str))
    }

    fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match (self.op, get(&self.key)) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, Some(v)) => has(v),
            (Operator::Equals | Operator::DoubleEquals | Operator::In, None) => false,
            (Operator::NotEquals | Operator::NotIn, Some(v)) => !has(v),
            (Operator::NotEquals | Operator::NotIn, None) => true,
            (Operator::Exists, found) => found.is_some(),
            (Operator::DoesNotExist, found) => found.is_none(),
            (Operator::GreaterThan | Operator::LessThan, None) => false,
            (op, Some(v)) => {
                let (Ok(have), Ok(want)) = (v.parse::<i64>(), self.values[0].parse::<i64>()) else {
                    return false;
                };
                if op == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={}", self.key, self.values[0]),
            Operator::DoubleEquals => write!(f, "{}=={}", self.key, self.values[0]),
            Operator::NotEquals => write!(f, "{}!={}", self.key, self.values[0]),
            Operator::GreaterThan => write!(f, "{}>{}", self.key, self.values[0]),
            Operator::LessThan => write!(f, "{}<{}", self.key, self.values[0]),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

/// A parsed label selector. The empty selector matches everything.
///
/// For the structured form, "absent" (a nil selector, which upstream treats as
/// matching nothing) is represented by `None` from [`LabelSelector::from_k8s`],
/// so each caller decides what a missing selector means for its resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Sorted by key (stable), as upstream, so display is canonical.
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Builds a selector from requirements (sorted by key, as upstream does).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// Parses the query-string form, e.g. `app=web,tier in (a,b),!legacy`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        let mut lexer = Lexer::new(s);
        loop {
            match lexer.peek_token() {
                Token::End => break,
                Token::Ident(_) | Token::In | Token::NotIn | Token::Bang => {
                    requirements.push(parse_requirement(&mut lexer)?);
                    match lexer.next_token() {
                        Token::End => break,
                        Token::Comma => match lexer.peek_token() {
                            Token::Ident(_) | Token::In | Token::NotIn | Token::Bang => {}
                            other => {
                                return Err(syntax(&other, "identifier after ','"));
                            }
                        },
                        other => return Err(syntax(&other, "',' or 'end of string'")),
                    }
                }
                other => {
                    return Err(syntax(&other, "!, identifier, or 'end of string'"));
                }
            }
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Parses a structured `metav1.LabelSelector` (`matchLabels` plus
    /// `matchExpressions`).
    ///
    /// Returns `Ok(None)` for JSON `null`: upstream's nil selector, which
    /// matches nothing for most resources. An empty object `{}` gives a
    /// selector that matches everything.
    pub fn from_k8s(value: &Value) -> Result<Option<Self>, SelectorError> {
        let obj = match value {
            Value::Null => return Ok(None),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError::Malformed(format!(
                    "expected an object, got {other}"
                )));
            }
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let v = v.as_str().ok_or_else(|| {
                        SelectorError::Malformed(format!("matchLabels[{k:?}] must be a string"))
                    })?;
                    requirements.push(Requirement::new(k.clone(), Operator::Equals, [v])?);
                }
            }
            Some(_) => {
                return Err(SelectorError::Malformed(
                    "matchLabels must be an object".into(),
                ));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    requirements.push(expression_requirement(expr)?);
                }
            }
            Some(_) => {
                return Err(SelectorError::Malformed(
                    "matchExpressions must be a list".into(),
                ));
            }
        }
        Ok(Some(Self::from_requirements(requirements)))
    }

    /// Like [`LabelSelector::from_k8s`] for an optional field: a missing field
    /// is the same as `null`.
    pub fn from_k8s_field(value: Option<&Value>) -> Result<Option<Self>, SelectorError> {
        value.map_or(Ok(None), Self::from_k8s)
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// True when every requirement holds.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches a JSON labels map (`metadata.labels`); non-string values and a
    /// missing or `null` map count as absent labels.
    pub fn matches_json(&self, labels: Option<&Value>) -> bool {
        let map = labels.and_then(Value::as_object);
        self.requirements
            .iter()
            .all(|r| r.matches_lookup(|k| map.and_then(|m| m.get(k)).and_then(Value::as_str)))
    }

    /// Matches an object by its `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches_json(obj.pointer("/metadata/labels"))
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

fn expression_requirement(expr: &Value) -> Result<Requirement, SelectorError> {
    let key = expr
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError::Malformed("matchExpressions[].key is required".into()))?;
    let op = expr
        .get("operator")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            SelectorError::Malformed("matchExpressions[].operator is required".into())
        })?;
    let op = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(SelectorError::BadOperator(other.to_string())),
    };
    let values = match expr.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    SelectorError::Malformed(format!("values of {key:?} must be strings"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(SelectorError::Malformed(format!(
                "values of {key:?} must be a list"
            )));
        }
    };
    Requirement::new(key, op, values)
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn check_name(what: &'static str, name: &str) -> Result<(), SelectorError> {
    let invalid = |reason: &str| SelectorError::Invalid {
        what,
        value: name.to_string(),
        reason: reason.to_string(),
    };
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("must be no more than 63 characters"));
    }
    let first = name.chars().next();
    let last = name.chars().last();
    if !name.chars().all(is_label_char)
        || !first.is_some_and(|c| c.is_ascii_alphanumeric())
        || !last.is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return Err(invalid(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ));
    }
    Ok(())
}

/// Label keys are `[prefix/]name`, the prefix being a DNS subdomain.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= MAX_PREFIX_LEN
            && p.split('.').all(|seg| {
                !seg.is_empty()
                    && seg
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !seg.starts_with('-')
                    && !seg.ends_with('-')
            });
        if !ok {
            return Err(SelectorError::Invalid {
                what: "key",
                value: key.to_string(),
                reason:
                    "prefix part must be a DNS subdomain (lower case alphanumerics, '-' and '.')"
                        .into(),
            });
        }
    }
    if name.is_empty() {
        return Err(SelectorError::Invalid {
            what: "key",
            value: key.to_string(),
            reason: "name part must be non-empty".into(),
        });
    }
    check_name("key", name).map_err(|_| SelectorError::Invalid {
        what: "key",
        value: key.to_string(),
        reason: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)".into(),
    })
}

/// Values may be empty; otherwise they follow the label-name rules.
fn validate_value(v: &str) -> Result<(), SelectorError> {
    if v.is_empty() {
        return Ok(());
    }
    check_name("value", v)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    Ident(String),
    Comma,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Bang,
    Open,
    Close,
    In,
    NotIn,
    Invalid(char),
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::End => String::new(),
            Token::Ident(s) => s.clone(),
            Token::Comma => ",".into(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::NotEquals => "!=".into(),
            Token::Greater => ">".into(),
            Token::Less => "<".into(),
            Token::Bang => "!".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Invalid(c) => c.to_string(),
        }
    }
}

struct Lexer<'a> {
    rest: &'a str,
}

impl<'a> Lexer<'a> {
    fn new(s: &'a str) -> Self {
        Self { rest: s }
    }

    fn peek_token(&self) -> Token {
        Lexer { rest: self.rest }.next_token()
    }

    fn next_token(&mut self) -> Token {
        self.rest = self.rest.trim_start();
        let mut chars = self.rest.chars();
        let Some(c) = chars.next() else {
            return Token::End;
        };
        let two = self.rest.get(..2);
        let (tok, len) = match c {
            ',' => (Token::Comma, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            '=' if two == Some("==") => (Token::DoubleEquals, 2),
            '=' => (Token::Equals, 1),
            '!' if two == Some("!=") => (Token::NotEquals, 2),
            '!' => (Token::Bang, 1),
            '>' => (Token::Greater, 1),
            '<' => (Token::Less, 1),
            c if is_ident_char(c) => {
                let len = self
                    .rest
                    .find(|c: char| !is_ident_char(c))
                    .unwrap_or(self.rest.len());
                let word = &self.rest[..len];
                let tok = match word {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    w => Token::Ident(w.to_string()),
                };
                (tok, len)
            }
            c => (Token::Invalid(c), c.len_utf8()),
        };
        self.rest = &self.rest[len..];
        tok
    }
}

fn is_ident_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, ',' | '=' | '!' | '(' | ')' | '>' | '<')
}

/// apimachinery's `found '<literal>', expected: <what>`.
fn syntax(found: &Token, expected: &str) -> SelectorError {
    SelectorError::Syntax(format!("found '{}', expected: {expected}", found.text()))
}

/// A syntax error inside one requirement, which upstream's parser prefixes.
fn in_requirement(err: SelectorError) -> SelectorError {
    match err {
        SelectorError::Syntax(m) => {
            SelectorError::Syntax(format!("unable to parse requirement: {m}"))
        }
        other => other,
    }
}

/// `in` and `notin` are keywords only in operator position; elsewhere they
/// are plain words (a key or value may be `in`).
fn word(tok: &Token) -> Option<String> {
    match tok {
        Token::Ident(w) => Some(w.clone()),
        Token::In | Token::NotIn => Some(tok.text()),
        _ => None,
    }
}

fn parse_requirement(lexer: &mut Lexer<'_>) -> Result<Requirement, SelectorError> {
    let mut tok = lexer.next_token();
    let negated = tok == Token::Bang;
    if negated {
        tok = lexer.next_token();
    }
    let key = word(&tok).ok_or_else(|| in_requirement(syntax(&tok, "identifier")))?;
    validate_key(&key)?;
    if negated {
        return Requirement::new(key, Operator::DoesNotExist, Vec::<String>::new());
    }
    if matches!(lexer.peek_token(), Token::End | Token::Comma) {
        return Requirement::new(key, Operator::Exists, Vec::<String>::new());
    }
    let op = match lexer.next_token() {
        Token::Equals => Operator::Equals,
        Token::DoubleEquals => Operator::DoubleEquals,
        Token::NotEquals => Operator::NotEquals,
        Token::Greater => Operator::GreaterThan,
        Token::Less => Operator::LessThan,
        Token::In => Operator::In,
        Token::NotIn => Operator::NotIn,
        other => {
            return Err(in_requirement(syntax(
                &other,
                "in, notin, =, ==, !=, gt, lt",
            )));
        }
    };
    let values = match op {
        Operator::In | Operator::NotIn => parse_set(lexer).map_err(in_requirement)?,
        _ => match lexer.peek_token() {
            // `a=` selects an empty value.
            Token::End | Token::Comma => vec![String::new()],
            _ => {
                let tok = lexer.next_token();
                vec![word(&tok).ok_or_else(|| in_requirement(syntax(&tok, "identifier")))?]
            }
        },
    };
    Requirement::new(key, op, values)
}

/// `(a,b,...)`; empty values are allowed anywhere (`()`, `(,a)`, `(a,)`).
fn parse_set(lexer: &mut Lexer<'_>) -> Result<Vec<String>, SelectorError> {
    let open = lexer.next_token();
    if open != Token::Open {
        // Upstream's wording has no comma here.
        return Err(SelectorError::Syntax(format!(
            "found '{}' expected: '('",
            open.text()
        )));
    }
    let mut values = Vec::new();
    match lexer.peek_token() {
        Token::Close => {
            lexer.next_token();
            return Ok(vec![String::new()]);
        }
        Token::Comma | Token::Ident(_) | Token::In | Token::NotIn => {}
        other => return Err(syntax(&other, "',', ')' or identifier")),
    }
    loop {
        let tok = lexer.next_token();
        if let Some(v) = word(&tok) {
            values.push(v);
            match lexer.peek_token() {
                Token::Comma => continue,
                Token::Close => break,
                other => return Err(syntax(&other, "',' or ')'")),
            }
        } else if tok == Token::Comma {
            if values.is_empty() {
                values.push(String::new());
            }
            match lexer.peek_token() {
                Token::Close => {
                    values.push(String::new());
                    break;
                }
                Token::Comma => values.push(String::new()),
                _ => {}
            }
        } else {
            return Err(syntax(&tok, "',', or identifier"));
        }
    }
    lexer.next_token();
    Ok(values)
}

// ---------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------

/// A field selector could not be parsed or uses an unsupported field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FieldSelectorError {
    /// Upstream wording: `invalid selector: '<all>'; can't understand '<term>'`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    Parse { selector: String, term: String },
    /// A backslash not followed by `\\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// An unescaped `,` or `=` in a value; upstream prints the character's code point.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedRune(char),
    /// Upstream wording for a field the resource does not index.
    #[error("field label not supported: {0}")]
    Unsupported(String),
}

/// Field selector comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    DoubleEquals,
    NotEquals,
}

/// One `field<op>value` term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldTerm {
    pub field: String,
    pub op: FieldOperator,
    pub value: String,
}

/// A parsed field selector (AND of terms). The empty selector matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses `f=v,g!=w`; `\,`, `\=` and `\\` escape those characters in
    /// values, as upstream's `fields.EscapeValue`.
    pub fn parse(s: &str) -> Result<Self, FieldSelectorError> {
        let mut terms = Vec::new();
        if s.is_empty() {
            return Ok(Self::everything());
        }
        // Upstream parses the terms sorted, so the first bad one in that order is reported.
        let mut parts = split_unescaped(s, ',');
        parts.sort_unstable();
        for raw in parts {
            // Upstream skips empty terms (`a=b,,c=d`).
            if raw.is_empty() {
                continue;
            }
            let (field, op, value) = split_term(raw).ok_or_else(|| FieldSelectorError::Parse {
                selector: s.to_string(),
                term: raw.to_string(),
            })?;
            terms.push(FieldTerm {
                field: field.to_string(),
                op,
                value: unescape(value)?,
            });
        }
        Ok(Self { terms })
    }

    /// Selects one field value exactly (`metadata.name=<name>` and the like).
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            terms: vec![FieldTerm {
                field: field.into(),
                op: FieldOperator::Equals,
                value: value.into(),
            }],
        }
    }

    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The field names the selector refers to, in order, so the server can
    /// check them against what a resource supports.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Fails with upstream's `field label not supported: <f>` for the first
    /// field not in `supported`.
    pub fn check_supported(&self, supported: &[&str]) -> Result<(), FieldSelectorError> {
        match self.fields().find(|f| !supported.contains(f)) {
            Some(f) => Err(FieldSelectorError::Unsupported(f.to_string())),
            None => Ok(()),
        }
    }

    /// Evaluates against `obj`, looking fields up with `resolve`. A field
    /// that resolves to `None` compares as the empty string, as upstream.
    pub fn matches_with(
        &self,
        obj: &Value,
        resolve: impl Fn(&Value, &str) -> Option<String>,
    ) -> bool {
        self.terms.iter().all(|t| {
            let actual = resolve(obj, &t.field).unwrap_or_default();
            match t.op {
                FieldOperator::Equals | FieldOperator::DoubleEquals => actual == t.value,
                FieldOperator::NotEquals => actual != t.value,
            }
        })
    }

    /// Evaluates with [`resolve_field_path`].
    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_with(obj, resolve_field_path)
    }
}

impl FromStr for FieldSelector {
    type Err = FieldSelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match t.op {
                FieldOperator::Equals => "=",
                FieldOperator::DoubleEquals => "==",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", t.field, escape(&t.value))?;
        }
        Ok(())
    }
}

/// The default resolver: a dotted path into the object (`spec.nodeName`,
/// `involvedObject.kind`). Strings are returned as-is, booleans and numbers
/// in their JSON spelling (so `spec.hostNetwork=true` works); objects, lists
/// and `null` resolve to nothing. An Event's `source` is its `source.component`, as
/// kube-apiserver selects it.
pub fn resolve_field_path(obj: &Value, path: &str) -> Option<String> {
    if path == "source" && obj.get("source").is_some_and(Value::is_object) {
        return resolve_field_path(obj, "source.component");
    }
    let mut cur = obj;
    for seg in path.split('.') {
        cur = cur.get(seg)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Substrings an object's compact JSON (`serde_json::to_string`) must contain to possibly match
/// both selectors: one group per equality requirement, any one alternative of a group sufficing.
/// A necessary condition only, so a list can skip parsing the objects that lack them: a field
/// selector `spec.nodeName=n` over a thousand pods then parses one or two of them, not all.
/// Requirements with no such cheap witness (`!=`, `notin`, an empty value, which also matches an
/// absent field) add no group.
pub fn json_needles(labels: &LabelSelector, fields: &FieldSelector) -> Vec<Vec<String>> {
    let quoted = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut groups = Vec::new();
    for t in fields.terms() {
        if !matches!(t.op, FieldOperator::Equals | FieldOperator::DoubleEquals)
            || t.value.is_empty()
        {
            continue;
        }
        let Some(key) = t.field.rsplit('.').next().filter(|k| !k.is_empty()) else {
            continue;
        };
        let mut alts = vec![format!("{}:{}", quoted(key), quoted(&t.value))];
        if t.field == "source" {
            // An Event's `source` is selected by its `component` (see resolve_field_path).
            alts.push(format!("\"component\":{}", quoted(&t.value)));
        }
        let key = quoted(key);
        // resolve_field_path compares booleans and numbers by their text, which is how compact
        // JSON writes them.
        if serde_json::from_str::<Value>(&t.value).is_ok_and(|v| v.is_boolean() || v.is_number()) {
            alts.push(format!("{key}:{}", t.value));
        }
        groups.push(alts);
    }
    for r in labels.requirements() {
        let key = quoted(r.key());
        match r.operator() {
            Operator::Equals | Operator::DoubleEquals | Operator::In => groups.push(
                r.values()
                    .iter()
                    .map(|v| format!("{key}:{}", quoted(v)))
                    .collect(),
            ),
            Operator::Exists | Operator::GreaterThan | Operator::LessThan => {
                groups.push(vec![format!("{key}:")])
            }
            Operator::NotEquals | Operator::NotIn | Operator::DoesNotExist => {}
        }
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Whether `json` contains a needle of every group of [`json_needles`].
pub fn may_match_json(json: &str, needles: &[Vec<String>]) -> bool {
    needles
        .iter()
        .all(|alts| alts.iter().any(|n| json.contains(n.as_str())))
}

/// The field selectors kube-apiserver supports for a built-in kind (`group`
/// is `""` for core). Every kind supports `metadata.name` and
/// `metadata.namespace`; CRDs add their `selectableFields` on top of those.
pub fn builtin_selectable_fields(group: &str, kind: &str) -> &'static [&'static str] {
    const META: &[&str] = &["metadata.name", "metadata.namespace"];
    match (group, kind) {
        ("", "Pod") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "Node") => &["metadata.name", "metadata.namespace", "spec.unschedulable"],
        ("", "Namespace") => &["metadata.name", "metadata.namespace", "status.phase"],
        ("", "Secret") => &["metadata.name", "metadata.namespace", "type"],
        ("apps", "ReplicaSet") => &["metadata.name", "metadata.namespace", "status.replicas"],
        _ => META,
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// Finds the first operator; `!=` and `==` win over `=`. Field names have no
/// escapes, so a backslash before it does not hide it.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::NotEquals, &term[i + 2..]));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::DoubleEquals, &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], FieldOperator::Equals, &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

fn unescape(v: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(c @ ('\\' | ',' | '=')) => out.push(c),
                Some(c) => return Err(FieldSelectorError::InvalidEscape(format!("\\{c}"))),
                None => return Err(FieldSelectorError::InvalidEscape("\\".into())),
            },
            // Unescaped operators inside a value are ambiguous; upstream rejects them.
            '=' | ',' => return Err(FieldSelectorError::UnescapedRune(c)),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// An Event's `source` field is its source's component, as kube-apiserver selects it, both
    /// when matching and in the text prefilter.
    #[test]
    fn an_events_source_is_its_component() {
        let ev = json!({"metadata": {"name": "worker-0.1"}, "reason": "Reboot",
            "source": {"component": "machineconfigdaemon", "host": "worker-0"}});
        let text = serde_json::to_string(&ev).unwrap();
        for (f, want) in [
            ("source=machineconfigdaemon", true),
            ("source=kubelet", false),
            ("source!=kubelet", true),
            ("source=machineconfigdaemon,reason=Reboot", true),
        ] {
            let fs = FieldSelector::parse(f).unwrap();
            assert_eq!(fs.matches(&ev), want, "{f}");
            if want {
                let needles = json_needles(&LabelSelector::everything(), &fs);
                assert!(
                    may_match_json(&text, &needles),
                    "{f} rejected by the prefilter"
                );
            }
        }
        // A string `source` elsewhere is compared as it is.
        let plain = json!({"source": "x"});
        assert!(FieldSelector::parse("source=x").unwrap().matches(&plain));
    }

    /// Every object a selector matches passes the text prefilter, and the prefilter rejects the
    /// obvious non-matches.
    #[test]
    fn json_needles_never_reject_a_match() {
        let pods = [
            json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "1"}}, "spec": {"nodeName": "worker-5", "hostNetwork": true}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "b", "labels": {"app": "web"}}, "spec": {"nodeName": "worker-50"}}),
            json!({"metadata": {"name": "worker-5", "labels": {"app": "node-agent"}}, "spec": {}}),
            json!({"metadata": {"name": "q\"x", "labels": {"app": "a\"b"}}, "spec": {"nodeName": "n/1"}}),
        ];
        let cases = [
            ("", "spec.nodeName=worker-5"),
            ("", "spec.nodeName==worker-50"),
            ("", "spec.nodeName=n/1"),
            ("", "spec.nodeName="),
            ("", "spec.nodeName!=worker-5"),
            ("", "spec.hostNetwork=true"),
            ("", "metadata.name=worker-5"),
            ("", "metadata.name=q\"x"),
            ("", "status.phase=Running,spec.nodeName=worker-5"),
            ("app=web", ""),
            ("app in (web,node-agent)", "spec.nodeName=worker-5"),
            ("tier", ""),
            ("!tier", ""),
            ("app!=web", ""),
            ("app notin (web)", ""),
            ("tier>0", ""),
        ];
        for (l, f) in cases {
            let ls = LabelSelector::parse(l).unwrap();
            let fs = FieldSelector::parse(f).unwrap();
            let needles = json_needles(&ls, &fs);
            for p in &pods {
                let text = serde_json::to_string(p).unwrap();
                if ls.matches_object(p) && fs.matches(p) {
                    assert!(
                        may_match_json(&text, &needles),
                        "{l:?} {f:?} rejected {text}"
                    );
                }
            }
        }
        let needles = json_needles(
            &LabelSelector::everything(),
            &FieldSelector::parse("spec.nodeName=worker-5").unwrap(),
        );
        let others: Vec<bool> = pods
            .iter()
            .map(|p| may_match_json(&serde_json::to_string(p).unwrap(), &needles))
            .collect();
        assert_eq!(others, [true, false, false, false]);
        assert!(
            json_needles(&LabelSelector::everything(), &FieldSelector::everything()).is_empty()
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_operators_table() {
        let l = labels(&[
            ("app", "web"),
            ("tier", "front"),
            ("empty", ""),
            ("gen", "3"),
        ]);
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (x)", false),
            ("app notin (db)", true),
            ("app notin (web, db)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("empty=", true),
            ("empty", true),
            (" app = web , ! missing ", true),
            ("gen>2", true),
            ("gen>3", false),
            ("gen<4", true),
            ("gen>-1", true),
            ("app>1", false),
            ("missing<9", false),
            ("example.com/role!=x", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&l), *want, "selector {sel:?}");
        }
    }

    #[test]
    fn label_parse_errors_name_the_part() {
        let cases: &[(&str, &str)] = &[
            ("gen>x", "one integer value"),
            ("-bad=x", "-bad"),
            ("app=-x", "-x"),
            ("Bad_Prefix.com/x=y", "Bad_Prefix.com/x"),
        ];
        for (sel, needle) in cases {
            let err = LabelSelector::parse(sel).expect_err(sel).to_string();
            assert!(err.contains(needle), "{sel:?} -> {err}");
        }
    }

    #[test]
    fn label_syntax_errors_are_worded_as_upstream() {
        let cases: &[(&str, &str)] = &[
            (
                "a in (b",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            ("app=web,", "found '', expected: identifier after ','"),
            ("a,,b", "found ',', expected: identifier after ','"),
            (
                "app in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("!a b", "found 'b', expected: ',' or 'end of string'"),
            ("app=web=x", "found '=', expected: ',' or 'end of string'"),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "a=(x)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "a in (=",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            ),
            (
                "a in (b,",
                "unable to parse requirement: found '', expected: ',', or identifier",
            ),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
        ];
        for (sel, want) in cases {
            let err = LabelSelector::parse(sel).expect_err(sel).to_string();
            assert_eq!(err, *want, "{sel:?}");
        }
    }

    #[test]
    fn empty_value_sets_hold_the_empty_value() {
        for sel in ["a in ()", "a in (,)", "a in (,b)", "a in (b,)"] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert!(
                s.matches_object(&json!({"metadata": {"labels": {"a": ""}}})),
                "{sel}"
            );
        }
        let s = LabelSelector::parse("a in (in, notin)").unwrap();
        assert_eq!(s.to_string(), "a in (in,notin)");
    }

    #[test]
    fn display_is_canonical() {
        let s = LabelSelector::parse("z in (b, a),a==1,!q,k,x!=y,n notin (c)").unwrap();
        assert_eq!(s.to_string(), "a==1,k,n notin (c),!q,x!=y,z in (a,b)");
    }

    #[test]
    fn matches_json_labels() {
        let s = LabelSelector::parse("node-role.kubernetes.io/worker,!skip").unwrap();
        let obj = json!({"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}});
        assert!(s.matches_object(&obj));
        assert!(!s.matches_object(&json!({"metadata":{}})));
        assert!(LabelSelector::everything().matches_object(&json!({})));
        assert!(!s.matches_json(None));
    }

    #[test]
    fn structured_selector() {
        let v = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["z1"]},
                {"key": "team", "operator": "Exists", "values": []}
            ]
        });
        let s = LabelSelector::from_k8s(&v).unwrap().unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("team", "x"),
            ("legacy", "1")
        ])));
        assert_eq!(
            s.to_string(),
            "app=web,!legacy,team,tier in (a,b),zone notin (z1)"
        );
    }

    #[test]
    fn structured_nil_versus_empty() {
        assert_eq!(LabelSelector::from_k8s(&Value::Null).unwrap(), None);
        assert_eq!(LabelSelector::from_k8s_field(None).unwrap(), None);
        let empty = LabelSelector::from_k8s(&json!({})).unwrap().unwrap();
        assert!(empty.is_empty());
        assert!(empty.matches(&labels(&[("any", "thing")])));
    }

    #[test]
    fn structured_errors() {
        let cases: &[(Value, &str)] = &[
            (
                json!({"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]}),
                "\"Gt\" is not a valid label selector operator",
            ),
            (
                json!({"matchExpressions":[{"key":"a","operator":"In","values":[]}]}),
                "can't be empty",
            ),
            (
                json!({"matchExpressions":[{"key":"a","operator":"Exists","values":["x"]}]}),
                "must be empty",
            ),
            (json!({"matchLabels":{"a":1}}), "must be a string"),
            (json!({"matchLabels":{"a b":"x"}}), "a b"),
            (json!("x"), "expected an object"),
        ];
        for (v, needle) in cases {
            let err = LabelSelector::from_k8s(v)
                .expect_err("must fail")
                .to_string();
            assert!(err.contains(needle), "{v} -> {err}");
        }
    }

    #[test]
    fn field_selector_table() {
        let pod = json!({
            "metadata": {"name": "p1", "namespace": "default"},
            "spec": {"nodeName": "worker-0", "hostNetwork": true},
            "status": {"phase": "Running"}
        });
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("metadata.name=p1", true),
            ("metadata.name==p1", true),
            ("metadata.name!=p1", false),
            ("spec.nodeName=worker-0,status.phase=Running", true),
            ("spec.nodeName=worker-0,status.phase!=Running", false),
            ("spec.hostNetwork=true", true),
            ("status.podIP=", true),
            ("status.podIP!=", false),
        ];
        for (sel, want) in cases {
            let s = FieldSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&pod), *want, "{sel}");
        }
    }

    #[test]
    fn field_selector_escapes_and_errors() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c").unwrap();
        assert_eq!(s.terms()[0].value, "a,b=c");
        assert!(s.matches(&json!({"metadata":{"name":"a,b=c"}})));
        assert_eq!(s.to_string(), r"metadata.name=a\,b\=c");

        let err = FieldSelector::parse("metadata.name").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        // An empty field name parses; the server then names it unsupported.
        assert_eq!(FieldSelector::parse("=x").unwrap().terms()[0].field, "");
        assert_eq!(FieldSelector::parse("a=b,,c=d").unwrap().terms().len(), 2);
        let msg = |sel: &str| FieldSelector::parse(sel).unwrap_err().to_string();
        assert_eq!(
            msg("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            msg(r"a=b\x"),
            r"invalid field selector: invalid escape sequence: \x"
        );
        assert_eq!(
            msg(r"a=b\"),
            r"invalid field selector: invalid escape sequence: \"
        );
        // Terms are checked in sorted order.
        assert_eq!(msg("z,a"), "invalid selector: 'z,a'; can't understand 'a'");
    }

    #[test]
    fn field_selector_support_check() {
        let s = FieldSelector::parse("involvedObject.kind=Node,spec.foo=bar").unwrap();
        assert_eq!(
            s.fields().collect::<Vec<_>>(),
            vec!["involvedObject.kind", "spec.foo"]
        );
        let err = s
            .check_supported(builtin_selectable_fields("", "Event"))
            .unwrap_err();
        assert_eq!(err.to_string(), "field label not supported: spec.foo");
        let ok = FieldSelector::parse("spec.nodeName=n").unwrap();
        assert!(
            ok.check_supported(builtin_selectable_fields("", "Pod"))
                .is_ok()
        );
        assert!(
            ok.check_supported(builtin_selectable_fields("", "ConfigMap"))
                .is_err()
        );
    }

    #[test]
    fn field_selector_custom_resolver() {
        let s = FieldSelector::one_term_equal("spec.nodeName", "n1");
        let upper = |_: &Value, _: &str| Some("n1".to_string());
        assert!(s.matches_with(&json!({}), upper));
        assert!(!s.matches(&json!({})));
    }

    fn label_name() -> impl Strategy<Value = String> {
        "[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?"
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        let key = (
            proptest::option::of("[a-z]{1,5}(\\.[a-z]{1,5})?"),
            label_name(),
        )
            .prop_map(|(p, n)| match p {
                Some(p) => format!("{p}/{n}"),
                None => n,
            });
        let op = prop_oneof![
            Just(Operator::Equals),
            Just(Operator::DoubleEquals),
            Just(Operator::NotEquals),
            Just(Operator::In),
            Just(Operator::NotIn),
            Just(Operator::Exists),
            Just(Operator::DoesNotExist),
            Just(Operator::GreaterThan),
            Just(Operator::LessThan),
        ];
        (key, op, proptest::collection::vec(label_name(), 1..4)).prop_map(|(k, op, vals)| {
            let vals = match op {
                Operator::Exists | Operator::DoesNotExist => vec![],
                Operator::GreaterThan | Operator::LessThan => vec![format!("{}", vals.len())],
                Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                    vec![vals[0].clone()]
                }
                _ => vals,
            };
            Requirement::new(k, op, vals).expect("generated requirement is valid")
        })
    }

    proptest! {
        #[test]
        fn label_selector_round_trips(reqs in proptest::collection::vec(requirement(), 0..5)) {
            let s = LabelSelector::from_requirements(reqs);
            let text = s.to_string();
            let back = LabelSelector::parse(&text).unwrap();
            prop_assert_eq!(back, s);
        }

        #[test]
        fn field_selector_round_trips(value in "[ -~]{0,12}") {
            let s = FieldSelector::one_term_equal("metadata.name", value.clone());
            let back = FieldSelector::parse(&s.to_string()).unwrap();
            prop_assert_eq!(back.terms()[0].value.as_str(), value.as_str());
        }

        #[test]
        fn everything_matches_any_labels(
            m in proptest::collection::btree_map(label_name(), label_name(), 0..5)
        ) {
            prop_assert!(LabelSelector::everything().matches(&m));
        }
    }
}

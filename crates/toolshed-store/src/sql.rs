//! Statements written once: [`Sql`] (the text, per dialect where the dialects differ),
//! [`Param`] (a bound value), [`Row`] (a result row of plain values), and the
//! [`Executor`] that runs them on either database.
//!
//! Statement text uses SQLite's numbered placeholders (`?1`, `?2`, …); on PostgreSQL they
//! become `$1`, `$2`, … when the statement is first prepared on a connection. A
//! placeholder may appear more than once. Values are bound by what they are
//! ([`Param::Json`] binds as `jsonb` on PostgreSQL and as text on SQLite), and rows come
//! back as [`Value`]s read with [`Row::get`], so a store's decoding of its rows is
//! written once too.

use futures_util::future::BoxFuture;

use crate::error::DbError;

/// Which SQL dialect an executor speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3 (bundled with rusqlite).
    Sqlite,
    /// PostgreSQL 13 or newer.
    Postgres,
}

/// One statement's text, in `?N` placeholder form: the same for both dialects, or one
/// text each where they differ (`FOR UPDATE`, `RETURNING` costs, types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sql {
    sqlite: &'static str,
    postgres: &'static str,
}

impl Sql {
    /// A statement both dialects run as written.
    pub const fn same(text: &'static str) -> Sql {
        Sql {
            sqlite: text,
            postgres: text,
        }
    }

    /// A statement with a text for each dialect.
    pub const fn per_dialect(sqlite: &'static str, postgres: &'static str) -> Sql {
        Sql { sqlite, postgres }
    }

    /// The text for `dialect`.
    pub fn text(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        }
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// SQL `NULL`.
    Null,
    /// A whole number (`INTEGER` / `BIGINT`; narrowed for smaller PostgreSQL types).
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text.
    Text(String),
    /// JSON: `jsonb` (or `json`) on PostgreSQL, the serialized text on SQLite.
    Json(serde_json::Value),
}

impl From<&str> for Param {
    fn from(s: &str) -> Self {
        Param::Text(s.to_owned())
    }
}

impl From<String> for Param {
    fn from(s: String) -> Self {
        Param::Text(s)
    }
}

impl From<&String> for Param {
    fn from(s: &String) -> Self {
        Param::Text(s.clone())
    }
}

impl From<i64> for Param {
    fn from(n: i64) -> Self {
        Param::Int(n)
    }
}

impl From<u32> for Param {
    fn from(n: u32) -> Self {
        Param::Int(i64::from(n))
    }
}

impl From<f64> for Param {
    fn from(x: f64) -> Self {
        Param::Real(x)
    }
}

impl From<&serde_json::Value> for Param {
    fn from(v: &serde_json::Value) -> Self {
        Param::Json(v.clone())
    }
}

impl<T: Into<Param>> From<Option<T>> for Param {
    fn from(v: Option<T>) -> Self {
        v.map_or(Param::Null, Into::into)
    }
}

impl From<&Option<String>> for Param {
    fn from(v: &Option<String>) -> Self {
        v.as_deref().map_or(Param::Null, Param::from)
    }
}

/// A column's value as read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A whole number.
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text (JSON stored as text comes back as text, and [`Row::get`] parses it).
    Text(String),
    /// A PostgreSQL `json`/`jsonb` column.
    Json(serde_json::Value),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "an integer",
            Value::Real(_) => "a real",
            Value::Text(_) => "text",
            Value::Json(_) => "JSON",
        }
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    values: Vec<Value>,
}

impl Row {
    /// A row of these values, in column order.
    pub fn new(values: Vec<Value>) -> Self {
        Row { values }
    }

    /// How many columns.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Column `i` read as `T`; a missing column or one of another type is a `Decode`
    /// error naming the column.
    pub fn get<T: FromValue>(&self, i: usize) -> Result<T, DbError> {
        let value = self
            .values
            .get(i)
            .ok_or_else(|| DbError::decode(format!("the row has no column {i}")))?;
        T::from_value(value).map_err(|expected| {
            DbError::decode(format!(
                "column {i} holds {}, expected {expected}",
                value.kind()
            ))
        })
    }
}

/// A Rust type a column can be read as. The error is what was expected.
pub trait FromValue: Sized {
    /// Convert, or say what was expected.
    fn from_value(value: &Value) -> Result<Self, &'static str>;
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Text(s) => Ok(s.clone()),
            _ => Err("text"),
        }
    }
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(n) => Ok(*n),
            _ => Err("an integer"),
        }
    }
}

impl FromValue for u32 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(n) => u32::try_from(*n).map_err(|_| "an integer from 0 to 4294967295"),
            _ => Err("an integer"),
        }
    }
}

impl FromValue for u64 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(n) => u64::try_from(*n).map_err(|_| "a non-negative integer"),
            _ => Err("an integer"),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Real(x) => Ok(*x),
            // SQLite gives a REAL column's whole numbers back as integers when they were
            // bound as such.
            Value::Int(n) => Ok(*n as f64),
            _ => Err("a number"),
        }
    }
}

impl FromValue for serde_json::Value {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Json(v) => Ok(v.clone()),
            Value::Text(s) => serde_json::from_str(s).map_err(|_| "JSON text"),
            _ => Err("JSON"),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// Runs statements on one connection (or inside one transaction). Implemented for
/// SQLite and PostgreSQL connections; a store's rules are written once over
/// `&mut dyn Executor`.
///
/// On SQLite every future this returns is already complete when it is first polled (the
/// work happens on the blocking thread that runs the rule), so a rule must await
/// nothing but its executor: the SQLite side polls a rule once and reports a rule that
/// is still pending as a bug.
pub trait Executor: Send {
    /// The dialect, to pick a statement's text.
    fn dialect(&self) -> Dialect;

    /// Run a statement (`?N` placeholders) and return every row.
    fn query<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<Vec<Row>, DbError>>;

    /// Run a statement and return how many rows it changed.
    fn execute<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<u64, DbError>>;
}

impl dyn Executor + '_ {
    /// Every row of `sql`.
    pub async fn rows(&mut self, sql: &Sql, params: &[Param]) -> Result<Vec<Row>, DbError> {
        let text = sql.text(self.dialect());
        self.query(text, params).await
    }

    /// The first row of `sql`, if any.
    pub async fn row(&mut self, sql: &Sql, params: &[Param]) -> Result<Option<Row>, DbError> {
        Ok(self.rows(sql, params).await?.into_iter().next())
    }

    /// Run `sql`; how many rows it changed.
    pub async fn run(&mut self, sql: &Sql, params: &[Param]) -> Result<u64, DbError> {
        let text = sql.text(self.dialect());
        self.execute(text, params).await
    }
}

/// A statement's text with `?N` placeholders as PostgreSQL's `$N`. Only placeholders
/// outside string literals and quoted identifiers change (statements are the stores'
/// own text, never user input).
pub fn to_postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
            }
            None => out.push(c),
        }
    }
    out
}

/// Builds a statement whose conditions depend on the request (a listing's filters):
/// `push` adds text, `bind` adds a value and writes its placeholder, the same for both
/// dialects.
#[derive(Debug, Clone, Default)]
pub struct Query {
    sql: String,
    params: Vec<Param>,
}

impl Query {
    /// Start with `text`.
    pub fn new(text: &str) -> Self {
        Query {
            sql: text.to_owned(),
            params: Vec::new(),
        }
    }

    /// Append text.
    pub fn push(&mut self, text: &str) -> &mut Self {
        self.sql.push_str(text);
        self
    }

    /// Append the placeholder of a new value.
    pub fn bind(&mut self, value: impl Into<Param>) -> &mut Self {
        self.params.push(value.into());
        self.sql.push_str(&format!("?{}", self.params.len()));
        self
    }

    /// Append the placeholder of the value bound `n`-th (from 1) again.
    pub fn rebind(&mut self, n: usize) -> &mut Self {
        self.sql.push_str(&format!("?{n}"));
        self
    }

    /// How many values are bound.
    pub fn bound(&self) -> usize {
        self.params.len()
    }

    /// The text and the values.
    pub fn parts(&self) -> (&str, &[Param]) {
        (&self.sql, &self.params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            to_postgres_placeholders(
                "SELECT '?1', \"a?2\" FROM t WHERE a = ?1 AND b = ?12 OR c = ?"
            ),
            "SELECT '?1', \"a?2\" FROM t WHERE a = $1 AND b = $12 OR c = ?"
        );
    }

    #[test]
    fn rows_read_typed_values_and_name_the_column_on_mismatch() {
        let row = Row::new(vec![
            Value::Text("a".into()),
            Value::Null,
            Value::Int(3),
            Value::Text("{\"k\": 1}".into()),
        ]);
        assert_eq!(row.get::<String>(0).unwrap(), "a");
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        assert_eq!(row.get::<u32>(2).unwrap(), 3);
        assert_eq!(row.get::<f64>(2).unwrap(), 3.0);
        assert_eq!(
            row.get::<serde_json::Value>(3).unwrap(),
            serde_json::json!({"k": 1})
        );
        let err = row.get::<String>(2).unwrap_err();
        assert_eq!(err.message, "column 2 holds an integer, expected text");
        assert!(row.get::<String>(9).is_err());
    }

    #[test]
    fn a_query_numbers_its_values() {
        let mut q = Query::new("SELECT * FROM t WHERE a = ");
        q.bind("x")
            .push(" AND b < ")
            .bind(3_i64)
            .push(" OR a = ")
            .rebind(1);
        let (sql, params) = q.parts();
        assert_eq!(sql, "SELECT * FROM t WHERE a = ?1 AND b < ?2 OR a = ?1");
        assert_eq!(params, [Param::Text("x".into()), Param::Int(3)]);
    }
}

//! `sql_query` on PostgreSQL: a `READ ONLY` session default, and each statement in its
//! own `START TRANSACTION READ ONLY` that is rolled back, with advisory locks released
//! after it.
//!
//! A pooled connection always waits inside a fresh read-only transaction that has run
//! nothing yet, so a call's own path is its statement alone (one round trip for a
//! statement already prepared on the connection). The round trip that ends it
//! (`ROLLBACK; SELECT pg_advisory_unlock_all(); START TRANSACTION READ ONLY`) runs after
//! the answer is handed back and before the connection returns to the pool, as the
//! MySQL module does.
//!
//! Values are read in PostgreSQL's binary format and turned into JSON here; a column of
//! a type this module does not know is refused before the statement runs, with the
//! cast to write (`col::text`). Params are encoded for the type PostgreSQL inferred for
//! each placeholder.

use std::error::Error as StdError;
use std::sync::Mutex;

use bytes::{BufMut, BytesMut};
use futures_util::StreamExt;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::{
    Collector, Fail, STATEMENT_TIMEOUT, Slots, SqlColumn, SqlQueryArgs, SqlResult, StatementCache,
    base64, float,
};

/// Ends a call's transaction (undoing whatever it changed in the session, and releasing
/// a session-level advisory lock a user-defined function could have taken) and begins
/// the next call's.
const RESET: &str = "ROLLBACK; SELECT pg_advisory_unlock_all(); START TRANSACTION READ ONLY";

pub(super) struct Pool {
    config: Config,
    slots: std::sync::Arc<Slots<Conn>>,
}

struct Conn {
    client: Client,
    statements: Mutex<StatementCache<Statement>>,
}

impl Pool {
    pub(super) fn new(config: Config) -> Self {
        Pool {
            config,
            slots: std::sync::Arc::new(Slots::new()),
        }
    }

    async fn connect(&self) -> Result<Conn, Fail> {
        let mut config = self.config.clone();
        config.connect_timeout(std::time::Duration::from_secs(10));
        let (client, connection) = config.connect(NoTls).await.map_err(|e| {
            Fail::new(
                "unavailable",
                format!("cannot connect to PostgreSQL: {}", pg_text(&e)),
            )
            .retryable()
        })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // The session's own defaults: every transaction read-only unless it says
        // otherwise (ours say READ ONLY too), and a statement timeout. A statement's
        // own changes to them are rolled back with its transaction. An idle pooled
        // connection waits inside its next transaction: the server ends one idle for
        // five minutes, and the next call on it is retried on a new one. Strings are
        // read as the denylist's tokenizer reads them (a backslash is no escape in
        // '…'), whatever the server's or role's default.
        client
            .batch_execute(&format!(
                "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY; \
                 SET statement_timeout = {}; SET idle_in_transaction_session_timeout = 300000; \
                 SET standard_conforming_strings = on; \
                 START TRANSACTION READ ONLY",
                STATEMENT_TIMEOUT.as_millis()
            ))
            .await
            .map_err(|e| {
                Fail::new(
                    "unavailable",
                    format!("cannot set up the PostgreSQL session: {}", pg_text(&e)),
                )
                .broken()
            })?;
        Ok(Conn {
            client,
            statements: Mutex::new(StatementCache::new()),
        })
    }

    pub(super) async fn run(&self, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
        let permit = self.slots.permit().await?;
        let idle = self.slots.take_idle().filter(|c| !c.client.is_closed());
        let reused = idle.is_some();
        let conn = match idle {
            Some(c) => c,
            None => self.connect().await?,
        };
        let timed = tokio::time::timeout(
            STATEMENT_TIMEOUT + std::time::Duration::from_secs(2),
            run(&conn, args),
        )
        .await;
        let outcome = match timed {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(mut f)) => {
                if f.broken || conn.client.is_closed() {
                    f.reused = reused;
                    f.broken = true;
                    return Err(f);
                }
                Err(f)
            }
            Err(_) => {
                // The server did not end it in time: cancel it, and never reuse the
                // connection, whose pipeline is in an unknown state.
                let token = conn.client.cancel_token();
                tokio::spawn(async move {
                    let _ = token.cancel_query(NoTls).await;
                });
                return Err(Fail::timeout());
            }
        };
        // End this transaction and begin the next off the caller's path; the permit
        // goes with it, so the pool never holds more than its connections. A
        // connection whose reset fails is dropped, never reused.
        let slots = self.slots.clone();
        tokio::spawn(async move {
            if conn.client.simple_query(RESET).await.is_ok() {
                slots.put_back(conn);
            }
            drop(permit);
        });
        outcome
    }
}

async fn run(conn: &Conn, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
    let sql = args.query.as_str();
    super::denied::check(sql, super::denied::Dialect::Postgres)?;
    let cached = conn
        .statements
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(sql);
    let stmt = match cached {
        Some(s) => s,
        None => {
            let s = conn
                .client
                .prepare(sql)
                .await
                .map_err(|e| failed(&e, sql))?;
            conn.statements
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(sql, s.clone());
            s
        }
    };
    if stmt.columns().is_empty() {
        return Err(Fail::not_a_query(sql));
    }
    if stmt.params().len() != args.params.len() {
        return Err(Fail::params(stmt.params().len(), args.params.len()));
    }
    for c in stmt.columns() {
        if !readable(c.type_()) {
            return Err(Fail::new(
                "unsupported_type",
                format!(
                    "column `{0}` has type {1}, which sql_query cannot return; cast it in the query, e.g. `{0}::text`",
                    c.name(),
                    c.type_().name()
                ),
            ));
        }
    }
    for (i, ty) in stmt.params().iter().enumerate() {
        if !writable(ty) {
            return Err(Fail::new(
                "unsupported_type",
                format!(
                    "placeholder ${} is of type {}, which sql_query cannot bind; cast it in the query, e.g. `${}::text::{}`",
                    i + 1,
                    ty.name(),
                    i + 1,
                    ty.name()
                ),
            ));
        }
    }
    let columns: Vec<SqlColumn> = stmt
        .columns()
        .iter()
        .map(|c| SqlColumn {
            name: c.name().to_owned(),
            type_name: c.type_().name().to_owned(),
        })
        .collect();
    let params: Vec<Param<'_>> = args.params.iter().map(Param).collect();
    let client = &conn.client;
    let read = async {
        let stream = client
            .query_raw(&stmt, params.iter().map(|p| p as &(dyn ToSql + Sync)))
            .await?;
        futures_util::pin_mut!(stream);
        let mut collector = Collector::new(args.max_rows);
        while let Some(row) = stream.next().await {
            let row = row?;
            let mut values = Vec::with_capacity(row.len());
            for (i, c) in stmt.columns().iter().enumerate() {
                let raw: Raw<'_> = row.try_get(i)?;
                values.push(match raw.0 {
                    None => Value::Null,
                    Some(bytes) => decode(c.type_(), bytes).unwrap_or_else(|e| {
                        Value::String(format!("<cannot read {}: {e}>", c.type_().name()))
                    }),
                });
            }
            if !collector.push(values) {
                break;
            }
        }
        Ok::<_, tokio_postgres::Error>(collector)
    };
    let collector = match read.await {
        Ok(c) => c,
        Err(e) => {
            if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) {
                // "cached plan must not change result type": the table changed.
                conn.statements
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(sql);
            }
            return Err(failed(&e, sql));
        }
    };
    Ok(collector.finish("postgres", columns))
}

/// A PostgreSQL error's own text, never the connection's parameters.
fn pg_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

fn failed(e: &tokio_postgres::Error, sql: &str) -> Fail {
    let text = pg_text(e);
    let Some(code) = e.code() else {
        if e.is_closed()
            || e.as_db_error().is_none() && e.source().is_some_and(|s| s.is::<std::io::Error>())
        {
            return Fail::new(
                "unavailable",
                format!("the PostgreSQL connection failed: {text}"),
            )
            .broken();
        }
        if text.contains("serializing parameter") {
            return Fail::new(
                "invalid_params",
                format!("a param does not fit its placeholder: {text}"),
            );
        }
        return Fail::new(
            "refused",
            format!("PostgreSQL refused the statement: {text}"),
        );
    };
    if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        Fail::write_refused(&format!("PostgreSQL refused a write ({text})"))
    } else if *code == SqlState::QUERY_CANCELED {
        Fail::timeout()
    } else if *code == SqlState::SYNTAX_ERROR && text.contains("multiple commands") {
        Fail::new(
            "multiple_statements",
            "sql_query runs one statement per call; the query has more than one (after a `;`), so none was run",
        )
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        Fail::new(
            "not_allowed",
            format!("the database role may not do this: {text}"),
        )
    } else if code.code().starts_with("08") || code.code().starts_with("57P") {
        Fail::new(
            "unavailable",
            format!("the PostgreSQL connection failed: {text}"),
        )
        .broken()
    } else {
        let _ = sql;
        Fail::new(
            "refused",
            format!("PostgreSQL refused the statement: {text}"),
        )
    }
}

/// A value as PostgreSQL sent it, in its binary format.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn is_text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
    ) || ty.name() == "citext"
        || matches!(ty.kind(), Kind::Enum(_))
}

/// Whether [`decode`] reads this type.
fn readable(ty: &Type) -> bool {
    if is_text(ty) {
        return true;
    }
    match ty.kind() {
        Kind::Domain(inner) => return readable(inner),
        Kind::Array(elem) => return readable(elem),
        _ => {}
    }
    matches!(
        *ty,
        Type::BOOL
            | Type::INT2
            | Type::INT4
            | Type::INT8
            | Type::OID
            | Type::FLOAT4
            | Type::FLOAT8
            | Type::NUMERIC
            | Type::CHAR
            | Type::JSON
            | Type::JSONB
            | Type::UUID
            | Type::BYTEA
            | Type::DATE
            | Type::TIME
            | Type::TIMESTAMP
            | Type::TIMESTAMPTZ
            | Type::INTERVAL
            | Type::VOID
    )
}

type DecodeResult = Result<Value, Box<dyn StdError + Sync + Send>>;

/// One value in PostgreSQL's binary format as JSON.
fn decode(ty: &Type, raw: &[u8]) -> DecodeResult {
    if is_text(ty) {
        return Ok(Value::String(String::from_utf8_lossy(raw).into_owned()));
    }
    match ty.kind() {
        Kind::Domain(inner) => return decode(inner, raw),
        Kind::Array(elem) => return decode_array(elem, raw),
        _ => {}
    }
    Ok(match *ty {
        Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
        Type::INT2 => Value::from(i16::from_sql(ty, raw)?),
        Type::INT4 => Value::from(i32::from_sql(ty, raw)?),
        Type::INT8 => Value::from(i64::from_sql(ty, raw)?),
        Type::OID => Value::from(u32::from_sql(ty, raw)?),
        Type::FLOAT4 => float(f64::from(f32::from_sql(ty, raw)?)),
        Type::FLOAT8 => float(f64::from_sql(ty, raw)?),
        Type::NUMERIC => Value::String(numeric_to_string(raw)?),
        Type::CHAR => Value::String(char::from(i8::from_sql(ty, raw)? as u8).to_string()),
        Type::JSON | Type::JSONB => serde_json::Value::from_sql(ty, raw)?,
        Type::UUID => {
            let b: [u8; 16] = raw.try_into().map_err(|_| "a uuid is 16 bytes")?;
            let h = hex::encode(b);
            Value::String(format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            ))
        }
        Type::BYTEA => base64(raw),
        Type::DATE => {
            let days = i32::from_sql(&Type::INT4, raw)?;
            Value::String(match days {
                i32::MAX => "infinity".into(),
                i32::MIN => "-infinity".into(),
                d => epoch()
                    .date()
                    .checked_add_signed(chrono::Duration::days(i64::from(d)))
                    .map(|d| d.to_string())
                    .ok_or("date out of range")?,
            })
        }
        Type::TIME => {
            let us = i64::from_sql(&Type::INT8, raw)?;
            let t = chrono::NaiveTime::MIN + chrono::Duration::microseconds(us);
            Value::String(t.format("%H:%M:%S%.f").to_string())
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let us = i64::from_sql(&Type::INT8, raw)?;
            Value::String(match us {
                i64::MAX => "infinity".into(),
                i64::MIN => "-infinity".into(),
                us => {
                    let at = epoch()
                        .checked_add_signed(chrono::Duration::microseconds(us))
                        .ok_or("timestamp out of range")?;
                    let text = at.format("%Y-%m-%dT%H:%M:%S%.f").to_string();
                    if *ty == Type::TIMESTAMPTZ {
                        format!("{text}Z")
                    } else {
                        text
                    }
                }
            })
        }
        Type::INTERVAL => {
            if raw.len() != 16 {
                return Err("an interval is 16 bytes".into());
            }
            let us = i64::from_be_bytes(raw[0..8].try_into()?);
            let days = i32::from_be_bytes(raw[8..12].try_into()?);
            let months = i32::from_be_bytes(raw[12..16].try_into()?);
            let secs = us as f64 / 1e6;
            Value::String(format!("P{months}M{days}DT{secs}S"))
        }
        Type::VOID => Value::Null,
        _ => return Err(format!("type {} is not supported", ty.name()).into()),
    })
}

fn epoch() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .unwrap_or_default()
}

fn read_i32(raw: &[u8], at: usize) -> Result<i32, Box<dyn StdError + Sync + Send>> {
    let b = raw.get(at..at + 4).ok_or("the array is cut short")?;
    Ok(i32::from_be_bytes(b.try_into()?))
}

/// A PostgreSQL array (binary format) as nested JSON arrays.
fn decode_array(elem: &Type, raw: &[u8]) -> DecodeResult {
    let ndim = usize::try_from(read_i32(raw, 0)?).map_err(|_| "bad array dimensions")?;
    if ndim == 0 {
        return Ok(Value::Array(Vec::new()));
    }
    if ndim > 6 {
        return Err("too many array dimensions".into());
    }
    let mut dims = Vec::with_capacity(ndim);
    for d in 0..ndim {
        let len = usize::try_from(read_i32(raw, 12 + d * 8)?).map_err(|_| "bad array length")?;
        dims.push(len);
    }
    let mut at = 12 + ndim * 8;
    let total: usize = dims.iter().product();
    let mut flat = Vec::with_capacity(total.min(100_000));
    for _ in 0..total {
        let len = read_i32(raw, at)?;
        at += 4;
        if len < 0 {
            flat.push(Value::Null);
            continue;
        }
        let len = len as usize;
        let bytes = raw.get(at..at + len).ok_or("the array is cut short")?;
        at += len;
        flat.push(decode(elem, bytes)?);
    }
    // Fold the flat list into the dimensions, innermost first.
    let mut values = flat;
    for &len in dims[1..].iter().rev() {
        let len = len.max(1);
        let mut grouped = Vec::with_capacity(values.len() / len);
        let mut it = values.into_iter();
        loop {
            let chunk: Vec<Value> = it.by_ref().take(len).collect();
            if chunk.is_empty() {
                break;
            }
            grouped.push(Value::Array(chunk));
        }
        values = grouped;
    }
    Ok(Value::Array(values))
}

/// NUMERIC's binary form (base-10000 digits, a weight, a sign and a display scale) as
/// its exact decimal text.
fn numeric_to_string(raw: &[u8]) -> Result<String, Box<dyn StdError + Sync + Send>> {
    let field = |i: usize| -> Result<u16, Box<dyn StdError + Sync + Send>> {
        let b = raw.get(i * 2..i * 2 + 2).ok_or("numeric is cut short")?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::from(field(0)?);
    let weight = field(1)? as i16 as i32;
    let sign = field(2)?;
    let dscale = usize::from(field(3)?);
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => {}
    }
    let mut digits = Vec::with_capacity(ndigits);
    for i in 0..ndigits {
        digits.push(i32::from(field(4 + i)?));
    }
    let digit = |pos: i32| -> i32 {
        if pos >= 0 && (pos as usize) < digits.len() {
            digits[pos as usize]
        } else {
            0
        }
    };
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        for pos in 0..=weight {
            let d = digit(pos);
            if pos == 0 {
                out.push_str(&d.to_string());
            } else {
                out.push_str(&format!("{d:04}"));
            }
        }
    }
    if dscale > 0 {
        out.push('.');
        let mut frac = String::new();
        let mut pos = weight + 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", digit(pos)));
            pos += 1;
        }
        frac.truncate(dscale);
        out.push_str(&frac);
    }
    Ok(out)
}

/// A decimal text (`-12.5`, `3e2`) in NUMERIC's binary form.
fn numeric_from_str(text: &str, out: &mut BytesMut) -> Result<(), Box<dyn StdError + Sync + Send>> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a decimal number");
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().map_err(|_| bad())?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || exp.abs() > 1000
    {
        return Err(bad().into());
    }
    // All digits, and where the point falls among them.
    let all: String = format!("{int}{frac}");
    let point = int.len() as i32 + exp;
    let dscale = (all.len() as i32 - point).max(0) as u16;
    let (int_digits, frac_digits) = if point <= 0 {
        (
            String::new(),
            format!("{}{all}", "0".repeat((-point) as usize)),
        )
    } else if point as usize >= all.len() {
        (
            format!("{all}{}", "0".repeat(point as usize - all.len())),
            String::new(),
        )
    } else {
        (
            all[..point as usize].to_owned(),
            all[point as usize..].to_owned(),
        )
    };
    let int_digits = int_digits.trim_start_matches('0');
    let pad_left = (4 - int_digits.len() % 4) % 4;
    let int_padded = format!("{}{int_digits}", "0".repeat(pad_left));
    let pad_right = (4 - frac_digits.len() % 4) % 4;
    let frac_padded = format!("{frac_digits}{}", "0".repeat(pad_right));
    let mut groups: Vec<i16> = Vec::new();
    for chunk in int_padded
        .as_bytes()
        .chunks(4)
        .chain(frac_padded.as_bytes().chunks(4))
    {
        let s = std::str::from_utf8(chunk)?;
        groups.push(s.parse::<i16>()?);
    }
    let mut weight = (int_padded.len() / 4) as i32 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(i16::try_from(groups.len())?);
    out.put_i16(i16::try_from(weight)?);
    out.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_u16(dscale);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

/// Whether [`Param`] can encode a value for this type.
fn writable(ty: &Type) -> bool {
    if is_text(ty) {
        return true;
    }
    if let Kind::Domain(inner) = ty.kind() {
        return writable(inner);
    }
    matches!(
        *ty,
        Type::BOOL
            | Type::INT2
            | Type::INT4
            | Type::INT8
            | Type::OID
            | Type::FLOAT4
            | Type::FLOAT8
            | Type::NUMERIC
            | Type::JSON
            | Type::JSONB
            | Type::UUID
            | Type::BYTEA
            | Type::DATE
            | Type::TIMESTAMP
            | Type::TIMESTAMPTZ
    )
}

/// A JSON param, encoded for the type PostgreSQL inferred for its placeholder.
#[derive(Debug)]
struct Param<'a>(&'a Value);

type Encoded = Result<IsNull, Box<dyn StdError + Sync + Send>>;

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Encoded {
        encode(self.0, ty, out)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn encode(v: &Value, ty: &Type, out: &mut BytesMut) -> Encoded {
    if v.is_null() {
        return Ok(IsNull::Yes);
    }
    let wrong = |what: &str| -> Box<dyn StdError + Sync + Send> {
        format!(
            "{v} is not {what}, which the placeholder ({}) needs",
            ty.name()
        )
        .into()
    };
    if is_text(ty) {
        let text = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.put_slice(text.as_bytes());
        return Ok(IsNull::No);
    }
    if let Kind::Domain(inner) = ty.kind() {
        return encode(v, inner, out);
    }
    let int = || -> Result<i64, Box<dyn StdError + Sync + Send>> {
        match v {
            Value::Number(n) => n.as_i64().ok_or_else(|| wrong("an integer")),
            Value::String(s) => s.trim().parse().map_err(|_| wrong("an integer")),
            Value::Bool(b) => Ok(i64::from(*b)),
            _ => Err(wrong("an integer")),
        }
    };
    let num = || -> Result<f64, Box<dyn StdError + Sync + Send>> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| wrong("a number")),
            Value::String(s) => s.trim().parse().map_err(|_| wrong("a number")),
            _ => Err(wrong("a number")),
        }
    };
    let text = || -> Result<&str, Box<dyn StdError + Sync + Send>> {
        v.as_str().ok_or_else(|| wrong("a string"))
    };
    match *ty {
        Type::BOOL => match v {
            Value::Bool(b) => b.to_sql(ty, out),
            Value::String(s) if s.eq_ignore_ascii_case("true") => true.to_sql(ty, out),
            Value::String(s) if s.eq_ignore_ascii_case("false") => false.to_sql(ty, out),
            _ => Err(wrong("a boolean")),
        },
        Type::INT2 => i16::try_from(int()?)
            .map_err(|_| wrong("a 16-bit integer"))?
            .to_sql(ty, out),
        Type::INT4 => i32::try_from(int()?)
            .map_err(|_| wrong("a 32-bit integer"))?
            .to_sql(ty, out),
        Type::INT8 => int()?.to_sql(ty, out),
        Type::OID => u32::try_from(int()?)
            .map_err(|_| wrong("an oid"))?
            .to_sql(ty, out),
        Type::FLOAT4 => (num()? as f32).to_sql(ty, out),
        Type::FLOAT8 => num()?.to_sql(ty, out),
        Type::NUMERIC => {
            let text = match v {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                _ => return Err(wrong("a number")),
            };
            numeric_from_str(&text, out)?;
            Ok(IsNull::No)
        }
        Type::JSON | Type::JSONB => v.to_sql(ty, out),
        Type::UUID => {
            let hex_text: String = text()?.chars().filter(|c| *c != '-').collect();
            let bytes = hex::decode(&hex_text).map_err(|_| wrong("a uuid"))?;
            if bytes.len() != 16 {
                return Err(wrong("a uuid"));
            }
            out.put_slice(&bytes);
            Ok(IsNull::No)
        }
        Type::BYTEA => {
            out.put_slice(text()?.as_bytes());
            Ok(IsNull::No)
        }
        Type::DATE => {
            let d = chrono::NaiveDate::parse_from_str(text()?.trim(), "%Y-%m-%d")
                .map_err(|_| wrong("a date like 2026-01-31"))?;
            let days = (d - epoch().date()).num_days();
            i32::try_from(days)
                .map_err(|_| wrong("a date in range"))?
                .to_sql(&Type::INT4, out)
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let s = text()?.trim();
            let at = match chrono::DateTime::parse_from_rfc3339(s) {
                Ok(t) => t.naive_utc(),
                Err(_) => chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                    .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f"))
                    .map_err(|_| wrong("a timestamp like 2026-01-31T12:00:00Z"))?,
            };
            let us = (at - epoch())
                .num_microseconds()
                .ok_or_else(|| wrong("a timestamp in range"))?;
            us.to_sql(&Type::INT8, out)
        }
        _ => Err(format!(
            "sql_query cannot bind type {}; cast the placeholder",
            ty.name()
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let mut out = BytesMut::new();
        numeric_from_str(text, &mut out).unwrap();
        numeric_to_string(&out).unwrap()
    }

    #[test]
    fn numerics_round_trip() {
        for (input, expect) in [
            ("0", "0"),
            ("12.50", "12.50"),
            ("-0.0001", "-0.0001"),
            ("123456789.123456789", "123456789.123456789"),
            ("1e3", "1000"),
            ("2.5e-3", "0.0025"),
            ("10000", "10000"),
            ("-99999999", "-99999999"),
        ] {
            assert_eq!(round_trip(input), expect, "{input}");
        }
        let mut out = BytesMut::new();
        assert!(numeric_from_str("1.2.3", &mut out).is_err());
        assert!(numeric_from_str("abc", &mut out).is_err());
    }
}

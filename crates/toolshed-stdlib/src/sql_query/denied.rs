//! The functions a statement may not call, found over its tokens as its own database
//! reads them.
//!
//! The statement is tokenized by `sqlparser`'s tokenizer with the database's dialect
//! (PostgreSQL, MySQL, SQLite), so strings, quoted identifiers and comments end where
//! that database ends them: on PostgreSQL `#` is an operator (XOR), `'\'` a whole
//! string and comments nest; on MySQL `#` starts a comment, `\` escapes in a string,
//! `--` is a comment only before a space and `/*! … */` is code. What is left is
//! matched against a denylist of names: every identifier, quoted or not, and on MySQL
//! a double-quoted string called like a function (`"get_lock"(…)` is one under
//! `ANSI_QUOTES`). A statement the tokenizer cannot read is refused, never guessed at.
//!
//! Each connection is set up so that the database reads strings as the tokenizer
//! does (`standard_conforming_strings` on PostgreSQL; no `NO_BACKSLASH_ESCAPES` or
//! `ANSI_QUOTES` in MySQL's `sql_mode`). The denylist is a second line behind the
//! read-only transaction and the database role, not a replacement for them.

use sqlparser::dialect::{Dialect as SqlDialect, MySqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use super::Fail;

/// Which database reads the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Postgres,
    Mysql,
    Sqlite,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mysql => "MySQL",
            Dialect::Sqlite => "SQLite",
        }
    }

    /// Names denied outright, lowercase.
    fn denied(self) -> &'static [&'static str] {
        match self {
            Dialect::Postgres => PG_DENIED,
            Dialect::Mysql => MYSQL_DENIED,
            Dialect::Sqlite => SQLITE_DENIED,
        }
    }

    /// Prefixes of denied names, lowercase.
    fn denied_prefixes(self) -> &'static [&'static str] {
        match self {
            Dialect::Postgres => PG_DENIED_PREFIXES,
            Dialect::Mysql | Dialect::Sqlite => &[],
        }
    }
}

/// Functions whose effects a read-only transaction does not stop or undo: server
/// files (`lo_import`, `lo_export`, `pg_read_file`), locks that outlive a rollback,
/// other sessions (`pg_terminate_backend`), the server's configuration,
/// notifications; and functions that run SQL given to them as text, which no
/// denylist can read (`query_to_xml`, `ts_stat`, `ts_rewrite`).
pub(super) const PG_DENIED: &[&str] = &[
    "lo_import",
    "lo_export",
    "lo_create",
    "lo_creat",
    "lo_unlink",
    "lo_from_bytea",
    "lo_put",
    "lo_truncate",
    "pg_stat_file",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_switch_wal",
    "pg_create_restore_point",
    "pg_promote",
    "pg_notify",
    "dblink",
    "dblink_exec",
    "dblink_connect",
    "query_to_xml",
    "query_to_xmlschema",
    "query_to_xml_and_xmlschema",
    "ts_stat",
    "ts_rewrite",
];
/// Families of such functions on PostgreSQL: advisory locks, the server's folders
/// (`pg_ls_dir`, `pg_ls_logdir`, …), its files (`pg_read_file`,
/// `pg_read_binary_file`, adminpack's `pg_file_write`, …).
pub(super) const PG_DENIED_PREFIXES: &[&str] = &[
    "pg_advisory",
    "pg_try_advisory",
    "pg_ls_",
    "pg_read_",
    "pg_file_",
];
/// The same for MySQL and MariaDB.
pub(super) const MYSQL_DENIED: &[&str] = &["get_lock", "load_file", "sys_exec", "sys_eval"];
/// The same for SQLite (its authorizer refuses it too).
pub(super) const SQLITE_DENIED: &[&str] = &["load_extension"];

/// Refuse a statement that names a denied function, or that the tokenizer cannot
/// read.
pub(super) fn check(sql: &str, dialect: Dialect) -> Result<(), Fail> {
    match denied_function(sql, dialect)? {
        Some(name) => Err(Fail::denied_function(&name)),
        None => Ok(()),
    }
}

/// The first denied function the statement names, outside its strings and comments.
pub(super) fn denied_function(sql: &str, dialect: Dialect) -> Result<Option<String>, Fail> {
    let tokens = tokenize(sql, dialect)?;
    let code = |i: usize| {
        tokens[i..]
            .iter()
            .find(|t| !matches!(t, Token::Whitespace(_)))
    };
    for (i, token) in tokens.iter().enumerate() {
        let name = match token {
            Token::Word(w) => w.value.to_lowercase(),
            // `"get_lock"(…)`: a call under MySQL's ANSI_QUOTES.
            Token::DoubleQuotedString(s) if matches!(code(i + 1), Some(Token::LParen)) => {
                s.to_lowercase()
            }
            // MariaDB runs the text of `/*M! … */` (and `/*M!100100 … */`).
            Token::Whitespace(Whitespace::MultiLineComment(c)) if dialect == Dialect::Mysql => {
                match c.strip_prefix("M!").or_else(|| c.strip_prefix("m!")) {
                    Some(body) => {
                        let body = body.trim_start_matches(|c: char| c.is_ascii_digit());
                        match denied_function(body, dialect)? {
                            Some(name) => return Ok(Some(name)),
                            None => continue,
                        }
                    }
                    None => continue,
                }
            }
            // Data after `COPY … FROM STDIN;` is read as code too: better refused than
            // hidden.
            Token::CopyData { data, .. } => match denied_function(data, dialect)? {
                Some(name) => return Ok(Some(name)),
                None => continue,
            },
            _ => continue,
        };
        if is_denied(&name, dialect) {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// Whether `name` (lowercase) is denied: one of the names, or a name of a family (the
/// built-in functions a prefix covers are plain identifiers).
fn is_denied(name: &str, dialect: Dialect) -> bool {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$');
    dialect.denied().contains(&name)
        || (plain
            && dialect
                .denied_prefixes()
                .iter()
                .any(|p| name.starts_with(p)))
}

fn tokenize(sql: &str, dialect: Dialect) -> Result<Vec<Token>, Fail> {
    let d: &dyn SqlDialect = match dialect {
        Dialect::Postgres => &PostgreSqlDialect {},
        Dialect::Mysql => &MySqlDialect {},
        Dialect::Sqlite => &SQLiteDialect {},
    };
    let tokens = Tokenizer::new(d, sql).tokenize().map_err(|e| {
        Fail::new(
            "unreadable_query",
            format!(
                "sql_query could not read the statement as {} SQL ({e}), so it was refused \
                 without running: check its quotes, comments and dollar-quoted strings",
                dialect.name()
            ),
        )
    })?;
    if dialect == Dialect::Postgres {
        unicode_identifier(&tokens)?;
    }
    Ok(tokens)
}

/// PostgreSQL reads `U&"\0070g_ls_dir"` as the identifier `pg_ls_dir`; the tokenizer
/// reads a word `U`, `&` and a quoted identifier. Such names are refused rather than
/// decoded.
fn unicode_identifier(tokens: &[Token]) -> Result<(), Fail> {
    for w in tokens.windows(3) {
        if let [Token::Word(u), Token::Ampersand, Token::Word(q)] = w
            && u.quote_style.is_none()
            && u.value.eq_ignore_ascii_case("u")
            && q.quote_style == Some('"')
        {
            return Err(Fail::new(
                "unreadable_query",
                "sql_query does not accept Unicode-escaped identifiers (`U&\"…\"`), so the \
                 statement was refused without running: write the name plainly",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each statement as `dialect` reads it: `Some(name)` for the denied function it
    /// must be refused for, `None` for a look-alike that must pass.
    fn check_all(dialect: Dialect, cases: &[(&str, Option<&str>)]) {
        for (sql, want) in cases {
            let got = denied_function(sql, dialect)
                .unwrap_or_else(|f| panic!("{dialect:?} `{sql}`: {}", f.message));
            assert_eq!(got.as_deref(), *want, "{dialect:?} `{sql}`");
        }
    }

    #[test]
    fn postgres_reads_hash_backslash_dollars_and_nested_comments_as_postgres_does() {
        check_all(
            Dialect::Postgres,
            &[
                // The two statements of the report: `#` is XOR, `'\'` a whole string.
                ("SELECT 1 # 1 AS x, pg_ls_dir('.') AS y", Some("pg_ls_dir")),
                ("SELECT '\\' AS a, pg_notify('c', 'x')", Some("pg_notify")),
                ("SELECT 1 # 1 AS x", None),
                ("SELECT '\\' AS a", None),
                // Dollar quoting ends at its own tag.
                ("SELECT $$x$$ AS a, pg_ls_dir('.')", Some("pg_ls_dir")),
                ("SELECT $t$ $$ $t$ AS a, pg_ls_dir('.')", Some("pg_ls_dir")),
                ("SELECT $$pg_ls_dir('.')$$ AS a", None),
                ("SELECT $t$ $$ pg_notify('c', 'x') $$ $t$ AS a", None),
                ("SELECT $1::text", None),
                // Comments nest.
                ("SELECT /* /* */ pg_ls_dir('.') */ 1", None),
                ("SELECT /* /* */ */ pg_ls_dir('.')", Some("pg_ls_dir")),
                ("SELECT 1 -- pg_ls_dir('.')\n", None),
                ("SELECT 1 -- x\n, pg_ls_dir('.')", Some("pg_ls_dir")),
                // In E'' a backslash escapes.
                ("SELECT E'\\'' AS a, pg_ls_dir('.')", Some("pg_ls_dir")),
                ("SELECT E'it\\'s pg_ls_dir' AS a", None),
                (
                    "SELECT e'\\\\' AS a, pg_notify('c', 'x')",
                    Some("pg_notify"),
                ),
                // Quoted identifiers are identifiers; qualified names too.
                ("SELECT \"pg_ls_dir\"('.')", Some("pg_ls_dir")),
                (
                    "SELECT pg_catalog.\"pg_notify\"('c', 'x')",
                    Some("pg_notify"),
                ),
                ("SELECT PG_CATALOG.PG_LS_DIR('.')", Some("pg_ls_dir")),
                ("SELECT 1 AS \"a\"\"b\", pg_ls_dir('.')", Some("pg_ls_dir")),
                ("SELECT 1 AS \"pg_ls_dir is denied\"", None),
                ("SELECT 'pg_ls_dir' AS x", None),
                // Families, and functions that run SQL given as text.
                ("SELECT pg_ls_logdir()", Some("pg_ls_logdir")),
                (
                    "SELECT pg_read_binary_file('x')",
                    Some("pg_read_binary_file"),
                ),
                (
                    "SELECT pg_try_advisory_xact_lock(1)",
                    Some("pg_try_advisory_xact_lock"),
                ),
                (
                    "SELECT query_to_xml('SELECT pg_ls_dir(''.'')', true, false, '')",
                    Some("query_to_xml"),
                ),
                ("SELECT lo_imports FROM t", None),
            ],
        );
    }

    #[test]
    fn mysql_reads_hash_backslash_and_executable_comments_as_mysql_does() {
        check_all(
            Dialect::Mysql,
            &[
                // `#` starts a comment, `\` escapes in a string.
                ("SELECT 1 # get_lock('a', 0)", None),
                ("SELECT 1 # x\n, get_lock('a', 0)", Some("get_lock")),
                ("SELECT '\\'' AS a, get_lock('a', 0)", Some("get_lock")),
                ("SELECT 'it\\'s get_lock(1)' AS a", None),
                // `--` is a comment only before a space.
                ("SELECT 1 -- get_lock('a', 0)", None),
                ("SELECT 1 --get_lock('a', 0)", Some("get_lock")),
                // Comments do not nest, and `/*! … */`, `/*M! … */` are code.
                ("SELECT /* get_lock('a', 0) */ 1", None),
                ("SELECT /* /* */ get_lock('a', 0) */ 1", Some("get_lock")),
                ("SELECT /*!50000 get_lock('a', 0) */ 1", Some("get_lock")),
                ("SELECT /*! LOAD_FILE('/etc/passwd') */", Some("load_file")),
                ("SELECT /*M!100100 get_lock('a', 0) */ 1", Some("get_lock")),
                // Backticks quote identifiers; `"…"` is a string, or under ANSI_QUOTES
                // an identifier, so one called like a function is refused.
                ("SELECT `get_lock`('a', 0)", Some("get_lock")),
                ("SELECT \"get_lock\"('a', 0)", Some("get_lock")),
                ("SELECT \"get_lock\" AS a", None),
                ("SELECT 'get_lock' AS a", None),
                ("SELECT $$ get_lock('a', 0) $$", Some("get_lock")),
            ],
        );
    }

    #[test]
    fn sqlite_reads_backslashes_and_brackets_as_sqlite_does() {
        check_all(
            Dialect::Sqlite,
            &[
                (
                    "SELECT '\\' AS a, load_extension('x')",
                    Some("load_extension"),
                ),
                ("SELECT '\\' AS a", None),
                ("SELECT \"load_extension\"('x')", Some("load_extension")),
                ("SELECT [load_extension]('x')", Some("load_extension")),
                ("SELECT `load_extension`('x')", Some("load_extension")),
                ("SELECT 'load_extension' AS a", None),
                ("SELECT 1 -- load_extension('x')", None),
                ("SELECT /* load_extension('x') */ 1", None),
                ("SELECT 1 # 1", None),
            ],
        );
    }

    #[test]
    fn a_statement_the_tokenizer_cannot_read_is_refused() {
        for (sql, dialect) in [
            ("SELECT 'unterminated", Dialect::Postgres),
            ("SELECT $$ unterminated", Dialect::Postgres),
            ("SELECT /* /* */ unterminated", Dialect::Postgres),
            ("SELECT E'\\", Dialect::Postgres),
            ("SELECT U&\"\\0070g_ls_dir\"('.')", Dialect::Postgres),
            ("SELECT u&\"pg_ls_dir\"('.')", Dialect::Postgres),
            ("SELECT '\\'", Dialect::Mysql),
            ("SELECT `x", Dialect::Mysql),
            ("SELECT \"x", Dialect::Sqlite),
        ] {
            let f = denied_function(sql, dialect).unwrap_err();
            assert_eq!(f.kind, "unreadable_query", "{sql}");
            assert!(
                f.message.contains("refused without running"),
                "{sql}: {}",
                f.message
            );
        }
    }
}

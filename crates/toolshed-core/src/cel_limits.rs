//! The cost limits of CEL approval predicates. The `cel` crate (0.15) has no cost or
//! budget API, and a predicate is written by whoever registers a tool, so it is
//! bounded twice:
//!
//! - **when it is compiled** (at registration): its text, its node count (after macro
//!   expansion), its nesting depth, and how deeply comprehensions (`all`, `exists`,
//!   `exists_one`, `map`, `filter`) nest; and a comprehension may only iterate over a
//!   list or map *given* to it (a path such as `args.items` or an enclosing loop's
//!   `o.lines`, or a list literal), never over one it builds, so the size of every
//!   loop is bounded by the arguments;
//! - **before it is evaluated**, against the call's arguments: the largest list or map
//!   in them bounds each loop, so `nodes × (largest + 1) ^ nesting` bounds the steps,
//!   and a predicate past [`MAX_COST`] is refused without running. One that
//!   concatenates (`+`) inside a loop is also bounded by the bytes it could build.

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, operators};
use serde_json::Value;

/// The longest predicate text, in bytes.
pub const MAX_SOURCE_BYTES: usize = 2048;
/// The most expression nodes, after macro expansion (`x.all(…)` is about ten).
pub const MAX_NODES: usize = 256;
/// The deepest nesting of expressions.
pub const MAX_DEPTH: usize = 32;
/// The deepest nesting of brackets (`(`, `[`, `{`) in the text.
pub const MAX_BRACKETS: usize = 12;
/// The most `!` or `-` operators in a row.
pub const MAX_PREFIX_RUN: usize = 4;
/// The deepest nesting of comprehensions (`args.a.all(x, x.b.exists(y, …))` is 2).
pub const MAX_LOOP_NESTING: usize = 2;
/// The most evaluation steps a predicate may be estimated to take over one call's
/// arguments.
pub const MAX_COST: u128 = 1_000_000;
/// The most bytes a predicate that concatenates inside a loop may be estimated to
/// build over one call's arguments.
pub const MAX_BUILT_BYTES: u128 = 16 * 1024 * 1024;

/// What compiling found out about a predicate's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Expression nodes.
    pub nodes: usize,
    /// How deeply comprehensions nest (0: none).
    pub loop_nesting: usize,
    /// Concatenations (`+`) inside a loop's body, besides the macros' own.
    pub concat_in_loops: usize,
    /// The longest list literal a loop may iterate over.
    pub literal_len: usize,
}

/// Check the text before parsing it. The parser recurses once per bracket and per
/// prefix operator, and a few dozen levels overflow a thread's stack (an abort of the
/// whole server, not an error), so nesting is bounded here, on the characters,
/// before the parser sees it.
pub(crate) fn check_source(source: &str) -> Result<(), String> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "is {} bytes; an approval predicate may be at most {MAX_SOURCE_BYTES}",
            source.len()
        ));
    }
    let mut depth = 0usize;
    let mut prefix_run = 0usize;
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // Skip the string literal (escapes included); an unterminated one is
                // the parser's error to report.
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == c {
                        break;
                    }
                }
                prefix_run = 0;
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_BRACKETS {
                    return Err(format!(
                        "nests brackets more than {MAX_BRACKETS} deep: simplify it"
                    ));
                }
                prefix_run = 0;
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                prefix_run = 0;
            }
            '!' | '-' => {
                prefix_run += 1;
                if prefix_run > MAX_PREFIX_RUN {
                    return Err(format!(
                        "chains more than {MAX_PREFIX_RUN} `!` or `-` operators in a row: \
                         simplify it"
                    ));
                }
            }
            c if c.is_whitespace() => {}
            _ => prefix_run = 0,
        }
    }
    Ok(())
}

/// The stack of the thread a predicate is parsed on. The `cel` parser recurses once
/// per operator (a chain of a hundred `||` overflows a 2 MiB stack in a debug build,
/// which aborts the process); [`MAX_SOURCE_BYTES`] bounds the recursion, and this
/// stack holds it. Only the pages touched are used.
const PARSE_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Check, parse and measure a predicate, on a thread of its own with a stack deep
/// enough for any text within [`MAX_SOURCE_BYTES`]. A refused program is dropped
/// there too (dropping a deep tree recurses as well).
pub(crate) fn parse(source: &str) -> Result<(cel::Program, Shape), String> {
    check_source(source)?;
    let text = source.to_owned();
    std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(move || {
            let program = cel::Program::compile(&text)
                .map_err(|e| format!("is not a valid CEL expression: {e}"))?;
            let shape = shape(program.expression())?;
            Ok((program, shape))
        })
        .map_err(|e| format!("cannot be compiled now (no thread for the parser: {e}); retry"))?
        .join()
        .unwrap_or_else(|_| Err("made the CEL parser fail; simplify it".into()))
}

/// Measure a parsed predicate and check it against the compile-time limits.
pub(crate) fn shape(expr: &IdedExpr) -> Result<Shape, String> {
    let mut walk = Walk {
        shape: Shape::default(),
        loop_vars: Vec::new(),
    };
    walk.visit(expr, 1, 0)?;
    Ok(walk.shape)
}

/// Estimate a predicate's cost over `args` and refuse it past the limits.
pub(crate) fn check_cost(shape: &Shape, args: &Value) -> Result<(), String> {
    if shape.loop_nesting == 0 {
        return Ok(());
    }
    let sizes = largest(args, 0);
    let per_loop = sizes.collection.max(shape.literal_len) as u128 + 1;
    let iterations = per_loop.saturating_pow(shape.loop_nesting as u32);
    let cost = iterations.saturating_mul(shape.nodes as u128);
    if cost > MAX_COST {
        return Err(format!(
            "would take up to {cost} steps over these arguments (a list or map of {} \
             items, loops nested {} deep; the limit is {MAX_COST}): loop over smaller \
             lists, or nest fewer loops",
            sizes.collection, shape.loop_nesting
        ));
    }
    if shape.concat_in_loops > 0 {
        let built = iterations
            .saturating_mul(shape.concat_in_loops as u128 + 1)
            .saturating_mul(sizes.string as u128 + sizes.collection as u128);
        if built > MAX_BUILT_BYTES {
            return Err(format!(
                "could build up to {built} bytes over these arguments by concatenating \
                 inside a loop (the limit is {MAX_BUILT_BYTES}): compare or test values \
                 in the loop instead of joining them"
            ));
        }
    }
    Ok(())
}

struct Walk {
    shape: Shape,
    /// The iteration and accumulator variables of the loops around the current node.
    loop_vars: Vec<String>,
}

impl Walk {
    fn visit(&mut self, e: &IdedExpr, depth: usize, loops: usize) -> Result<(), String> {
        self.shape.nodes += 1;
        if self.shape.nodes > MAX_NODES {
            return Err(format!(
                "has more than {MAX_NODES} expression nodes (after expanding macros): \
                 simplify it"
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!(
                "nests more than {MAX_DEPTH} expressions deep: simplify it"
            ));
        }
        match &e.expr {
            Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
            Expr::Select(s) => self.visit(&s.operand, depth + 1, loops)?,
            Expr::List(l) => {
                for el in &l.elements {
                    self.visit(el, depth + 1, loops)?;
                }
            }
            Expr::Map(m) => self.entries(&m.entries, depth, loops)?,
            Expr::Struct(s) => self.entries(&s.entries, depth, loops)?,
            Expr::Call(c) => {
                if loops > 0 && c.func_name == operators::ADD && !self.appends_to_accu(c) {
                    self.shape.concat_in_loops += 1;
                }
                if let Some(t) = &c.target {
                    self.visit(t, depth + 1, loops)?;
                }
                for a in &c.args {
                    self.visit(a, depth + 1, loops)?;
                }
            }
            Expr::Comprehension(c) => self.comprehension(c, depth, loops)?,
        }
        Ok(())
    }

    fn entries(
        &mut self,
        entries: &[cel::common::ast::IdedEntryExpr],
        depth: usize,
        loops: usize,
    ) -> Result<(), String> {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => self.visit(&f.value, depth + 1, loops)?,
                EntryExpr::MapEntry(m) => {
                    self.visit(&m.key, depth + 1, loops)?;
                    self.visit(&m.value, depth + 1, loops)?;
                }
            }
        }
        Ok(())
    }

    fn comprehension(
        &mut self,
        c: &ComprehensionExpr,
        depth: usize,
        loops: usize,
    ) -> Result<(), String> {
        let inner = loops + 1;
        if inner > MAX_LOOP_NESTING {
            return Err(format!(
                "nests comprehensions (all, exists, exists_one, map, filter) more than \
                 {MAX_LOOP_NESTING} deep: each level multiplies the work by the size of \
                 a list; flatten the condition"
            ));
        }
        self.shape.loop_nesting = self.shape.loop_nesting.max(inner);
        match &c.iter_range.expr {
            Expr::List(l) => self.shape.literal_len = self.shape.literal_len.max(l.elements.len()),
            range if is_path(range) => {}
            _ => {
                return Err(
                    "loops over a list or map it builds itself: a comprehension may only \
                     iterate over a path into its input (e.g. `args.items`, or `o.lines` \
                     of an enclosing loop) or a list literal"
                        .into(),
                );
            }
        }
        self.visit(&c.iter_range, depth + 1, loops)?;
        self.visit(&c.accu_init, depth + 1, loops)?;
        self.loop_vars.push(c.accu_var.clone());
        self.loop_vars.push(c.iter_var.clone());
        if let Some(v) = &c.iter_var2 {
            self.loop_vars.push(v.clone());
        }
        let body = [&c.loop_cond, &c.loop_step]
            .into_iter()
            .try_for_each(|e| self.visit(e, depth + 1, inner));
        self.loop_vars
            .truncate(self.loop_vars.len() - 2 - usize::from(c.iter_var2.is_some()));
        body?;
        self.visit(&c.result, depth + 1, loops)
    }

    /// `@result + [x]`: how `map` and `filter` append; linear, not a concatenation of
    /// the input's values.
    fn appends_to_accu(&self, c: &cel::common::ast::CallExpr) -> bool {
        matches!(
            c.args.first().map(|a| &a.expr),
            Some(Expr::Ident(name)) if self.loop_vars.contains(name)
        ) && matches!(c.args.get(1).map(|a| &a.expr), Some(Expr::List(_)))
    }
}

/// A variable, or fields selected from one: data given to the predicate.
fn is_path(e: &Expr) -> bool {
    match e {
        Expr::Ident(_) => true,
        Expr::Select(s) if !s.test => is_path(&s.operand.expr),
        _ => false,
    }
}

/// The largest list or map, and the longest string, anywhere in a value.
#[derive(Default)]
struct Sizes {
    collection: usize,
    string: usize,
}

fn largest(v: &Value, depth: usize) -> Sizes {
    let mut out = Sizes::default();
    // Arguments were parsed from a bounded body; the depth bound keeps this walk's
    // stack small all the same.
    if depth > 128 {
        return out;
    }
    let mut take = |s: Sizes| {
        out.collection = out.collection.max(s.collection);
        out.string = out.string.max(s.string);
    };
    match v {
        Value::String(s) => take(Sizes {
            collection: 0,
            string: s.len(),
        }),
        Value::Array(a) => {
            take(Sizes {
                collection: a.len(),
                string: 0,
            });
            for x in a {
                take(largest(x, depth + 1));
            }
        }
        Value::Object(m) => {
            let keys = m.keys().map(String::len).max().unwrap_or(0);
            take(Sizes {
                collection: m.len(),
                string: keys,
            });
            for x in m.values() {
                take(largest(x, depth + 1));
            }
        }
        _ => {}
    }
    out
}

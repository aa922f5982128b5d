//! The cost limits of CEL approval predicates. The `cel` crate (0.15) has no cost or
//! size budget and no hook into its evaluator, and a predicate is written by whoever
//! registers a tool, so it is bounded twice:
//!
//! - **when it is compiled** (at registration): its text, its node count (after macro
//!   expansion), its nesting depth, how deeply comprehensions (`all`, `exists`,
//!   `exists_one`, `map`, `filter`) nest, and what it may call. A comprehension may
//!   only iterate over a list or map *given* to it (a path such as `args.items` or an
//!   enclosing loop's `o.lines`, or a list literal), never over one it builds, and a
//!   predicate may only call functions whose result size follows from their
//!   arguments' ([`FUNCTIONS`]), so every value it can build has a size bound;
//! - **before it is evaluated**, against the call's arguments (`check_budget`): one
//!   walk of the expression computes, from the sizes of the arguments it reads, an
//!   upper bound on every value each node can produce (a concatenation is at most the
//!   sum of its operands, a list literal the sum of its elements, a loop runs at most
//!   once per item of the list it iterates), and from those the steps the evaluation
//!   can take, the bytes it can build (every string, bytes, list and map it makes,
//!   and the copies it takes of the items it iterates) and the bytes it can read. A
//!   predicate past any of [`MAX_COST`], [`MAX_BUILT_BYTES`] (plus twice the
//!   arguments' size) or [`MAX_READ_BYTES`] is refused before it runs, so no value
//!   past the budget is ever built.
//!
//! The bounds are upper bounds over every path through the expression (both branches
//! of a `?:`, every item of a loop), so a predicate is refused when it *could* pass the
//! budget, and the gate then fails closed.

use std::collections::HashMap;

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
/// The most evaluation steps (nodes evaluated) a predicate may take over one call's
/// arguments.
pub const MAX_COST: u128 = 1_000_000;
/// The most bytes a predicate may build over one call's arguments (strings, bytes,
/// lists and maps it makes, and the copies of the items it iterates), besides twice
/// the arguments' own size (so a loop over a large argument stays affordable).
pub const MAX_BUILT_BYTES: u128 = 16 * 1024 * 1024;
/// The most bytes a predicate may read over one call's arguments (compared,
/// searched, measured or converted), which bounds its time.
pub const MAX_READ_BYTES: u128 = 256 * 1024 * 1024;
/// The functions a predicate may call: those of the standard library `cel` offers
/// here (its default features are off: no `matches`, `timestamp` or `duration`).
/// Each one's result is no larger than its arguments, or than a number's text.
pub const FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "dyn",
    "type",
    "optional.of",
    "optional.ofNonZeroValue",
    "optional.none",
    "value",
    "hasValue",
    "or",
    "orValue",
];

/// What one list item or map entry is counted as, besides its contents.
const ENTRY_BYTES: u128 = 32;
/// What a number, boolean or null is counted as.
const SCALAR_BYTES: u128 = 8;
/// The longest text `string()` makes of a number (a double such as `1e308` is
/// written out in full).
const NUMBER_TEXT_BYTES: u128 = 512;

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

/// Check, parse and check the shape of a predicate, on a thread of its own with a
/// stack deep enough for any text within [`MAX_SOURCE_BYTES`]. A refused program is
/// dropped there too (dropping a deep tree recurses as well).
pub(crate) fn parse(source: &str) -> Result<cel::Program, String> {
    check_source(source)?;
    let text = source.to_owned();
    std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(move || {
            let program = cel::Program::compile(&text)
                .map_err(|e| format!("is not a valid CEL expression: {e}"))?;
            check_shape(program.expression())?;
            Ok(program)
        })
        .map_err(|e| format!("cannot be compiled now (no thread for the parser: {e}); retry"))?
        .join()
        .unwrap_or_else(|_| Err("made the CEL parser fail; simplify it".into()))
}

/// Check a parsed predicate against the compile-time limits.
pub(crate) fn check_shape(expr: &IdedExpr) -> Result<(), String> {
    Shape { nodes: 0 }.visit(expr, 1, 0)
}

/// Check a predicate's cost over `args` before it runs: the steps it can take, the
/// bytes it can build and the bytes it can read (see the module's documentation).
pub(crate) fn check_budget(expr: &IdedExpr, args: &Value) -> Result<(), String> {
    let mut budget = Budget {
        args,
        scopes: Vec::new(),
        measured: HashMap::new(),
        items: HashMap::new(),
        cost: Cost::default(),
    };
    budget.walk(expr, 1)?;
    let Cost { steps, built, read } = budget.cost;
    if steps > MAX_COST {
        return Err(format!(
            "would take up to {steps} steps over these arguments (the limit is \
             {MAX_COST}): loop over smaller lists, or nest fewer loops"
        ));
    }
    let args_bytes = budget.measure(args).bytes;
    let built_limit = MAX_BUILT_BYTES.saturating_add(args_bytes.saturating_mul(2));
    if built > built_limit {
        return Err(format!(
            "could build up to {built} bytes over these arguments (the limit is \
             {built_limit}: {MAX_BUILT_BYTES} plus twice the arguments' {args_bytes}): \
             compare or test values instead of joining, converting or copying them"
        ));
    }
    if read > MAX_READ_BYTES {
        return Err(format!(
            "could read up to {read} bytes over these arguments (the limit is \
             {MAX_READ_BYTES}): compare fewer or smaller values, or loop over smaller \
             lists"
        ));
    }
    Ok(())
}

/// The compile-time walk.
struct Shape {
    nodes: usize,
}

impl Shape {
    fn visit(&mut self, e: &IdedExpr, depth: usize, loops: usize) -> Result<(), String> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
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
            Expr::Unspecified => return Err("has an empty expression".into()),
            Expr::Ident(_) | Expr::Literal(_) => {}
            Expr::Select(s) => self.visit(&s.operand, depth + 1, loops)?,
            Expr::List(l) => {
                for el in &l.elements {
                    self.visit(el, depth + 1, loops)?;
                }
            }
            Expr::Map(m) => self.entries(&m.entries, depth, loops)?,
            Expr::Struct(s) => self.entries(&s.entries, depth, loops)?,
            Expr::Call(c) => {
                let (name, target) = callee(c);
                if !is_operator(name) && !FUNCTIONS.contains(&name) {
                    return Err(format!(
                        "calls `{name}`, which approval predicates do not offer; use \
                         operators and {}",
                        FUNCTIONS.join(", ")
                    ));
                }
                if let Some(t) = target {
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
        if !matches!(c.iter_range.expr, Expr::List(_)) && !is_path(&c.iter_range.expr) {
            return Err(
                "loops over a list or map it builds itself: a comprehension may only \
                 iterate over a path into its input (e.g. `args.items`, or `o.lines` of \
                 an enclosing loop) or a list literal"
                    .into(),
            );
        }
        self.visit(&c.iter_range, depth + 1, loops)?;
        self.visit(&c.accu_init, depth + 1, loops)?;
        self.visit(&c.loop_cond, depth + 1, inner)?;
        self.visit(&c.loop_step, depth + 1, inner)?;
        self.visit(&c.result, depth + 1, loops)
    }
}

/// The function a call names, and the target it is called on: `optional.of(x)` is
/// the function `optional.of` with no target, `x.size()` is `size` on `x`.
fn callee(c: &cel::common::ast::CallExpr) -> (&str, Option<&IdedExpr>) {
    match c.target.as_deref() {
        Some(IdedExpr {
            expr: Expr::Ident(ns),
            ..
        }) if ns == "optional"
            && matches!(c.func_name.as_str(), "of" | "ofNonZeroValue" | "none") =>
        {
            let name = match c.func_name.as_str() {
                "of" => "optional.of",
                "ofNonZeroValue" => "optional.ofNonZeroValue",
                _ => "optional.none",
            };
            (name, None)
        }
        target => (c.func_name.as_str(), target),
    }
}

fn is_operator(name: &str) -> bool {
    use operators::*;
    [
        CONDITIONAL,
        LOGICAL_AND,
        LOGICAL_OR,
        LOGICAL_NOT,
        NOT_STRICTLY_FALSE,
        EQUALS,
        NOT_EQUALS,
        LESS,
        LESS_EQUALS,
        GREATER,
        GREATER_EQUALS,
        IN,
        ADD,
        SUBSTRACT,
        MULTIPLY,
        DIVIDE,
        MODULO,
        NEGATE,
        INDEX,
        OPT_INDEX,
        OPT_SELECT,
    ]
    .contains(&name)
}

/// A variable, or fields selected from one: data given to the predicate.
fn is_path(e: &Expr) -> bool {
    match e {
        Expr::Ident(_) => true,
        Expr::Select(s) if !s.test => is_path(&s.operand.expr),
        _ => false,
    }
}

/// An upper bound on a value's size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    /// Its bytes: a string's or bytes' length, a list's or map's items (each counted
    /// [`ENTRY_BYTES`] besides its contents), [`SCALAR_BYTES`] for anything else.
    bytes: u128,
    /// Its items, if it is a list or map (what a loop over it iterates).
    len: u128,
    /// The most items of any list or map in it, itself included.
    deep: u128,
    /// Whether it may be a string, bytes, list or map (else a number, boolean, null,
    /// type or optional of those, which `+` adds as numbers).
    sized: bool,
}

impl Size {
    const SCALAR: Size = Size {
        bytes: SCALAR_BYTES,
        len: 0,
        deep: 0,
        sized: false,
    };

    fn text(bytes: usize) -> Size {
        Size {
            bytes: bytes as u128,
            len: 0,
            deep: 0,
            sized: true,
        }
    }

    /// The larger of two bounds, in every respect.
    fn join(self, o: Size) -> Size {
        Size {
            bytes: self.bytes.max(o.bytes),
            len: self.len.max(o.len),
            deep: self.deep.max(o.deep),
            sized: self.sized || o.sized,
        }
    }

    /// A bound on any part of this value (an item, a field, a key).
    fn part(self) -> Size {
        Size {
            bytes: self.bytes,
            len: self.deep,
            deep: self.deep,
            sized: self.sized,
        }
    }

    /// A list or map of items bounded by `items` (their bytes summed, each entry
    /// counted [`ENTRY_BYTES`] more).
    fn collection(count: u128, bytes: u128, deep: u128) -> Size {
        Size {
            bytes: bytes.saturating_add(count.saturating_mul(ENTRY_BYTES)),
            len: count,
            deep: deep.max(count),
            sized: true,
        }
    }
}

/// What a node of the expression may evaluate to: a known part of the arguments, or
/// a bound.
#[derive(Debug, Clone, Copy)]
enum Bound<'a> {
    Json(&'a Value),
    Size(Size),
}

/// What an evaluation can cost, summed over every evaluation of every node.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    steps: u128,
    built: u128,
    read: u128,
}

/// The call-time walk: an abstract evaluation over sizes.
struct Budget<'a> {
    args: &'a Value,
    /// The variables of the loops around the current node, innermost last.
    scopes: Vec<(&'a str, Size)>,
    /// Sizes of parts of the arguments, by address.
    measured: HashMap<usize, Size>,
    /// Bounds on the items of lists and maps in the arguments, by address.
    items: HashMap<usize, Size>,
    cost: Cost,
}

impl<'a> Budget<'a> {
    /// Walk `e`, evaluated `times` times, and bound its value.
    fn walk(&mut self, e: &'a IdedExpr, times: u128) -> Result<Bound<'a>, String> {
        self.cost.steps = self.cost.steps.saturating_add(times);
        let bound = match &e.expr {
            Expr::Unspecified => Bound::Size(Size::default()),
            Expr::Literal(l) => Bound::Size(match l {
                cel::common::ast::LiteralValue::String(s) => Size::text(s.inner().len()),
                cel::common::ast::LiteralValue::Bytes(b) => Size::text(b.inner().len()),
                _ => Size::SCALAR,
            }),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => {
                let operand = self.walk(&s.operand, times)?;
                if s.test {
                    return Ok(Bound::Size(Size::SCALAR));
                }
                let field = self.field(operand, &s.field);
                if !is_path(&s.operand.expr) {
                    // A field of a value the predicate built is copied out of it.
                    let size = self.size(field);
                    self.build(times, size.bytes);
                }
                field
            }
            Expr::List(l) => {
                let (mut bytes, mut deep) = (0u128, 0u128);
                for el in &l.elements {
                    let item = self.walk(el, times)?;
                    let item = self.size(item);
                    bytes = bytes.saturating_add(item.bytes);
                    deep = deep.max(item.deep);
                }
                let total = Size::collection(l.elements.len() as u128, bytes, deep);
                self.build(times, total.bytes);
                Bound::Size(total)
            }
            Expr::Map(m) => self.entries(&m.entries, times)?,
            Expr::Struct(s) => self.entries(&s.entries, times)?,
            Expr::Call(c) => self.call(c, times)?,
            Expr::Comprehension(c) => self.comprehension(c, times)?,
        };
        Ok(bound)
    }

    fn ident(&mut self, name: &str) -> Bound<'a> {
        if let Some((_, size)) = self.scopes.iter().rev().find(|(n, _)| *n == name) {
            return Bound::Size(*size);
        }
        match name {
            "args" => Bound::Json(self.args),
            // Anything else is undeclared, and its evaluation an error.
            _ => Bound::Size(Size::default()),
        }
    }

    fn field(&mut self, operand: Bound<'a>, field: &str) -> Bound<'a> {
        match operand {
            Bound::Json(Value::Object(m)) => m
                .get(field)
                .map_or(Bound::Size(Size::default()), Bound::Json),
            // A field of anything else is an error.
            Bound::Json(_) => Bound::Size(Size::default()),
            Bound::Size(s) => Bound::Size(s.part()),
        }
    }

    fn entries(
        &mut self,
        entries: &'a [cel::common::ast::IdedEntryExpr],
        times: u128,
    ) -> Result<Bound<'a>, String> {
        let (mut bytes, mut deep) = (0u128, 0u128);
        for entry in entries {
            let parts = match &entry.expr {
                EntryExpr::StructField(f) => vec![&f.value],
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            };
            for part in parts {
                let part = self.walk(part, times)?;
                let part = self.size(part);
                bytes = bytes.saturating_add(part.bytes);
                deep = deep.max(part.deep);
            }
        }
        let total = Size::collection(entries.len() as u128, bytes, deep);
        self.build(times, total.bytes);
        Ok(Bound::Size(total))
    }

    fn call(
        &mut self,
        c: &'a cel::common::ast::CallExpr,
        times: u128,
    ) -> Result<Bound<'a>, String> {
        use operators::*;
        let (name, target) = callee(c);
        let mut operands = Vec::with_capacity(c.args.len() + 1);
        if let Some(t) = target {
            operands.push(self.walk(t, times)?);
        }
        for a in &c.args {
            operands.push(self.walk(a, times)?);
        }
        let sizes: Vec<Size> = operands.iter().map(|o| self.size(*o)).collect();
        let read: u128 = sizes.iter().fold(0, |n, s| n.saturating_add(s.bytes));
        let first = sizes.first().copied().unwrap_or_default();
        let joined = sizes.iter().fold(Size::default(), |j, s| j.join(*s));
        let bound = match name {
            // Passes one of its operands through, as it is.
            CONDITIONAL => match operands[..] {
                [_, yes, no] => self.join(yes, no),
                _ => Bound::Size(joined),
            },
            LOGICAL_AND | LOGICAL_OR | LOGICAL_NOT | NOT_STRICTLY_FALSE | SUBSTRACT | MULTIPLY
            | DIVIDE | MODULO | NEGATE | "optional.none" => Bound::Size(Size::SCALAR),
            EQUALS | NOT_EQUALS | LESS | LESS_EQUALS | GREATER | GREATER_EQUALS | IN | "size"
            | "contains" | "startsWith" | "endsWith" | "int" | "uint" | "double" | "bool"
            | "type" | "hasValue" => {
                self.read(times, read);
                Bound::Size(Size::SCALAR)
            }
            ADD => {
                if !sizes.iter().any(|s| s.sized) {
                    Bound::Size(Size::SCALAR)
                } else {
                    let (len, bytes) = sizes.iter().fold((0u128, 0u128), |(l, b), s| {
                        (l.saturating_add(s.len), b.saturating_add(s.bytes))
                    });
                    let sum = Size {
                        bytes,
                        len,
                        deep: joined.deep.max(len),
                        sized: true,
                    };
                    self.read(times, read);
                    self.build(times, sum.bytes);
                    Bound::Size(sum)
                }
            }
            INDEX | OPT_INDEX => {
                let item = match operands.first() {
                    Some(container) => self.item(*container),
                    None => Size::default(),
                };
                if !c.args.first().is_some_and(|a| is_path(&a.expr)) || name == OPT_INDEX {
                    self.build(times, item.bytes);
                }
                Bound::Size(item)
            }
            OPT_SELECT => {
                let part = first.part();
                self.build(times, part.bytes);
                Bound::Size(part)
            }
            "string" | "bytes" => {
                let text = Size::text(0).join(Size {
                    bytes: first.bytes.max(NUMBER_TEXT_BYTES),
                    ..Size::default()
                });
                self.read(times, read);
                self.build(times, text.bytes);
                Bound::Size(text)
            }
            // Wrap or unwrap a value: a copy of it at most.
            "dyn" | "optional.of" | "optional.ofNonZeroValue" | "value" | "or" | "orValue" => {
                self.build(times, joined.bytes);
                Bound::Size(joined)
            }
            other => {
                return Err(format!(
                    "calls `{other}`, which approval predicates do not offer"
                ));
            }
        };
        Ok(bound)
    }

    fn comprehension(
        &mut self,
        c: &'a ComprehensionExpr,
        times: u128,
    ) -> Result<Bound<'a>, String> {
        let range = self.walk(&c.iter_range, times)?;
        let range_size = self.size(range);
        let item = self.item(range);
        let n = range_size.len;
        let inner = times.saturating_mul(n);
        // Each item is copied into the loop's variable (both, with two variables).
        let vars = if c.iter_var2.is_some() { 2 } else { 1 };
        self.build(times, range_size.bytes.saturating_mul(vars));
        let init = self.walk(&c.accu_init, times)?;
        let init = self.size(init);

        self.scopes.push((&c.iter_var, item));
        if let Some(v) = &c.iter_var2 {
            self.scopes.push((v, item));
        }
        let append = append_step(c);
        let accu = match self.accumulator(c, init, n, append.as_ref()) {
            Ok(accu) => accu,
            Err(e) => {
                self.scopes.truncate(self.scopes.len() - vars as usize);
                return Err(e);
            }
        };
        self.scopes.push((&c.accu_var, accu));
        let body = self.loop_body(c, times, inner, accu, append.as_ref());
        self.scopes.truncate(self.scopes.len() - vars as usize - 1);
        body
    }

    /// Walk a loop's condition and step (`inner` times) and its result (`times`
    /// times), its variables in scope.
    fn loop_body(
        &mut self,
        c: &'a ComprehensionExpr,
        times: u128,
        inner: u128,
        accu: Size,
        append: Option<&AppendStep<'a>>,
    ) -> Result<Bound<'a>, String> {
        self.walk(&c.loop_cond, inner)?;
        match append {
            // As the interpreter runs `map` and `filter`: each item is pushed onto
            // one list, built once.
            Some(step) => {
                if let Some(guard) = step.guard {
                    self.walk(guard, inner)?;
                }
                self.walk(step.items, inner)?;
                self.build(times, accu.bytes);
            }
            // Any other step runs as written, once per item.
            None => {
                self.walk(&c.loop_step, inner)?;
            }
        }
        let result = self.walk(&c.result, times)?;
        let result = self.size(result);
        // The result is copied out of the loop's scope.
        self.build(times, result.bytes);
        Ok(Bound::Size(result))
    }

    /// A bound on a loop's accumulator after its `n` steps. A step that adds to it
    /// (`@result + [x]`, `@result + 1`) grows it linearly: probed once from its
    /// initial value and once from a larger one, a step must add the same amount to
    /// both (a step that multiplies it cannot be bounded this way, and is refused; the
    /// standard macros never write one).
    fn accumulator(
        &mut self,
        c: &'a ComprehensionExpr,
        init: Size,
        n: u128,
        append: Option<&AppendStep<'a>>,
    ) -> Result<Size, String> {
        let step = |this: &mut Self, accu: Size| -> Result<Size, String> {
            let saved = this.cost;
            this.scopes.push((&c.accu_var, accu));
            let out = match append {
                Some(a) => this.walk(a.items, 0).map(|items| {
                    let items = this.size(items);
                    Size {
                        bytes: accu.bytes.saturating_add(items.bytes),
                        len: accu.len.saturating_add(items.len),
                        deep: accu.deep.max(items.deep).max(accu.len + items.len),
                        sized: true,
                    }
                }),
                None => this.walk(&c.loop_step, 0).map(|b| this.size(b)),
            };
            this.scopes.pop();
            this.cost = saved;
            out.map(|s| s.join(accu))
        };
        let once = step(self, init)?;
        let grow = Size {
            bytes: once.bytes - init.bytes,
            len: once.len - init.len,
            deep: 0,
            sized: once.sized,
        };
        if grow.bytes == 0 && grow.len == 0 {
            return Ok(once);
        }
        const PROBE: u128 = 1 << 40;
        let larger = Size {
            bytes: init.bytes + PROBE,
            len: init.len + PROBE,
            deep: init.deep + PROBE,
            sized: init.sized,
        };
        let probed = step(self, larger)?;
        if probed.bytes > larger.bytes + grow.bytes || probed.len > larger.len + grow.len {
            return Err(
                "has a loop whose result grows faster than once per item; it cannot be \
                 bounded"
                    .into(),
            );
        }
        let len = init.len.saturating_add(grow.len.saturating_mul(n));
        Ok(Size {
            bytes: init.bytes.saturating_add(grow.bytes.saturating_mul(n)),
            len,
            deep: once.deep.max(len),
            sized: once.sized,
        })
    }

    /// A bound on what a loop over `range` binds its variable to (an item of a
    /// list, a key or value of a map), or what indexing it yields.
    fn item(&mut self, range: Bound<'a>) -> Size {
        let v = match range {
            Bound::Size(s) => return s.part(),
            Bound::Json(v) => v,
        };
        let key = std::ptr::from_ref(v).addr();
        if let Some(s) = self.items.get(&key) {
            return *s;
        }
        let mut out = Size::default();
        match v {
            Value::Array(a) => {
                for x in a {
                    out = out.join(measure(x));
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    out = out.join(Size::text(k.len())).join(measure(x));
                }
            }
            _ => {}
        }
        self.items.insert(key, out);
        out
    }

    fn join(&mut self, a: Bound<'a>, b: Bound<'a>) -> Bound<'a> {
        match (a, b) {
            (Bound::Json(x), Bound::Json(y)) if std::ptr::eq(x, y) => a,
            _ => Bound::Size(self.size(a).join(self.size(b))),
        }
    }

    fn size(&mut self, b: Bound<'a>) -> Size {
        match b {
            Bound::Size(s) => s,
            Bound::Json(v) => self.measure(v),
        }
    }

    fn measure(&mut self, v: &'a Value) -> Size {
        *self
            .measured
            .entry(std::ptr::from_ref(v).addr())
            .or_insert_with(|| measure(v))
    }

    fn build(&mut self, times: u128, bytes: u128) {
        self.cost.built = self.cost.built.saturating_add(times.saturating_mul(bytes));
    }

    fn read(&mut self, times: u128, bytes: u128) {
        self.cost.read = self.cost.read.saturating_add(times.saturating_mul(bytes));
    }
}

/// The step of a `map` or `filter` loop, which the interpreter runs by pushing onto
/// one list instead of copying the accumulator each time: `@result + [x]`, or
/// `guard ? @result + [x] : @result`, from an empty list, with a constant condition
/// and `@result` as the result (the shape `cel`'s `AppendStep` recognises).
struct AppendStep<'a> {
    guard: Option<&'a IdedExpr>,
    items: &'a IdedExpr,
}

fn append_step(c: &ComprehensionExpr) -> Option<AppendStep<'_>> {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    fn items_of<'e>(accu: &str, e: &'e IdedExpr) -> Option<&'e IdedExpr> {
        let Expr::Call(call) = &e.expr else {
            return None;
        };
        if call.func_name != operators::ADD || call.target.is_some() {
            return None;
        }
        match call.args.as_slice() {
            [a, items]
                if matches!(&a.expr, Expr::Ident(n) if n == accu)
                    && matches!(items.expr, Expr::List(_)) =>
            {
                Some(items)
            }
            _ => None,
        }
    }
    let empty_init = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
    if !empty_init || !is_accu(&c.result) || !matches!(c.loop_cond.expr, Expr::Literal(_)) {
        return None;
    }
    match &c.loop_step.expr {
        Expr::Call(call) if call.func_name == operators::CONDITIONAL && call.target.is_none() => {
            match call.args.as_slice() {
                [guard, step, otherwise] if is_accu(otherwise) => Some(AppendStep {
                    guard: Some(guard),
                    items: items_of(&c.accu_var, step)?,
                }),
                _ => None,
            }
        }
        _ => Some(AppendStep {
            guard: None,
            items: items_of(&c.accu_var, &c.loop_step)?,
        }),
    }
}

/// The size of a part of the arguments: one pass over it, without recursion (the
/// arguments may nest deeper than a stack would like).
fn measure(v: &Value) -> Size {
    let len = match v {
        Value::Array(a) => a.len(),
        Value::Object(m) => m.len(),
        _ => 0,
    } as u128;
    let mut bytes = 0u128;
    let mut deep = 0u128;
    let mut sized = false;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                bytes = bytes.saturating_add(s.len() as u128);
                sized = true;
            }
            Value::Array(a) => {
                bytes = bytes.saturating_add(a.len() as u128 * ENTRY_BYTES);
                deep = deep.max(a.len() as u128);
                sized = true;
                stack.extend(a);
            }
            Value::Object(m) => {
                for (k, x) in m {
                    bytes = bytes.saturating_add(k.len() as u128 + ENTRY_BYTES);
                    stack.push(x);
                }
                deep = deep.max(m.len() as u128);
                sized = true;
            }
            _ => bytes = bytes.saturating_add(SCALAR_BYTES),
        }
    }
    Size {
        bytes,
        len,
        deep,
        sized,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use crate::spec::CelPredicate;

    /// Evaluate `source` over `args`: `Ok(answer)`, or the error, which must contain
    /// `Err(words)`.
    fn check(source: &str, args: &Value, expect: Result<bool, &str>) {
        let p = CelPredicate::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        match (p.evaluate(args), expect) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{source}"),
            (Err(e), Err(words)) => assert!(e.message.contains(words), "{source}: {e}"),
            (got, want) => panic!("{source}: got {got:?}, want {want:?}"),
        }
    }

    fn big() -> Value {
        json!({
            "s": "x".repeat(1_000_000),
            "t": "x".repeat(1_000_000),
            "l": vec![1; 1000],
            "items": (0..10_000).map(|i| json!({"qty": i % 7, "name": format!("item {i}")}))
                .collect::<Vec<_>>(),
            "orders": (0..100).map(|_| json!({"lines": vec![json!({"price": 10}); 50]}))
                .collect::<Vec<_>>(),
        })
    }

    fn small() -> Value {
        json!({
            "s": "ab", "t": "ab", "l": [1, 2, 3],
            "items": [{"qty": 11, "name": "a"}],
            "orders": [{"lines": [{"price": 10}]}],
        })
    }

    #[test]
    fn every_way_of_building_big_values_is_stopped_before_it_runs() {
        let big = big();
        let chain = vec!["args.s"; 16].join(" + ");
        let copies = vec!["args.s"; 32].join(", ");
        let entries = (0..32)
            .map(|i| format!("'k{i}': args.s"))
            .collect::<Vec<_>>()
            .join(", ");
        for (source, says) in [
            // Concatenation, flat and nested.
            (format!("size({chain}) > 0"), "bytes"),
            (format!("size(({chain}) + ({chain})) > 0"), "bytes"),
            // List and map construction.
            (format!("size([{copies}]) > 0"), "bytes"),
            (format!("size({{{entries}}}) > 0"), "bytes"),
            (format!("[{copies}] == []"), "bytes"),
            // Lists grown by concatenation.
            (
                "size([args.s, args.s] + [args.s, args.s] + [args.s, args.s] + [args.s] \
                 + [args.s, args.s] + [args.s, args.s] + [args.s, args.s] + [args.s] \
                 + [args.s, args.s] + [args.s, args.s] + [args.s, args.s] + [args.s] \
                 + [args.s, args.s] + [args.s, args.s] + [args.s, args.s] + [args.s]) > 0"
                    .into(),
                "bytes",
            ),
            // Functions that build strings or copy values.
            ("args.l.exists(x, size(bytes(args.s)) == 0)".into(), "bytes"),
            ("args.l.exists(x, string(args.s) == '')".into(), "bytes"),
            ("args.l.exists(x, dyn(args.s) == '')".into(), "bytes"),
            (
                "args.l.exists(x, optional.of(args.s).value() == '')".into(),
                "bytes",
            ),
            // Growth in a loop: `map` builds one copy per item.
            ("args.l.map(x, args.s).size() > 0".into(), "bytes"),
            ("args.l.map(x, args.s + args.t).size() > 0".into(), "bytes"),
            (
                "args.l.filter(x, args.s + '' != '').size() > 0".into(),
                "bytes",
            ),
            (
                "args.l.exists(x, [args.s, args.t].exists(y, y + y == ''))".into(),
                "bytes",
            ),
            // Reading: a megabyte compared a thousand times.
            ("args.l.exists(x, args.s == args.t + '')".into(), "bytes"),
            ("args.l.exists(x, args.s == args.t)".into(), "read"),
            ("args.l.exists(x, args.s.contains(args.t))".into(), "read"),
            ("args.l.exists(x, args.s in [args.t])".into(), "bytes"),
            // Steps: two nested loops over ten thousand items.
            (
                "args.items.exists(a, args.items.exists(b, a.qty + b.qty < 0))".into(),
                "steps",
            ),
        ] {
            check(&source, &big, Err(says));
            // The same predicate over small arguments runs.
            let p = CelPredicate::compile(&source).unwrap();
            p.evaluate(&small())
                .unwrap_or_else(|e| panic!("{source} over small args: {e}"));
        }
    }

    #[test]
    fn ordinary_predicates_over_big_arguments_run() {
        let big = big();
        for (source, want) in [
            ("args.items.exists(i, i.qty > 5)", true),
            ("args.items.all(i, i.qty < 7)", true),
            ("args.items.filter(i, i.qty > 5).size() > 1000", true),
            ("args.items.exists_one(i, i.name == 'item 3')", true),
            ("args.orders.all(o, o.lines.all(l, l.price < 1000))", true),
            ("args.s.startsWith('x') && size(args.s) == 1000000", true),
            ("args.s == args.t", true),
            ("args.s + args.t != ''", true),
            ("'item 3' in args.items.map(i, i.name)", true),
            ("args.l.exists(x, x == 2)", false),
            ("has(args.missing) ? args.missing > 1 : false", false),
        ] {
            check(source, &big, Ok(want));
        }
    }

    #[test]
    fn a_function_whose_result_cannot_be_bounded_is_refused_at_compile() {
        for source in [
            "matches(args.s, 'x')",
            "args.s.lowerAscii() == 'a'",
            "max(1, 2) > 0",
            "args.l.join(',') == ''",
            "strings.quote(args.s) == ''",
        ] {
            let err = CelPredicate::compile(source).unwrap_err();
            assert_eq!(err.field, "approval.when");
            assert!(
                err.message
                    .contains("which approval predicates do not offer"),
                "{err}"
            );
        }
        for (ok, want) in [
            ("optional.of(args.a).hasValue()", true),
            ("optional.none().orValue(1) == 1", true),
            ("optional.of(args.a).value() == 2", false),
            (
                "int(args.a) > 0 && double(args.a) > 0.5 && uint(1) == 1u",
                true,
            ),
            ("type(args.a) == type(1)", false),
            (
                "string(args.a) == '1' && bytes('x') == b'x' && bool('true')",
                true,
            ),
            (
                "dyn(args.a) == 1 && 'ab'.contains('a') && 'ab'.endsWith('b')",
                true,
            ),
            ("size(args) > 0 && args.b.startsWith('a')", true),
        ] {
            check(ok, &json!({"a": 1, "b": "ab"}), Ok(want));
        }
    }
}

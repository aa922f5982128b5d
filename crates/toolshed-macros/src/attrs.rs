//! Parsing and checking the arguments of `#[tool(...)]`.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr};

/// Every key `#[tool(...)]` accepts, for error messages.
pub(crate) const KEYS: &str = "`name`, `description`, `effects`, `idempotency`, `approval`, \
     `allow_unkeyed_external`, `timeout_ms`, `max_attempts`, `retries`, `credentials`, \
     `output_schema`, `crate`";

/// The most retries `RetryPolicy` accepts.
const MAX_RETRIES: u32 = 100;

/// A value together with where it was written, for error spans.
#[derive(Clone, Debug)]
pub(crate) struct At<T> {
    pub value: T,
    pub span: Span,
}

/// What the tool touches (`effects = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effects {
    None,
    Sandbox,
    External,
}

/// How calls are keyed (`idempotency = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotency {
    Keyed,
    None,
}

/// The human gate (`approval = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Approval {
    Never,
    Always,
}

/// The parsed arguments of `#[tool(...)]`. Everything is optional.
#[derive(Default, Debug)]
pub(crate) struct ToolAttrs {
    pub name: Option<LitStr>,
    pub description: Option<LitStr>,
    pub effects: Option<At<Effects>>,
    pub idempotency: Option<At<Idempotency>>,
    pub approval: Option<At<Approval>>,
    pub allow_unkeyed_external: Option<At<bool>>,
    pub timeout_ms: Option<At<u64>>,
    pub max_attempts: Option<At<u32>>,
    pub retries: Option<At<u32>>,
    pub credentials: Option<Vec<LitStr>>,
    pub output_schema: Option<At<bool>>,
    pub krate: Option<syn::Path>,
    /// Keys seen so far, to reject duplicates.
    seen: Vec<String>,
}

/// Collects several errors into one.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub fn push_new(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.push(syn::Error::new(span, msg));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn into_compile_errors(self) -> TokenStream {
        self.0.map(|e| e.to_compile_error()).unwrap_or_default()
    }
}

impl ToolAttrs {
    /// Parse the attribute's tokens. Syntax errors stop the parse; bad values are
    /// collected into `errors` so the user sees all of them at once.
    pub fn parse(tokens: TokenStream, errors: &mut Errors) -> ToolAttrs {
        let mut attrs = ToolAttrs::default();
        let parser = syn::meta::parser(|meta| attrs.parse_one(meta, errors));
        if let Err(e) = parser.parse2(tokens) {
            errors.push(e);
        }
        attrs.check(errors);
        attrs
    }

    fn parse_one(&mut self, meta: ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let Some(ident) = meta.path.get_ident() else {
            return Err(meta.error(format_args!(
                "unknown `#[tool]` key; expected one of {KEYS}"
            )));
        };
        let key = ident.to_string();
        let key_span = ident.span();
        if self.seen.contains(&key) {
            errors.push_new(key_span, format_args!("`{key}` is given more than once"));
        } else {
            self.seen.push(key.clone());
        }
        match key.as_str() {
            "name" => {
                let lit = string_value(&meta, &key, "a tool name, e.g. name = \"search_tickets\"")?;
                self.name = Some(lit);
            }
            "description" => {
                let lit = string_value(&meta, &key, "a string, e.g. description = \"...\"")?;
                self.description = Some(lit);
            }
            "effects" => {
                let allowed = [
                    ("none", Effects::None),
                    ("sandbox", Effects::Sandbox),
                    ("external", Effects::External),
                ];
                if let Some(v) = choice(&meta, &key, &allowed, errors)? {
                    self.effects = Some(v);
                }
            }
            "idempotency" => {
                let allowed = [("keyed", Idempotency::Keyed), ("none", Idempotency::None)];
                if let Some(v) = choice(&meta, &key, &allowed, errors)? {
                    self.idempotency = Some(v);
                }
            }
            "approval" => {
                let allowed = [("never", Approval::Never), ("always", Approval::Always)];
                if let Some(v) = choice(&meta, &key, &allowed, errors)? {
                    self.approval = Some(v);
                }
            }
            "allow_unkeyed_external" => {
                if let Some(v) = bool_value(&meta, &key, errors)? {
                    self.allow_unkeyed_external = Some(v);
                }
            }
            "output_schema" => {
                if let Some(v) = bool_value(&meta, &key, errors)? {
                    self.output_schema = Some(v);
                }
            }
            "timeout_ms" => {
                if let Some(v) = int_value::<u64>(&meta, &key, "milliseconds", errors)? {
                    self.timeout_ms = Some(v);
                }
            }
            "max_attempts" => {
                if let Some(v) = int_value::<u32>(&meta, &key, "attempts", errors)? {
                    self.max_attempts = Some(v);
                }
            }
            "retries" => {
                if let Some(v) = int_value::<u32>(&meta, &key, "retries", errors)? {
                    self.retries = Some(v);
                }
            }
            "credentials" => {
                if let Some(v) = string_list(&meta, &key, errors)? {
                    self.credentials = Some(v);
                }
            }
            "crate" => {
                let lit = string_value(
                    &meta,
                    &key,
                    "the path of toolshed-core, e.g. crate = \"::toolshed::core\"",
                )?;
                match lit.parse::<syn::Path>() {
                    Ok(path) => self.krate = Some(path),
                    Err(_) => errors.push_new(
                        lit.span(),
                        format_args!(
                            "`crate` must be a path such as \"::toolshed_core\", got {:?}",
                            lit.value()
                        ),
                    ),
                }
            }
            _ => {
                return Err(syn::Error::new(
                    key_span,
                    format_args!("unknown `#[tool]` key `{key}`; expected one of {KEYS}"),
                ));
            }
        }
        Ok(())
    }

    /// Rules that span keys, mirroring `ToolSpec::check` so mistakes show at compile time.
    fn check(&self, errors: &mut Errors) {
        if let Some(effects) = &self.effects {
            let keyed = matches!(
                self.idempotency,
                Some(At {
                    value: Idempotency::Keyed,
                    ..
                })
            );
            let opted_out = matches!(self.allow_unkeyed_external, Some(At { value: true, .. }));
            if effects.value == Effects::External && !keyed && !opted_out {
                errors.push_new(
                    effects.span,
                    "a tool with `effects = \"external\"` must also have `idempotency = \"keyed\"`, \
                     so a resumed run never repeats its side effect; add \
                     `allow_unkeyed_external = true` to opt out explicitly",
                );
            }
        }
        if let Some(t) = &self.timeout_ms
            && t.value == 0
        {
            errors.push_new(t.span, "`timeout_ms` must be greater than zero");
        }
        if let Some(n) = &self.max_attempts
            && n.value == 0
        {
            errors.push_new(
                n.span,
                "`max_attempts` must be at least 1 (leave it out for no bound)",
            );
        }
        if let Some(n) = &self.retries
            && n.value > MAX_RETRIES
        {
            errors.push_new(
                n.span,
                format_args!("`retries = {}` is too many; at most {MAX_RETRIES}", n.value),
            );
        }
        for lit in self.credentials.iter().flatten() {
            if let Err(why) = check_credential_name(&lit.value()) {
                errors.push_new(
                    lit.span(),
                    format_args!(
                        "credential name {:?} {why}; names must match ^[A-Za-z][A-Za-z0-9_-]*$",
                        lit.value()
                    ),
                );
            }
        }
    }
}

/// `^[A-Za-z][A-Za-z0-9_-]*$`, as `toolshed_core::credentials::check_credential_name`.
fn check_credential_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("is empty".into()),
        Some(c) if !c.is_ascii_alphabetic() => {
            return Err(format!("starts with {c:?}, not a letter"));
        }
        Some(_) => {}
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("contains {bad:?}"));
    }
    Ok(())
}

/// The expression after `key =`, or an error saying what the key expects.
fn value_expr(meta: &ParseNestedMeta<'_>, key: &str, expects: &str) -> syn::Result<Expr> {
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error(format_args!("`{key}` expects {expects}")));
    }
    meta.value()?.parse::<Expr>()
}

fn lit_of(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        Expr::Group(g) => lit_of(&g.expr),
        Expr::Paren(p) => lit_of(&p.expr),
        _ => None,
    }
}

fn string_value(meta: &ParseNestedMeta<'_>, key: &str, expects: &str) -> syn::Result<LitStr> {
    let expr = value_expr(meta, key, expects)?;
    match lit_of(&expr) {
        Some(Lit::Str(s)) => Ok(s.clone()),
        _ => Err(syn::Error::new(
            expr.span(),
            format_args!("`{key}` expects {expects}"),
        )),
    }
}

fn list_choices<T>(allowed: &[(&str, T)]) -> String {
    allowed
        .iter()
        .map(|(s, _)| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn choice<T: Copy>(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    allowed: &[(&str, T)],
    errors: &mut Errors,
) -> syn::Result<Option<At<T>>> {
    let expects = format!("one of {}", list_choices(allowed));
    let expr = value_expr(meta, key, &expects)?;
    let Some(Lit::Str(s)) = lit_of(&expr) else {
        errors.push_new(
            expr.span(),
            format_args!("`{key}` expects a string: {expects}"),
        );
        return Ok(None);
    };
    let value = s.value();
    match allowed.iter().find(|(name, _)| *name == value) {
        Some((_, v)) => Ok(Some(At {
            value: *v,
            span: s.span(),
        })),
        None => {
            errors.push_new(
                s.span(),
                format_args!("`{key} = {value:?}` is not allowed; expected {expects}"),
            );
            Ok(None)
        }
    }
}

/// `key = true|false`, or the bare `key` meaning `true`.
fn bool_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<At<bool>>> {
    if !meta.input.peek(syn::Token![=]) {
        if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
            return Ok(Some(At {
                value: true,
                span: meta.path.span(),
            }));
        }
        return Err(meta.error(format_args!("`{key}` expects `true` or `false`")));
    }
    let expr = meta.value()?.parse::<Expr>()?;
    match lit_of(&expr) {
        Some(Lit::Bool(b)) => Ok(Some(At {
            value: b.value,
            span: b.span,
        })),
        _ => {
            errors.push_new(
                expr.span(),
                format_args!("`{key}` expects `true` or `false`"),
            );
            Ok(None)
        }
    }
}

fn int_value<T>(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    unit: &str,
    errors: &mut Errors,
) -> syn::Result<Option<At<T>>>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let expects = format!("a non-negative integer ({unit}), e.g. {key} = 3");
    let expr = value_expr(meta, key, &expects)?;
    let Some(Lit::Int(i)) = lit_of(&expr) else {
        errors.push_new(expr.span(), format_args!("`{key}` expects {expects}"));
        return Ok(None);
    };
    match i.base10_parse::<T>() {
        Ok(v) => Ok(Some(At {
            value: v,
            span: i.span(),
        })),
        Err(e) => {
            errors.push_new(i.span(), format_args!("`{key}` expects {expects}: {e}"));
            Ok(None)
        }
    }
}

fn string_list(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Vec<LitStr>>> {
    let expects = format!("an array of string literals, e.g. {key} = [\"API_KEY\"]");
    let expr = value_expr(meta, key, &expects)?;
    let Expr::Array(array) = &expr else {
        errors.push_new(expr.span(), format_args!("`{key}` expects {expects}"));
        return Ok(None);
    };
    let mut out = Vec::with_capacity(array.elems.len());
    let mut ok = true;
    for elem in &array.elems {
        match lit_of(elem) {
            Some(Lit::Str(s)) => out.push(s.clone()),
            _ => {
                ok = false;
                errors.push_new(elem.span(), format_args!("`{key}` expects {expects}"));
            }
        }
    }
    Ok(ok.then_some(out))
}

//! Reading the annotated fn: its parameters, its context parameter, its return type
//! and its doc comment. Parameter attributes that belong to the args struct are taken
//! off the fn here, so the fn itself stays valid Rust.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, Ident, ItemFn, Lit, Pat, PathSegment, ReturnType, Type,
};

use crate::attrs::Errors;

/// How the handler hands the context to the fn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CtxPass {
    /// `ctx: ToolContext`
    Owned,
    /// `ctx: &ToolContext`
    Ref,
    /// `ctx: &mut ToolContext`
    RefMut,
}

/// One argument of the call the handler makes, in the fn's order.
#[derive(Clone, Debug)]
pub(crate) enum Slot {
    /// The field of the args struct with this name.
    Arg(Ident),
    /// The context.
    Ctx(CtxPass),
}

/// A parameter that becomes a field of the args struct.
pub(crate) struct Param {
    pub ident: Ident,
    pub ty: Type,
    /// `#[doc]`, `#[serde]` and `#[schemars]` attributes moved from the parameter.
    pub attrs: Vec<Attribute>,
}

/// What the fn returns, as far as the handler and the output schema care.
pub(crate) enum Output {
    /// `()` or no return type.
    Unit,
    /// Any other `T: Serialize`.
    Plain(Type),
    /// `Result<T, E>` (or an alias such as `anyhow::Result<T>`); holds `T`.
    Result(Type),
    /// `Streaming<T>`; holds `T`.
    Streaming(Type),
    /// `Result<Streaming<T>, E>`; holds `T`.
    ResultStreaming(Type),
}

impl Output {
    /// The type whose schema is the output schema, if there is one.
    pub fn schema_type(&self) -> Option<&Type> {
        let ty = match self {
            Output::Unit => return None,
            Output::Plain(t)
            | Output::Result(t)
            | Output::Streaming(t)
            | Output::ResultStreaming(t) => t,
        };
        if is_unit(ty) || is_json_value(ty) {
            None
        } else {
            Some(ty)
        }
    }

    /// Whether the tool streams partial results.
    pub fn is_streaming(&self) -> bool {
        matches!(self, Output::Streaming(_) | Output::ResultStreaming(_))
    }
}

/// Everything the expansion needs to know about the fn.
pub(crate) struct Analysis {
    pub params: Vec<Param>,
    pub call: Vec<Slot>,
    pub output: Output,
    /// The fn's doc comment, cleaned up; `Err` holds the span of a doc attribute that
    /// is not a string literal (e.g. `#[doc = include_str!(..)]`).
    pub doc: Result<Option<String>, Span>,
}

impl Analysis {
    /// How the context is passed, if the fn takes it.
    pub fn ctx(&self) -> Option<CtxPass> {
        self.call.iter().find_map(|s| match s {
            Slot::Ctx(p) => Some(*p),
            Slot::Arg(_) => None,
        })
    }
}

/// Check the signature, collect the parameters and strip their attributes from `func`.
pub(crate) fn analyze(func: &mut ItemFn, errors: &mut Errors) -> Analysis {
    check_signature(func, errors);
    let mut params = Vec::new();
    let mut call = Vec::new();
    let mut ctx_seen = false;
    for input in &mut func.sig.inputs {
        let arg = match input {
            FnArg::Receiver(r) => {
                errors.push_new(
                    r.span(),
                    "#[tool] cannot take `self`: write a free `async fn` and call the method \
                     from its body",
                );
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        let (moved, kept): (Vec<Attribute>, Vec<Attribute>) =
            std::mem::take(&mut arg.attrs).into_iter().partition(|a| {
                let p = a.path();
                p.is_ident("doc") || p.is_ident("serde") || p.is_ident("schemars")
            });
        for a in &kept {
            if a.path().is_ident("cfg") || a.path().is_ident("cfg_attr") {
                errors.push_new(
                    a.span(),
                    "#[tool] does not support `#[cfg]` on parameters: the args schema must be \
                     the same in every build",
                );
            }
        }
        arg.attrs = kept;

        if let Some(pass) = context_pass(&arg.ty) {
            if ctx_seen {
                errors.push_new(
                    arg.ty.span(),
                    "#[tool] fns take at most one `ToolContext` parameter",
                );
            }
            ctx_seen = true;
            if let Some(a) = moved.iter().find(|a| !a.path().is_ident("doc")) {
                errors.push_new(
                    a.span(),
                    "the `ToolContext` parameter is not an argument of the tool, so \
                     `#[serde]`/`#[schemars]` attributes do not apply to it",
                );
            }
            call.push(Slot::Ctx(pass));
            continue;
        }

        let ident = match &*arg.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            Pat::Wild(w) => {
                errors.push_new(
                    w.span(),
                    "give this #[tool] parameter a name: the name is the argument's name in \
                     the input schema",
                );
                continue;
            }
            other => {
                errors.push_new(
                    other.span(),
                    "#[tool] parameters must be plain names such as `query: String`, not \
                     patterns: each name becomes a property of the input schema",
                );
                continue;
            }
        };
        match strip_group(&arg.ty) {
            Type::Reference(r) => {
                errors.push_new(
                    r.span(),
                    format_args!(
                        "#[tool] parameter `{ident}` borrows: tool arguments are deserialized \
                         into owned values, so take an owned type (e.g. `String` for `&str`, \
                         `Vec<T>` for `&[T]`)"
                    ),
                );
                continue;
            }
            Type::ImplTrait(t) => {
                errors.push_new(
                    t.span(),
                    format_args!(
                        "#[tool] parameter `{ident}` is `impl Trait`: the input schema needs \
                         a concrete type"
                    ),
                );
                continue;
            }
            _ => {}
        }
        call.push(Slot::Arg(ident.clone()));
        params.push(Param {
            ident,
            ty: (*arg.ty).clone(),
            attrs: moved,
        });
    }
    Analysis {
        params,
        call,
        output: output_of(&func.sig.output),
        doc: doc_text(&func.attrs),
    }
}

fn check_signature(func: &ItemFn, errors: &mut Errors) {
    let sig = &func.sig;
    let name = &sig.ident;
    if sig.asyncness.is_none() {
        errors.push_new(
            sig.fn_token.span,
            format_args!(
                "#[tool] needs an `async fn`: write `async fn {name}` (a body that never \
                 awaits is fine)"
            ),
        );
    }
    if let Some(c) = &sig.constness {
        errors.push_new(c.span, "#[tool] fns cannot be `const`");
    }
    if let Some(u) = &sig.unsafety {
        errors.push_new(
            u.span,
            "#[tool] fns cannot be `unsafe`: the generated handler calls the fn from safe code",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.push_new(abi.span(), "#[tool] fns cannot have an `extern` ABI");
    }
    if let Some(v) = &sig.variadic {
        errors.push_new(v.span(), "#[tool] fns cannot be variadic");
    }
    if !sig.generics.params.is_empty() {
        errors.push_new(
            sig.generics.span(),
            "#[tool] fns cannot be generic (no type, lifetime or const parameters): the \
             input and output schemas are generated from concrete types",
        );
    } else if let Some(w) = &sig.generics.where_clause {
        errors.push_new(w.span(), "#[tool] fns cannot have a `where` clause");
    }
}

/// `ToolContext`, `&ToolContext` or `&mut ToolContext` (recognised by the last path
/// segment, so `toolshed_core::ToolContext` works too).
fn context_pass(ty: &Type) -> Option<CtxPass> {
    match strip_group(ty) {
        Type::Reference(r) if is_context_path(&r.elem) => Some(if r.mutability.is_some() {
            CtxPass::RefMut
        } else {
            CtxPass::Ref
        }),
        t if is_context_path(t) => Some(CtxPass::Owned),
        _ => None,
    }
}

fn is_context_path(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == "ToolContext" && s.arguments.is_none())
}

/// Look through invisible groups and parentheses.
fn strip_group(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip_group(&g.elem),
        Type::Paren(p) => strip_group(&p.elem),
        t => t,
    }
}

fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match strip_group(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// The first type argument of `Name<T, ..>`.
fn first_type_arg(seg: &PathSegment) -> Option<&Type> {
    match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

fn is_unit(ty: &Type) -> bool {
    matches!(strip_group(ty), Type::Tuple(t) if t.elems.is_empty())
}

/// `Value` or a path ending in `serde_json::Value`.
fn is_json_value(ty: &Type) -> bool {
    let Type::Path(p) = strip_group(ty) else {
        return false;
    };
    if p.qself.is_some() {
        return false;
    }
    let segs: Vec<&PathSegment> = p.path.segments.iter().collect();
    match segs.as_slice() {
        [.., last] if !(last.ident == "Value" && last.arguments.is_none()) => false,
        [_] => p.path.leading_colon.is_none(),
        [.., module, _] => module.ident == "serde_json",
        [] => false,
    }
}

fn streaming_item(ty: &Type) -> Option<&Type> {
    last_segment(ty)
        .filter(|s| s.ident == "Streaming")
        .and_then(first_type_arg)
}

fn output_of(ret: &ReturnType) -> Output {
    let ty = match ret {
        ReturnType::Default => return Output::Unit,
        ReturnType::Type(_, ty) => &**ty,
    };
    if is_unit(ty) {
        return Output::Unit;
    }
    if let Some(item) = streaming_item(ty) {
        return Output::Streaming(item.clone());
    }
    if let Some(ok) = last_segment(ty)
        .filter(|s| s.ident == "Result")
        .and_then(first_type_arg)
    {
        return match streaming_item(ok) {
            Some(item) => Output::ResultStreaming(item.clone()),
            None => Output::Result(ok.clone()),
        };
    }
    Output::Plain(ty.clone())
}

/// The doc comment as one string: the lines joined with `\n`, their common leading
/// whitespace removed, the whole trimmed. `Ok(None)` when there is no text.
pub(crate) fn doc_text(attrs: &[Attribute]) -> Result<Option<String>, Span> {
    let mut lines: Vec<String> = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let syn::Meta::NameValue(nv) = &attr.meta else {
            continue; // `#[doc(hidden)]` and friends
        };
        match &nv.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => lines.extend(s.value().split('\n').map(str::to_owned)),
            other => return Err(other.span()),
        }
    }
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.chars().take_while(|c| c.is_whitespace()).count())
        .min()
        .unwrap_or(0);
    let text = lines
        .iter()
        .map(|l| strip_indent(l, indent).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// `line` without its first `n` characters of leading whitespace.
fn strip_indent(line: &str, n: usize) -> &str {
    let mut rest = line;
    for _ in 0..n {
        let mut chars = rest.chars();
        match chars.next() {
            Some(c) if c.is_whitespace() => rest = chars.as_str(),
            _ => break,
        }
    }
    rest
}

/// `^[A-Za-z0-9_-]{1,64}$`, as `toolshed_core::ToolName::new`.
pub(crate) fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the tool name must not be empty".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "the tool name `{name}` contains {bad:?}; use only ASCII letters, digits, `_` and \
             `-` (^[A-Za-z0-9_-]{{1,64}}$)"
        ));
    }
    if name.len() > 64 {
        return Err(format!(
            "the tool name `{name}` is {} characters long; at most 64 are allowed",
            name.len()
        ));
    }
    Ok(())
}

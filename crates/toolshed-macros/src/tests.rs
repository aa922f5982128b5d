//! Unit tests of the expansion: what is generated, and the compile errors (checked as
//! the `compile_error!` messages the expansion emits).

#![allow(clippy::unwrap_used)]

use proc_macro2::TokenStream;
use quote::quote;

use crate::analyze::{check_tool_name, doc_text};
use crate::expand::expand;

/// The messages of every `compile_error!` in the expansion.
fn errors(attr: TokenStream, item: TokenStream) -> Vec<String> {
    let out = expand(attr, item);
    let file: syn::File = syn::parse2(out).unwrap();
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Macro(m)
                if m.mac
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "compile_error") =>
            {
                Some(
                    syn::parse2::<syn::LitStr>(m.mac.tokens.clone())
                        .unwrap()
                        .value(),
                )
            }
            _ => None,
        })
        .collect()
}

/// Exactly one error, containing every needle.
#[track_caller]
fn assert_error(attr: TokenStream, item: TokenStream, needles: &[&str]) {
    let errs = errors(attr, item);
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    for needle in needles {
        assert!(errs[0].contains(needle), "{:?} lacks {needle:?}", errs[0]);
    }
}

fn documented_fn() -> TokenStream {
    quote! {
        /// Do a thing.
        async fn thing(x: u32) -> u32 { x }
    }
}

#[test]
fn expansion_keeps_the_fn_without_param_attributes_and_adds_the_constructor() {
    let out = expand(
        quote!(effects = "sandbox"),
        quote! {
            /// Search.
            pub async fn search(
                /// The query.
                #[serde(default)]
                #[schemars(length(max = 10))]
                #[allow(unused_mut)]
                mut query: String,
                ctx: &ToolContext,
            ) -> Result<Vec<u32>, String> { Ok(vec![]) }
        },
    );
    let file: syn::File = syn::parse2(out).unwrap();
    let fns: Vec<&syn::ItemFn> = file
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Fn(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(fns.len(), 2, "{fns:#?}");
    assert_eq!(fns[0].sig.ident, "search");
    let syn::FnArg::Typed(query) = &fns[0].sig.inputs[0] else {
        panic!("typed arg expected")
    };
    // Only the attribute that is valid on a parameter stays.
    assert_eq!(query.attrs.len(), 1);
    assert!(query.attrs[0].path().is_ident("allow"));
    assert_eq!(fns[1].sig.ident, "search_tool");
    assert!(matches!(fns[1].vis, syn::Visibility::Public(_)));
    let body = quote!(#(#fns)*).to_string();
    assert!(body.contains("__SearchArgs"), "{body}");
    assert!(body.contains("deny_unknown_fields"), "{body}");
    assert!(body.contains("Effects :: Sandbox"), "{body}");
    assert!(body.contains("result_output"), "{body}");
    assert!(body.contains("& __toolshed_ctx"), "{body}");
}

#[test]
fn a_valid_tool_has_no_errors() {
    assert!(errors(quote!(), documented_fn()).is_empty());
    assert!(
        errors(
            quote!(
                name = "x-1",
                description = "d",
                effects = "external",
                idempotency = "keyed",
                approval = "always",
                allow_unkeyed_external,
                timeout_ms = 1_000,
                max_attempts = 3,
                retries = 100,
                credentials = ["A_KEY", "b-key"],
                output_schema = false,
                crate = "::toolshed::core",
            ),
            documented_fn()
        )
        .is_empty()
    );
}

#[test]
fn unknown_key_lists_the_allowed_ones() {
    assert_error(
        quote!(effect = "none"),
        documented_fn(),
        &[
            "unknown `#[tool]` key `effect`",
            "`effects`",
            "`idempotency`",
        ],
    );
}

#[test]
fn bad_choice_values_list_the_allowed_ones() {
    assert_error(
        quote!(effects = "network"),
        documented_fn(),
        &[
            "effects = \"network\"",
            "\"none\", \"sandbox\", \"external\"",
        ],
    );
    assert_error(
        quote!(idempotency = keyed),
        documented_fn(),
        &["`idempotency` expects a string", "\"keyed\", \"none\""],
    );
    assert_error(
        quote!(approval = "sometimes"),
        documented_fn(),
        &["\"never\", \"always\""],
    );
}

#[test]
fn bad_scalar_values() {
    assert_error(
        quote!(timeout_ms = "30s"),
        documented_fn(),
        &["`timeout_ms` expects a non-negative integer"],
    );
    assert_error(
        quote!(max_attempts = -1),
        documented_fn(),
        &["`max_attempts` expects a non-negative integer"],
    );
    assert_error(
        quote!(timeout_ms = 0),
        documented_fn(),
        &["`timeout_ms` must be greater than zero"],
    );
    assert_error(
        quote!(max_attempts = 0),
        documented_fn(),
        &["`max_attempts` must be at least 1"],
    );
    assert_error(quote!(retries = 101), documented_fn(), &["at most 100"]);
    assert_error(
        quote!(output_schema = "no"),
        documented_fn(),
        &["`output_schema` expects `true` or `false`"],
    );
    assert_error(
        quote!(credentials = "KEY"),
        documented_fn(),
        &["`credentials` expects an array of string literals"],
    );
    assert_error(
        quote!(credentials = ["1KEY"]),
        documented_fn(),
        &["credential name \"1KEY\" starts with '1'"],
    );
    assert_error(quote!(name = 5), documented_fn(), &["`name` expects"]);
}

#[test]
fn several_bad_values_are_all_reported() {
    let errs = errors(
        quote!(effects = "x", approval = "y", name = "a", name = "b"),
        documented_fn(),
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(
        errs[2].contains("`name` is given more than once"),
        "{errs:#?}"
    );
}

#[test]
fn external_effects_need_keyed_idempotency_or_an_opt_out() {
    assert_error(
        quote!(effects = "external"),
        documented_fn(),
        &["idempotency = \"keyed\"", "allow_unkeyed_external"],
    );
    assert!(
        errors(
            quote!(effects = "external", allow_unkeyed_external = true),
            documented_fn()
        )
        .is_empty()
    );
}

#[test]
fn invalid_names() {
    assert_error(
        quote!(name = "search tickets"),
        documented_fn(),
        &["contains ' '", "^[A-Za-z0-9_-]{1,64}$"],
    );
    let long = "x".repeat(65);
    assert_error(quote!(name = #long), documented_fn(), &["at most 64"]);
    assert_error(
        quote!(),
        quote! {
            /// Café.
            async fn café() {}
        },
        &["contains 'é'", "#[tool(name = \"...\")]"],
    );
}

#[test]
fn missing_description() {
    assert_error(
        quote!(),
        quote!(
            async fn thing() {}
        ),
        &["add a doc comment: the model chooses tools by their description"],
    );
    assert_error(
        quote!(description = "  "),
        documented_fn(),
        &["`description` must not be empty"],
    );
    assert_error(
        quote!(),
        quote! {
            #[doc = include_str!("README.md")]
            async fn thing() {}
        },
        &["not a string literal"],
    );
    // An explicit description is enough.
    assert!(
        errors(
            quote!(description = "Do it."),
            quote!(
                async fn thing() {}
            )
        )
        .is_empty()
    );
}

#[test]
fn signature_errors() {
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            fn thing() {}
        },
        &["#[tool] needs an `async fn`"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing<T: Clone>(x: T) {}
        },
        &["cannot be generic"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing(&self) {}
        },
        &["cannot take `self`"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing((a, b): (u32, u32)) {}
        },
        &["must be plain names"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing(_: u32) {}
        },
        &["give this #[tool] parameter a name"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing(q: &str) {}
        },
        &["parameter `q` borrows", "`String`"],
    );
    assert_error(
        quote!(),
        quote! {
            /// Doc.
            async fn thing(a: &ToolContext, b: ToolContext) {}
        },
        &["at most one `ToolContext`"],
    );
    assert_error(
        quote!(),
        quote!(
            struct Nope;
        ),
        &["goes on an `async fn`"],
    );
}

#[test]
fn output_schema_true_needs_a_typed_result() {
    assert_error(
        quote!(output_schema = true),
        quote! {
            /// Doc.
            async fn thing() -> serde_json::Value { serde_json::Value::Null }
        },
        &["`output_schema = true`"],
    );
}

#[test]
fn doc_text_joins_lines_and_trims_the_common_indent() {
    let f: syn::ItemFn = syn::parse_quote! {
        ///
        ///   Search the index.
        ///
        ///     indented
        ///   Last line.
        ///
        async fn f() {}
    };
    assert_eq!(
        doc_text(&f.attrs).unwrap().as_deref(),
        Some("Search the index.\n\n  indented\nLast line.")
    );
    let none: syn::ItemFn = syn::parse_quote! {
        #[doc(hidden)]
        async fn f() {}
    };
    assert_eq!(doc_text(&none.attrs).unwrap(), None);
}

#[test]
fn tool_names() {
    assert!(check_tool_name("order-lookup_2").is_ok());
    assert!(check_tool_name(&"x".repeat(64)).is_ok());
    assert!(check_tool_name("").is_err());
    assert!(check_tool_name("a.b").is_err());
}

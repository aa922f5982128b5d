//! Test fixtures: input schemas shaped like schemars 1.x output, and tools built on them.

use serde_json::{Value, json};

use crate::tool::Tool;

/// A struct with required, optional (`Option<u32>`), defaulted (`#[serde(default)]`)
/// fields, a documented string enum behind `$ref`, an `Option<Enum>` and `$schema`.
pub fn search_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "SearchArgs",
        "description": "Search args.",
        "type": "object",
        "properties": {
            "query": {"description": "What to look for.", "type": "string", "minLength": 1},
            "limit": {
                "description": "At most this many.",
                "type": ["integer", "null"],
                "format": "uint32",
                "minimum": 0
            },
            "page": {
                "description": "Page number.",
                "type": "integer",
                "format": "uint32",
                "default": 1,
                "minimum": 0
            },
            "exact": {"type": "boolean", "default": false},
            "sort": {"description": "The sort order.", "$ref": "#/$defs/SortOrder"},
            "then_by": {"anyOf": [{"$ref": "#/$defs/SortOrder"}, {"type": "null"}]},
            "mode": {"type": "string", "enum": ["fast", "thorough"]},
            "weight": {"type": "number", "format": "double", "exclusiveMinimum": 0},
            "since": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            "offset": {"type": "integer", "format": "int64"}
        },
        "required": ["query", "sort", "weight", "tags"],
        "$defs": {
            "SortOrder": {
                "description": "Sort order.",
                "type": "string",
                "enum": ["asc", "desc"]
            }
        }
    })
}

/// Nested structs via `$defs`/`$ref` (with a sibling description), `Option<Struct>`
/// via `anyOf` with null, an array of objects, and an internally tagged enum (`oneOf`
/// with `const` tags).
pub fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "address": {"description": "Where to ship.", "$ref": "#/$defs/Address"},
            "billing": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
            "items": {
                "description": "What to ship.",
                "type": "array",
                "items": {"$ref": "#/$defs/LineItem"},
                "minItems": 1
            },
            "shape": {"$ref": "#/$defs/Shape"},
            "gift": {"$ref": "#/$defs/GiftWrap", "default": {"paper": "plain"}}
        },
        "required": ["address", "items", "shape"],
        "$defs": {
            "Address": {
                "description": "An address.",
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": ["string", "null"], "pattern": "^[0-9]{5}$"},
                    "country": {"type": "string", "default": "US"}
                },
                "required": ["street"]
            },
            "LineItem": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer", "format": "uint32", "minimum": 1},
                    "note": {"type": ["string", "null"]}
                },
                "required": ["sku", "qty"]
            },
            "GiftWrap": {
                "type": "object",
                "properties": {"paper": {"type": "string"}},
                "required": ["paper"]
            },
            "Shape": {
                "oneOf": [
                    {
                        "description": "A circle.",
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string", "const": "circle"},
                            "radius": {"type": "number", "format": "double"}
                        },
                        "required": ["kind", "radius"]
                    },
                    {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string", "const": "rect"},
                            "w": {"type": "number", "format": "double"},
                            "h": {"type": "number", "format": "double"},
                            "label": {"type": ["string", "null"]}
                        },
                        "required": ["kind", "w", "h"]
                    }
                ]
            }
        }
    })
}

/// A recursive struct (`Node { name, children: Vec<Node> }`) plus `Option<u8>`.
pub fn tree_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "root": {"$ref": "#/$defs/Node"},
            "depth": {"type": ["integer", "null"], "format": "uint8", "minimum": 0, "maximum": 255}
        },
        "required": ["root"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                },
                "required": ["name", "children"]
            }
        }
    })
}

/// Keywords strict mode cannot express: a map, an any-value, a tuple.
pub fn map_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "payload": true,
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2
            }
        },
        "required": ["labels", "payload", "pair"]
    })
}

/// A tagged enum as the whole argument (a root `oneOf`).
pub fn union_root_schema() -> Value {
    json!({
        "oneOf": [
            {
                "type": "object",
                "properties": {"op": {"type": "string", "const": "get"}, "key": {"type": "string"}},
                "required": ["op", "key"]
            },
            {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "const": "set"},
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "ttl": {"type": ["integer", "null"], "format": "uint64", "minimum": 0}
                },
                "required": ["op", "key", "value"]
            }
        ]
    })
}

/// Build a tool with a no-op handler.
pub fn tool(name: &str, description: &str, schema: Value) -> Tool {
    Tool::builder(name)
        .description(description)
        .input_schema(schema)
        .handler(|_a, _c| async { Ok::<_, String>(Value::Null) })
        .build()
        .unwrap()
}

/// Every fixture as a tool, in a fixed order.
pub fn tools() -> Vec<Tool> {
    vec![
        tool("search", "Search the catalogue.", search_schema()),
        tool("place_order", "Place an order.", order_schema()),
        tool("walk_tree", "Walk a tree.", tree_schema()),
        tool(
            "ping",
            "Check liveness.",
            json!({"type": "object", "properties": {}}),
        ),
    ]
}

/// The order of a listing.
#[derive(schemars::JsonSchema, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum Order {
    Asc,
    Desc,
}

/// A postal address.
#[derive(schemars::JsonSchema, serde::Deserialize)]
#[allow(dead_code)]
struct Address {
    street: String,
    zip: Option<String>,
}

#[derive(schemars::JsonSchema, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(dead_code)]
enum Filter {
    /// Match a tag.
    Tag {
        tag: String,
    },
    Range {
        min: i64,
        max: Option<i64>,
    },
}

#[derive(schemars::JsonSchema, serde::Deserialize)]
#[allow(dead_code)]
struct Category {
    name: String,
    children: Vec<Category>,
}

/// Real schemars output for a struct using every shape the rewrites handle.
#[derive(schemars::JsonSchema, serde::Deserialize)]
#[allow(dead_code)]
struct RealArgs {
    /// What to look for.
    query: String,
    /// At most this many.
    limit: Option<u32>,
    /// Page number.
    #[serde(default = "one")]
    page: u32,
    #[serde(default)]
    exact: bool,
    /// The listing order.
    order: Order,
    then_by: Option<Order>,
    ship_to: Option<Address>,
    /// Where to bill.
    bill_to: Address,
    filters: Vec<Filter>,
    category: Option<Category>,
    weight: f64,
}

fn one() -> u32 {
    1
}

/// The schema of [`RealArgs`] as the `#[tool]` macro produces it.
pub fn schemars_schema() -> Value {
    crate::tool::__private::schema_of::<RealArgs>()
}

/// Every sub-schema of `schema` with its path, for invariant checks over a whole
/// rewritten schema.
pub fn walk_schema<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), schema));
    let Some(map) = schema.as_object() else {
        return;
    };
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = map.get(key) {
            for (name, child) in children {
                walk_schema(child, format!("{path}.{key}.{name}"), out);
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get(key) {
            for (i, child) in children.iter().enumerate() {
                walk_schema(child, format!("{path}.{key}[{i}]"), out);
            }
        }
    }
    if let Some(items) = map.get("items") {
        walk_schema(items, format!("{path}.items"), out);
    }
}

//! Toolsets: the merged tools one agent sees, from several sources, with collisions
//! refused at start-up.
//!
//! Sources, in bread's terms: the agent's own tools, tools pulled in by skills, global
//! plugin tools (every agent sees them), and per-agent plugin tools that a plugin
//! resolves from that agent's config (`plugins.<name>` in the agent's config; MCP
//! servers arrive this way). Built-ins are one more source.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::error::FieldError;
use crate::hooks::Hook;
use crate::tool::Tool;

/// Where a tool in a toolset came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolSource {
    /// The agent's own tools (its tools folder or inline definitions).
    Own,
    /// A skill.
    Skill(String),
    /// A plugin's global tools.
    GlobalPlugin(String),
    /// A plugin's tools resolved for this agent from its config.
    AgentPlugin(String),
    /// A built-in tool.
    Builtin,
}

impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolSource::Own => f.write_str("the agent's own tools"),
            ToolSource::Skill(s) => write!(f, "skill `{s}`"),
            ToolSource::GlobalPlugin(p) => write!(f, "plugin `{p}` (global tools)"),
            ToolSource::AgentPlugin(p) => write!(f, "plugin `{p}` (this agent's config)"),
            ToolSource::Builtin => f.write_str("the built-in tools"),
        }
    }
}

/// Two sources define the same tool name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tool `{name}` is defined twice: by {first} and by {second}; rename one of them or \
     remove it from one source (toolshed never lets one silently override the other)"
)]
pub struct CollisionError {
    /// The name both sources define.
    pub name: String,
    /// The source that added it first.
    pub first: ToolSource,
    /// The source that added it again.
    pub second: ToolSource,
}

/// A plugin resolving an agent's config failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSetError {
    /// A name collision.
    #[error(transparent)]
    Collision(#[from] CollisionError),
    /// A plugin could not resolve this agent's tools.
    #[error("plugin `{plugin}` could not resolve this agent's tools: {source}")]
    Plugin {
        /// The plugin.
        plugin: String,
        /// Why.
        #[source]
        source: PluginError,
    },
}

/// Why a plugin could not give an agent its tools.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The agent's `plugins.<name>` config is wrong; every problem is listed with its
    /// field path (relative to the plugin's config) and the fix.
    #[error("{}", join_fields(.0))]
    Config(Vec<FieldError>),
    /// The plugin could not build the tools (a server that does not start, a file it
    /// cannot read); the message says what and what to do.
    #[error("{0}")]
    Failed(String),
}

fn join_fields(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A skill: a named bundle of tools.
#[derive(Clone, Debug)]
pub struct Skill {
    /// The skill's name.
    pub name: String,
    /// Its tools.
    pub tools: Vec<Tool>,
}

/// A plugin contributes global tools, per-agent tools and hooks.
pub trait Plugin: Send + Sync {
    /// The plugin's name; its per-agent config lives under `plugins.<name>`.
    fn name(&self) -> &str;

    /// Tools every agent gets.
    fn global_tools(&self) -> Vec<Tool> {
        Vec::new()
    }

    /// Tools for one agent, from what that agent wrote under `plugins.<name>`.
    fn resolve_agent_tools(&self, config: &Value) -> Result<Vec<Tool>, PluginError> {
        let _ = config;
        Ok(Vec::new())
    }

    /// Hooks that apply to every call (after the tool's own, before the global config's).
    fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        Vec::new()
    }
}

/// The merged tools of one agent. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Arc<HashMap<Arc<str>, (Tool, ToolSource)>>,
    order: Arc<Vec<Arc<str>>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.order.iter()).finish()
    }
}

impl ToolSet {
    /// Start an empty builder.
    pub fn builder() -> ToolSetBuilder {
        ToolSetBuilder::default()
    }

    /// A toolset of the agent's own tools only.
    pub fn from_tools(tools: impl IntoIterator<Item = Tool>) -> Result<Self, CollisionError> {
        let mut b = ToolSet::builder();
        for t in tools {
            b.add(ToolSource::Own, t)?;
        }
        Ok(b.build())
    }

    /// Merge every source of one agent: own tools, skills, each plugin's global tools,
    /// and each plugin's tools for this agent's `plugins.<name>` config (`agent_plugin_config`
    /// maps plugin names to their config). Any collision is an error naming both sources.
    pub fn assemble(
        own: Vec<Tool>,
        skills: Vec<Skill>,
        plugins: &[Arc<dyn Plugin>],
        agent_plugin_config: &serde_json::Map<String, Value>,
        builtins: Vec<Tool>,
    ) -> Result<Self, ToolSetError> {
        let mut b = ToolSet::builder();
        for t in own {
            b.add(ToolSource::Own, t)?;
        }
        for skill in skills {
            for t in skill.tools {
                b.add(ToolSource::Skill(skill.name.clone()), t)?;
            }
        }
        for p in plugins {
            for t in p.global_tools() {
                b.add(ToolSource::GlobalPlugin(p.name().to_owned()), t)?;
            }
            if let Some(cfg) = agent_plugin_config.get(p.name()) {
                let tools = p
                    .resolve_agent_tools(cfg)
                    .map_err(|source| ToolSetError::Plugin {
                        plugin: p.name().to_owned(),
                        source,
                    })?;
                for t in tools {
                    b.add(ToolSource::AgentPlugin(p.name().to_owned()), t)?;
                }
            }
        }
        for t in builtins {
            b.add(ToolSource::Builtin, t)?;
        }
        Ok(b.build())
    }

    /// Look a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name).map(|(t, _)| t)
    }

    /// Where a tool came from.
    pub fn source_of(&self, name: &str) -> Option<&ToolSource> {
        self.tools.get(name).map(|(_, s)| s)
    }

    /// Tools in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.order.iter().filter_map(|n| self.get(n))
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// "did you mean `a` or `b`?" for an unknown name, or `None` when nothing is close.
    pub fn did_you_mean(&self, name: &str) -> Option<String> {
        let near = self.nearest_names(name);
        (!near.is_empty()).then(|| format!("did you mean `{}`?", near.join("` or `")))
    }

    /// Up to three names closest to `name`, for "unknown tool" messages.
    pub fn nearest_names(&self, name: &str) -> Vec<&str> {
        let lower = name.to_ascii_lowercase();
        let mut scored: Vec<(usize, &str)> = self
            .order
            .iter()
            .map(|n| {
                let candidate = n.to_ascii_lowercase();
                let mut d = edit_distance(&lower, &candidate);
                if candidate.contains(&lower) || lower.contains(&candidate) {
                    d = d.min(1);
                }
                (d, &**n)
            })
            .filter(|(d, n)| *d <= (n.len().max(name.len()) / 2).max(2))
            .collect();
        scored.sort();
        scored.into_iter().take(3).map(|(_, n)| n).collect()
    }
}

/// Builds a [`ToolSet`], refusing duplicate names.
#[derive(Default)]
pub struct ToolSetBuilder {
    tools: HashMap<Arc<str>, (Tool, ToolSource)>,
    order: Vec<Arc<str>>,
}

impl ToolSetBuilder {
    /// Add a tool from a source.
    pub fn add(&mut self, source: ToolSource, tool: Tool) -> Result<&mut Self, CollisionError> {
        let name = tool.spec().name.as_arc().clone();
        if let Some((_, first)) = self.tools.get(&name) {
            return Err(CollisionError {
                name: name.to_string(),
                first: first.clone(),
                second: source,
            });
        }
        self.order.push(name.clone());
        self.tools.insert(name, (tool, source));
        Ok(self)
    }

    /// Finish.
    pub fn build(self) -> ToolSet {
        ToolSet {
            tools: Arc::new(self.tools),
            order: Arc::new(self.order),
        }
    }
}

/// The Levenshtein distance between two strings, for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}

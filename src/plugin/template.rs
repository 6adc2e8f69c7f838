//! Rendering a plugin's templates with tera, strictly: a missing variable or a
//! broken template is a located error naming the plugin, the file and the line.
//! The context is `{cluster, params, scope: {role, pool}}`; secret parameters
//! appear as reference strings, never as their values.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use tera::Context;

use super::discover::PluginDef;
use super::guard;
use crate::located::{join_index, join_key, Located, Pos};

thread_local! {
    /// Each template as compiled and instrumented, by its name and text. A
    /// plugin's file is rendered once per scope (each node role and pool)
    /// with the same text, and tera's parse was the largest single piece of
    /// an offline command (docs/testing.md, "A profile of validate"): it is
    /// parsed once. A template renders with `&Tera`, and the guard's limits
    /// live in its own thread-local state (guard.rs `begin`), so a compiled
    /// template is reused as it was first built. Kept on the big-stack thread
    /// (src/deep.rs) for its life: the templates of one command's input.
    static COMPILED: RefCell<HashMap<(String, String), Rc<tera::Tera>>> = RefCell::new(HashMap::new());
}

static PARSE_POS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"-->\s*(\d+):(\d+)").unwrap());
static BACKTICKED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`]+)`").unwrap());

/// Renders templates of one plugin in one scope.
pub struct Renderer<'a> {
    pub def: &'a PluginDef,
    ctx: Context,
    /// The parameter names, for "did you mean" hints.
    params: Vec<String>,
}

/// Does `s` contain template syntax? Plain strings skip tera entirely.
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

impl<'a> Renderer<'a> {
    pub fn new(def: &'a PluginDef, cluster: &Value, params: &Value, scope: &Value) -> Self {
        let mut ctx = Context::new();
        ctx.insert("cluster", cluster);
        let mut r = Renderer {
            def,
            ctx,
            params: Vec::new(),
        };
        r.in_scope(params, scope);
        r
    }

    /// The same plugin in another scope: only `params` and `scope` change.
    /// The cluster's context (the largest value: every node pool is in it) is
    /// converted once per plugin, not once per scope, which made a render's
    /// cost grow with the square of the pools.
    pub fn in_scope(&mut self, params: &Value, scope: &Value) {
        self.ctx.insert("params", params);
        self.ctx.insert("scope", scope);
        self.params = params
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
    }

    /// Adds `serviceAccounts`: the plugin's own service accounts by name, each
    /// with its `roleArn`, `roleName` and `namespace`.
    pub fn with_service_accounts(mut self, accounts: &Value) -> Self {
        self.ctx.insert("serviceAccounts", accounts);
        self
    }

    /// Renders `text`; on error, the message is located in `file` at the
    /// template's line when known, else at `at`.
    fn render_text(
        &self,
        name: &str,
        text: &str,
        file: &Path,
        at: Pos,
        key: &str,
        in_file: bool,
    ) -> Result<String, Located> {
        if !is_template(text) {
            return Ok(text.to_string());
        }
        let fail = |line: Option<(usize, usize)>, why: String| {
            let plugin = self.def.name();
            match (in_file, line) {
                (true, Some((l, c))) => {
                    Located::new(file, Pos { line: l, col: c }, "", format!("plugin {plugin:?}: {why}"))
                }
                (false, Some((l, _))) if l > 1 => Located::new(
                    file,
                    at,
                    key,
                    format!("plugin {plugin:?}: line {l} of the template: {why}"),
                ),
                _ => Located::new(file, at, key, format!("plugin {plugin:?}: {why}")),
            }
        };
        let scan = guard::prescan(text).map_err(|r| fail(Some(guard::line_col(text, r.offset)), r.message))?;
        let outcome = crate::deep::on_big_stack(|| {
            let key = (name.to_string(), text.to_string());
            let tera = match COMPILED.with(|c| c.borrow().get(&key).cloned()) {
                Some(tera) => tera,
                None => {
                    let mut tera = guard::tera();
                    if let Err(e) = tera.add_raw_template(name, text) {
                        return Outcome::Broken(chain(&e));
                    }
                    super::instrument::instrument(&mut tera, name, &scan);
                    let tera = Rc::new(tera);
                    COMPILED.with(|c| c.borrow_mut().insert(key, Rc::clone(&tera)));
                    tera
                }
            };
            guard::begin();
            let mut out = guard::Bounded::default();
            let rendered = tera.render_to(name, &self.ctx, &mut out);
            // A limit stops the render even where tera swallows the error
            // (an `if` on a variable with filters reads an error as false).
            match (guard::stopped(), rendered) {
                (Some(stop), _) => Outcome::Stopped(stop),
                (None, Ok(())) => Outcome::Done(String::from_utf8_lossy(&out.0).into_owned()),
                (None, Err(e)) => Outcome::Failed(chain(&e)),
            }
        })
        .map_err(|e| fail(None, format!("cannot start a thread to render the template: {e}")))?;
        let full = match outcome {
            Outcome::Done(s) => return Ok(s),
            Outcome::Broken(full) => {
                let pos = PARSE_POS
                    .captures(&full)
                    .and_then(|c| Some((c[1].parse().ok()?, c[2].parse().ok()?)));
                let detail = full
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("= "))
                    .unwrap_or("syntax error")
                    .to_string();
                return Err(fail(pos, format!("broken template: {detail}")));
            }
            Outcome::Stopped(guard::Stop::Depth { macro_name, offset }) => {
                return Err(fail(
                    Some(guard::line_col(text, offset)),
                    format!(
                        "macro `{macro_name}` is called more than {} levels deep (the limit for plugin templates; a macro that calls itself without end?)",
                        guard::MAX_MACRO_DEPTH
                    ),
                ))
            }
            Outcome::Stopped(guard::Stop::Steps { offset }) => {
                return Err(fail(
                    Some(guard::line_col(text, offset)),
                    format!(
                        "more than {} loop iterations and macro calls (the limit for one plugin template)",
                        guard::MAX_STEPS
                    ),
                ))
            }
            Outcome::Stopped(guard::Stop::Value {
                offset,
                macro_name,
                why,
            }) => {
                let what = match macro_name {
                    Some(m) => format!("a call of macro `{m}`: {why}"),
                    None => format!("the value this tag keeps {why}"),
                };
                return Err(fail(
                    Some(guard::line_col(text, offset)),
                    format!(
                        "{what} (the limits for one value in a plugin template are {} bytes and {} levels; \
                         a value doubled in a loop or a recursive macro?)",
                        guard::MAX_VALUE_BYTES,
                        guard::MAX_VALUE_DEPTH
                    ),
                ));
            }
            Outcome::Stopped(guard::Stop::Grow {
                offset,
                what,
                size,
                limit,
            }) => return Err(fail(Some(guard::line_col(text, offset)), grow_message(&what, size, limit))),
            Outcome::Stopped(guard::Stop::Written { offset }) => {
                return Err(fail(
                    Some(guard::line_col(text, offset)),
                    format!(
                        "this template writes more than {} bytes, counting what a macro or a `filter` section \
                         writes both where it is written and where its result is used (the limit for one plugin \
                         template); write less in loops inside macros, or render the output in fewer levels",
                        guard::MAX_WRITTEN
                    ),
                ))
            }
            Outcome::Failed(full) => full,
        };
        if full.contains(guard::OUTPUT_TOO_BIG) {
            return Err(fail(None, guard::OUTPUT_TOO_BIG.to_string()));
        }
        {
            let last = full.rsplit(": ").next().unwrap_or(&full).to_string();
            let culprit = BACKTICKED.captures(&last).map(|c| c[1].to_string());
            let line = culprit.as_ref().and_then(|v| {
                text.lines().position(|l| l.contains(v.as_str())).map(|i| {
                    (
                        i + 1,
                        text.lines().nth(i).and_then(|l| l.find(v.as_str())).unwrap_or(0) + 1,
                    )
                })
            });
            let mut why =
                last.replace(&format!(" while rendering '{name}'"), "")
                    .replacen("Variable `", "variable `", 1);
            if let Some(v) = culprit.as_deref().and_then(|v| v.strip_prefix("params.")) {
                let v = v.split(['.', '[', ' ']).next().unwrap_or(v);
                if !self.params.iter().any(|p| p == v) {
                    match crate::located::closest(v, &self.params) {
                        Some(best) => why.push_str(&format!(" (did you mean params.{best}?)")),
                        None if self.params.is_empty() => why.push_str(" (no parameter has a value here)"),
                        None => why.push_str(&format!(" (parameters with a value: {})", self.params.join(", "))),
                    }
                } else {
                    why.push_str(" (a parameter without a value: give it a default, or test it with `is defined`)");
                }
            }
            Err(fail(line, why))
        }
    }

    /// Renders the plugin.yaml string at key path `key`.
    pub fn field(&self, key: &str, text: &str) -> Result<String, Located> {
        let at = self.def.map.locate(key);
        self.render_text(key, text, &self.def.file, at, key, false)
    }

    /// Reads and renders file `rel` (named at plugin.yaml key `key`): `*.tera`
    /// files are templates, other files are taken as they are.
    pub fn file(&self, key: &str, rel: &str) -> Result<String, Located> {
        let text = self.def.read(key, rel)?;
        if !rel.ends_with(".tera") {
            return Ok(text);
        }
        let shown = self.def.display_file(rel);
        self.render_text(rel, &text, &shown, Pos { line: 1, col: 1 }, "", true)
    }

    /// Renders every string (and map key) inside `v`, found at plugin.yaml
    /// key `key`; the errors of every string that does not render.
    pub fn json(&self, key: &str, v: &Value) -> Result<Value, Vec<Located>> {
        let mut errors = Vec::new();
        let out = self.json_into(key, v, &mut errors);
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    fn json_into(&self, key: &str, v: &Value, errors: &mut Vec<Located>) -> Value {
        match v {
            Value::String(s) => match self.field(key, s) {
                Ok(r) => Value::String(r),
                Err(e) => {
                    errors.push(e);
                    v.clone()
                }
            },
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.json_into(&join_index(key, i), x, errors))
                    .collect(),
            ),
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    let path = join_key(key, k);
                    let k2 = match self.field(&path, k) {
                        Ok(r) => r,
                        Err(e) => {
                            errors.push(e);
                            k.clone()
                        }
                    };
                    out.insert(k2, self.json_into(&path, x, errors));
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }
}

/// The refusal of a filter, operator, list literal or call whose value would
/// pass `limit`.
fn grow_message(what: &str, size: Option<usize>, limit: usize) -> String {
    let would = match size {
        Some(n) => format!("{what} would make a value of {n} bytes"),
        None => format!("{what} would make a value larger than {limit} bytes"),
    };
    let which = if limit == guard::MAX_VALUE_BYTES {
        "for one value"
    } else if limit == guard::MAX_ARGS_BYTES {
        "for the arguments of one call"
    } else {
        "for the values one expression builds at once"
    };
    format!(
        "{would}, over the limit of {limit} bytes {which} in a plugin template (nothing was built); \
         give it a smaller input or smaller arguments, or split the work over several values"
    )
}

/// How a render on the template thread ended.
enum Outcome {
    Done(String),
    /// The template does not parse (tera's message).
    Broken(String),
    Stopped(guard::Stop),
    Failed(String),
}

/// A tera error with its causes, one string.
fn chain(e: &tera::Error) -> String {
    let mut out = e.to_string();
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

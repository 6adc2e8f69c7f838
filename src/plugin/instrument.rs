//! Adds kube-aws's counting calls to a parsed plugin template, so that the
//! limits of [`super::guard`] and [`super::grow`] apply while tera renders:
//! - each macro body starts with an enter call (depth, steps, the size of
//!   the arguments) and ends with a leave call; each loop body starts with a
//!   step call; each `set` value gets the bounding filter;
//! - each filter call gets the offset of its name ([`super::grow::AT_ARG`]), which
//!   the bounded filters report;
//! - each operand of `~` that is not a literal becomes a call that counts it
//!   ([`super::grow::PART`]); each item of a list literal and each argument of a
//!   call gets a filter that counts it ([`super::grow::MEMBER`]);
//! - each `{{ }}` tag gets a filter that counts what it writes, and each body
//!   with text a call that counts the text ([`super::grow::EMIT`], [`super::grow::TEXT`]).
//!
//! Every call carries the offset of its tag in the template, from the
//! pre-scan ([`Scan`]): tags are matched to the parsed nodes in text order.
//!
//! This edits tera's parsed template (`Tera::templates` and `tera::ast` are
//! public but hidden from tera's docs); Cargo.lock pins tera, and the tests
//! at the limits fail if a tera update changes them. Call arguments are a
//! `HashMap` in tera's AST: tera evaluates them in the map's order, which
//! this reads once the map is final (after [`super::grow::AT_ARG`] is inserted).

use std::collections::HashMap;

use tera::ast::{Expr, ExprVal, FunctionCall, Node, StringConcat, WS};
use tera::Value;

use super::grow::{AT_ARG, EMIT, MEMBER, PART, TEXT};
use super::guard::{Scan, Tag, BOUND, ENTER, LEAVE, MAX_ARGS_BYTES, MAX_VALUE_BYTES, STEP};

/// Adds the counting calls to template `name` of `t` (see the module docs).
pub fn instrument(t: &mut tera::Tera, name: &str, scan: &Scan) {
    let Some(tpl) = t.templates.get_mut(name) else { return };
    let orders: HashMap<String, Vec<String>> = tpl
        .macros
        .iter()
        .map(|(n, d)| (n.clone(), d.args.keys().cloned().collect()))
        .collect();
    let mut walk = Walk {
        tags: scan.top.iter(),
        macro_args: &orders,
        groups: 0,
    };
    walk.body(&mut tpl.ast, 0);
    for (mname, def) in tpl.macros.iter_mut() {
        let at = scan.macros.get(mname).copied().unwrap_or(0);
        walk.tags = scan.in_macro.get(mname).map_or(&[][..], Vec::as_slice).iter();
        walk.body(&mut def.body, at);
        let mut args = lits(&[("m", Value::String(mname.clone())), ("at", Value::from(at))]);
        for name in def.args.keys() {
            args.insert(format!("v_{name}"), Expr::new(ExprVal::Ident(name.clone())));
        }
        def.body.insert(0, call_node(ENTER, args));
        def.body.push(call_node(LEAVE, HashMap::new()));
    }
}

fn lit(v: &Value) -> Expr {
    Expr::new(match v {
        Value::String(s) => ExprVal::String(s.clone()),
        Value::Bool(b) => ExprVal::Bool(*b),
        v => ExprVal::Int(v.as_i64().unwrap_or(0)),
    })
}

fn lits(args: &[(&str, Value)]) -> HashMap<String, Expr> {
    args.iter().map(|(k, v)| (k.to_string(), lit(v))).collect()
}

fn fn_call(name: &str, args: HashMap<String, Expr>) -> FunctionCall {
    FunctionCall {
        name: name.to_string(),
        args,
    }
}

fn call_node(name: &str, args: HashMap<String, Expr>) -> Node {
    Node::VariableBlock(WS::default(), Expr::new(ExprVal::FunctionCall(fn_call(name, args))))
}

/// Where the next filter, `~` and list literal of one tag are.
struct Cursor<'t> {
    tag: &'t Tag,
    filters_seen: HashMap<String, usize>,
    tildes: usize,
    lists: usize,
}

impl<'t> Cursor<'t> {
    fn new(tag: &'t Tag) -> Self {
        Cursor {
            tag,
            filters_seen: HashMap::new(),
            tildes: 0,
            lists: 0,
        }
    }

    /// The offset of the next filter called `name` (the tag's if not found).
    fn filter(&mut self, name: &str) -> usize {
        let seen = self.filters_seen.entry(name.to_string()).or_default();
        let at = self.tag.filters.iter().filter(|(n, _)| n == name).nth(*seen);
        *seen += 1;
        at.map_or(self.tag.offset, |f| f.1)
    }

    /// The offset of the first `~` of the next concatenation of `operands`.
    fn concat(&mut self, operands: usize) -> usize {
        let at = self.tag.tildes.get(self.tildes).copied();
        self.tildes += operands.saturating_sub(1);
        at.unwrap_or(self.tag.offset)
    }

    fn list(&mut self) -> usize {
        let at = self.tag.lists.get(self.lists).copied();
        self.lists += 1;
        at.unwrap_or(self.tag.offset)
    }
}

struct Walk<'s> {
    tags: std::slice::Iter<'s, Tag>,
    /// Each macro's argument names, in the order tera evaluates them.
    macro_args: &'s HashMap<String, Vec<String>>,
    /// Value groups numbered so far.
    groups: u64,
}

impl Walk<'_> {
    fn next_tag(&mut self) -> Tag {
        self.tags.next().cloned().unwrap_or_default()
    }

    /// Instruments a body whose enclosing tag is at `owner`.
    fn body(&mut self, nodes: &mut Vec<Node>, owner: usize) {
        let text: usize = nodes
            .iter()
            .map(|n| match n {
                Node::Text(s) | Node::Raw(_, s, _) => s.len(),
                _ => 0,
            })
            .sum();
        for node in nodes.iter_mut() {
            self.node(node, owner);
        }
        if text > 0 {
            let args = lits(&[("n", Value::from(text)), ("at", Value::from(owner))]);
            nodes.insert(0, call_node(TEXT, args));
        }
    }

    fn node(&mut self, node: &mut Node, owner: usize) {
        match node {
            Node::VariableBlock(_, e) => {
                let tag = self.next_tag();
                self.expr(e, &mut Cursor::new(&tag));
                e.filters
                    .push(fn_call(EMIT, lits(&[(AT_ARG, Value::from(tag.offset))])));
            }
            Node::Set(_, set) => {
                let tag = self.next_tag();
                self.expr(&mut set.value, &mut Cursor::new(&tag));
                set.value
                    .filters
                    .push(fn_call(BOUND, lits(&[("at", Value::from(tag.offset))])));
            }
            Node::Forloop(_, f, _) => {
                let tag = self.next_tag();
                self.expr(&mut f.container, &mut Cursor::new(&tag));
                self.body(&mut f.body, tag.offset);
                f.body
                    .insert(0, call_node(STEP, lits(&[("at", Value::from(tag.offset))])));
                if let Some(e) = &mut f.empty_body {
                    self.body(e, tag.offset);
                }
            }
            Node::If(i, _) => {
                let mut last = owner;
                for (_, e, b) in &mut i.conditions {
                    let tag = self.next_tag();
                    self.expr(e, &mut Cursor::new(&tag));
                    self.body(b, tag.offset);
                    last = tag.offset;
                }
                if let Some((_, b)) = &mut i.otherwise {
                    self.body(b, last);
                }
            }
            Node::FilterSection(_, f, _) => {
                let tag = self.next_tag();
                self.filter(&mut f.filter, &mut Cursor::new(&tag));
                self.body(&mut f.body, tag.offset);
            }
            Node::Block(_, bl, _) => self.body(&mut bl.body, owner),
            _ => {}
        }
    }

    fn expr(&mut self, e: &mut Expr, c: &mut Cursor) {
        match &mut e.val {
            ExprVal::Array(items) => {
                let at = c.list();
                for i in items.iter_mut() {
                    self.expr(i, c);
                }
                self.group(items.iter_mut().collect(), Group::list(at));
            }
            ExprVal::StringConcat(sc) => self.concat(sc, c),
            ExprVal::Math(m) => {
                self.expr(&mut m.lhs, c);
                self.expr(&mut m.rhs, c);
            }
            ExprVal::Logic(l) => {
                self.expr(&mut l.lhs, c);
                self.expr(&mut l.rhs, c);
            }
            ExprVal::In(i) => {
                self.expr(&mut i.lhs, c);
                self.expr(&mut i.rhs, c);
            }
            ExprVal::Test(t) => {
                for a in t.args.iter_mut() {
                    self.expr(a, c);
                }
                let what = format!("the arguments of test `{}`", t.name);
                self.group(t.args.iter_mut().collect(), Group::args(what, c.tag.offset));
            }
            ExprVal::MacroCall(m) => {
                for a in m.args.values_mut() {
                    self.expr(a, c);
                }
                let order = self.macro_args.get(&m.name).cloned().unwrap_or_default();
                let mut args: Vec<_> = m.args.iter_mut().collect();
                args.sort_by_key(|(k, _)| order.iter().position(|o| o == *k));
                let members = args.into_iter().filter(|(k, _)| order.contains(*k)).map(|a| a.1);
                let what = format!("the arguments of macro `{}`", m.name);
                self.group(members.collect(), Group::args(what, c.tag.offset));
            }
            ExprVal::FunctionCall(f) => {
                let at = c.tag.offset;
                self.call(f, c, "function", at);
            }
            _ => {}
        }
        for f in e.filters.iter_mut() {
            self.filter(f, c);
        }
    }

    /// A filter call: tells it where it is, and counts its arguments.
    fn filter(&mut self, f: &mut FunctionCall, c: &mut Cursor) {
        let at = c.filter(&f.name);
        f.args.insert(AT_ARG.to_string(), lit(&Value::from(at)));
        self.call(f, c, "filter", at);
    }

    /// Counts the arguments of a call, in the order tera evaluates them.
    fn call(&mut self, f: &mut FunctionCall, c: &mut Cursor, kind: &str, at: usize) {
        let what = format!("the arguments of {kind} `{}`", f.name);
        let mut members = Vec::new();
        for (k, a) in f.args.iter_mut() {
            if k != AT_ARG {
                self.expr(a, c);
                members.push(a);
            }
        }
        self.group(members, Group::args(what, at));
    }

    /// Puts the counting filter on each member of a new value group.
    fn group(&mut self, members: Vec<&mut Expr>, g: Group) {
        let n = members.len();
        if n == 0 {
            return;
        }
        self.groups += 1;
        for (k, m) in members.into_iter().enumerate() {
            let args = lits(&[
                ("g", Value::from(self.groups)),
                ("first", Value::Bool(k == 0)),
                ("last", Value::Bool(k + 1 == n)),
                ("item", Value::Bool(g.items)),
                ("max", Value::from(g.max)),
                ("w", Value::String(g.what.clone())),
                (AT_ARG, Value::from(g.at)),
            ]);
            m.filters.push(fn_call(MEMBER, args));
        }
    }

    /// Turns each operand of `~` that is not a literal into a counting call
    /// (the literals before it count with it), so the string tera builds
    /// stops at the bound.
    fn concat(&mut self, sc: &mut StringConcat, c: &mut Cursor) {
        let at = c.concat(sc.values.len());
        self.groups += 1;
        let group = self.groups;
        let mut pre = 0usize;
        let mut parts = 0usize;
        let mut last_part = None;
        for (k, v) in sc.values.iter_mut().enumerate() {
            let name = match v {
                ExprVal::String(s) => {
                    pre += s.len();
                    continue;
                }
                ExprVal::Int(i) => {
                    pre += i.to_string().len();
                    continue;
                }
                ExprVal::Float(f) => {
                    pre += f.to_string().len();
                    continue;
                }
                ExprVal::Ident(i) => format!("ident {i}"),
                ExprVal::FunctionCall(f) => {
                    self.call(f, c, "function", at);
                    format!("function call {}", f.name)
                }
                _ => continue,
            };
            let operand = std::mem::replace(v, ExprVal::Bool(false));
            let mut args = part_args(group, parts == 0, pre, &name, at);
            args.insert("v".to_string(), Expr::new(operand));
            *v = ExprVal::FunctionCall(fn_call(PART, args));
            parts += 1;
            pre = 0;
            last_part = Some(k);
        }
        let Some(last) = last_part else { return };
        if pre > 0 {
            let mut args = part_args(group, false, pre, "a literal", at);
            args.insert("v".to_string(), lit(&Value::String(String::new())));
            args.insert("last".to_string(), lit(&Value::Bool(true)));
            sc.values.push(ExprVal::FunctionCall(fn_call(PART, args)));
        } else if let ExprVal::FunctionCall(f) = &mut sc.values[last] {
            f.args.insert("last".to_string(), lit(&Value::Bool(true)));
        }
    }
}

/// A value built from parts as tera evaluates them.
struct Group {
    what: String,
    at: usize,
    /// The bound on the parts together.
    max: usize,
    /// Items of a list: each counts `ITEM_BYTES` more.
    items: bool,
}

impl Group {
    fn list(at: usize) -> Self {
        Group {
            what: "this list literal".to_string(),
            at,
            max: MAX_VALUE_BYTES,
            items: true,
        }
    }

    fn args(what: String, at: usize) -> Self {
        Group {
            what,
            at,
            max: MAX_ARGS_BYTES,
            items: false,
        }
    }
}

fn part_args(group: u64, first: bool, pre: usize, name: &str, at: usize) -> HashMap<String, Expr> {
    lits(&[
        ("g", Value::from(group)),
        ("max", Value::from(MAX_VALUE_BYTES)),
        ("first", Value::Bool(first)),
        ("pre", Value::from(pre)),
        ("name", Value::String(name.to_string())),
        ("w", Value::String("the `~` operator".to_string())),
        (AT_ARG, Value::from(at)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instrumented(text: &str) -> tera::Tera {
        let scan = super::super::guard::prescan(text).unwrap();
        let mut t = super::super::guard::tera();
        t.add_raw_template("t", text).unwrap();
        instrument(&mut t, "t", &scan);
        t
    }

    fn filter_offsets(t: &tera::Tera) -> Vec<(String, i64)> {
        let mut out = vec![];
        for node in &t.templates["t"].ast {
            if let Node::VariableBlock(_, e) = node {
                for f in &e.filters {
                    if let Some(ExprVal::Int(at)) = f.args.get(AT_ARG).map(|a| &a.val) {
                        out.push((f.name.clone(), *at));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn filters_get_the_offset_of_their_name() {
        let text = "ab\n{{ x | upper | replace(from=\"a\", to=\"b\") }}{{ y|upper }}";
        let t = instrumented(text);
        let got = filter_offsets(&t);
        let at = |needle: &str, from: usize| (text[from..].find(needle).unwrap() + from) as i64;
        assert_eq!(
            got,
            vec![
                ("upper".to_string(), at("upper", 0)),
                ("replace".to_string(), at("replace", 0)),
                (EMIT.to_string(), 3),
                ("upper".to_string(), at("upper", 20)),
                (EMIT.to_string(), at("{{ y", 0)),
            ]
        );
    }

    #[test]
    fn a_concatenation_counts_its_operands_and_still_renders() {
        let text = "{% set a = \"x\" %}{{ \"<\" ~ a ~ 1 ~ a ~ \">\" }}|{{ \"a\" ~ \"b\" }}|{% set l = [a, 1, a ~ a] %}{{ l | length }}";
        let t = instrumented(text);
        super::super::guard::begin();
        let out = t.render("t", &tera::Context::new()).unwrap();
        assert_eq!(out, "<x1x>|ab|3");
        let sc = t.templates["t"]
            .ast
            .iter()
            .find_map(|n| match n {
                Node::VariableBlock(
                    _,
                    Expr {
                        val: ExprVal::StringConcat(sc),
                        ..
                    },
                ) => Some(sc),
                _ => None,
            })
            .expect("a concatenation");
        let parts = sc
            .values
            .iter()
            .filter(|v| matches!(v, ExprVal::FunctionCall(f) if f.name == PART))
            .count();
        assert_eq!(parts, 3, "two variables and the trailing literal: {sc:?}");
    }
}

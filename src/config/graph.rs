//! The release graph of a cluster: every release (cluster.yaml's charts and
//! the enabled plugins' charts) by name, with its `dependsOn` edges. Its
//! rules live here once: unique names, known targets, no self-dependency or
//! cycle, a bootstrap release depends only on bootstrap releases; and the
//! install order render hands the installer (bootstrap releases first, each
//! group in dependency order, ties in input order). The callers only say
//! where a problem is: config and plugins at their file positions, render
//! by release name.

use std::collections::{BTreeMap, HashMap};

use super::model::ChartSpec;
use super::resolve::Release;

/// What the graph needs of a release.
pub trait GraphNode {
    fn name(&self) -> &str;
    fn depends_on(&self) -> &[String];
    fn bootstrap(&self) -> bool;
}

/// A resolved release and a raw chart entry carry the same three fields.
macro_rules! graph_node {
    ($($t:ty),*) => {$(
        impl GraphNode for $t {
            fn name(&self) -> &str {
                &self.name
            }
            fn depends_on(&self) -> &[String] {
                &self.depends_on
            }
            fn bootstrap(&self) -> bool {
                self.bootstrap
            }
        }
    )*};
}

graph_node!(Release, ChartSpec);

impl<T: GraphNode> GraphNode for &T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn depends_on(&self) -> &[String] {
        (**self).depends_on()
    }
    fn bootstrap(&self) -> bool {
        (**self).bootstrap()
    }
}

/// A broken rule. `release` indexes the graph's list; `dep` indexes that
/// release's `dependsOn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphProblem {
    /// The release has the name of an earlier one, `first`.
    Duplicate { release: usize, first: usize },
    /// The dependency names no release.
    Unknown { release: usize, dep: usize },
    /// The release depends on itself.
    SelfDependency { release: usize, dep: usize },
    /// A bootstrap release depends on one that is not.
    NotBootstrap { release: usize, dep: usize },
    /// A dependency cycle, as names `[a, b, …, a]`.
    Cycle { cycle: Vec<String> },
    /// The release cannot be ordered: it is on, or waits for, a cycle.
    Unordered { release: usize },
}

/// Every release of a cluster, in input order.
pub struct ReleaseGraph<'a, N: GraphNode> {
    nodes: &'a [N],
    /// Each name's first release.
    index: HashMap<&'a str, usize>,
}

impl<'a, N: GraphNode> ReleaseGraph<'a, N> {
    pub fn new(nodes: &'a [N]) -> Self {
        let mut index = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            index.entry(n.name()).or_insert(i);
        }
        ReleaseGraph { nodes, index }
    }

    /// Every release name, in input order (for "did you mean" hints).
    pub fn names(&self) -> Vec<&'a str> {
        self.nodes.iter().map(|n| n.name()).collect()
    }

    /// Releases named like an earlier one.
    pub fn duplicates(&self) -> Vec<GraphProblem> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let first = self.index[n.name()];
            if first != i {
                out.push(GraphProblem::Duplicate { release: i, first });
            }
        }
        out
    }

    /// Dependencies on no release, and on the release itself.
    pub fn bad_targets(&self) -> Vec<GraphProblem> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for (j, d) in n.depends_on().iter().enumerate() {
                if d == n.name() {
                    out.push(GraphProblem::SelfDependency { release: i, dep: j });
                } else if !self.index.contains_key(d.as_str()) {
                    out.push(GraphProblem::Unknown { release: i, dep: j });
                }
            }
        }
        out
    }

    /// One dependency cycle over the known targets (self-dependencies are
    /// [`GraphProblem::SelfDependency`]), found in name order.
    pub fn cycle(&self) -> Option<GraphProblem> {
        let graph: BTreeMap<&str, Vec<&str>> = self
            .nodes
            .iter()
            .map(|n| {
                let deps = n
                    .depends_on()
                    .iter()
                    .map(String::as_str)
                    .filter(|d| self.index.contains_key(d) && *d != n.name())
                    .collect();
                (n.name(), deps)
            })
            .collect();
        find_cycle(&graph).map(|c| GraphProblem::Cycle {
            cycle: c.into_iter().map(String::from).collect(),
        })
    }

    /// The install order: bootstrap releases first, each group in
    /// dependency order, ties in input order. The first problem otherwise: a
    /// duplicate name, an unknown target, a bootstrap release depending on
    /// one that is not, or a release that waits for a cycle.
    pub fn install_order(&self) -> Result<Vec<usize>, GraphProblem> {
        if let Some(p) = self.duplicates().into_iter().next() {
            return Err(p);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            for (j, d) in n.depends_on().iter().enumerate() {
                let Some(&k) = self.index.get(d.as_str()) else {
                    return Err(GraphProblem::Unknown { release: i, dep: j });
                };
                if n.bootstrap() && !self.nodes[k].bootstrap() {
                    return Err(GraphProblem::NotBootstrap { release: i, dep: j });
                }
            }
        }
        let count = self.nodes.len();
        let mut order = Vec::with_capacity(count);
        let mut done = vec![false; count];
        for bootstrap in [true, false] {
            while let Some(i) = (0..count).find(|&i| {
                let n = &self.nodes[i];
                !done[i] && n.bootstrap() == bootstrap && n.depends_on().iter().all(|d| done[self.index[d.as_str()]])
            }) {
                done[i] = true;
                order.push(i);
            }
        }
        match (0..count).find(|&i| !done[i]) {
            Some(release) => Err(GraphProblem::Unordered { release }),
            None => Ok(order),
        }
    }
}

/// Finds one dependency cycle, returned as `[a, b, …, a]`.
pub fn find_cycle<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        n: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        marks: &mut HashMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        marks.insert(n, Mark::Active);
        stack.push(n);
        for &d in graph.get(n).map(Vec::as_slice).unwrap_or(&[]) {
            match marks.get(d).copied().unwrap_or(Mark::New) {
                Mark::Active => {
                    let start = stack.iter().position(|s| *s == d).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(d);
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(d, graph, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n, Mark::Done);
        None
    }
    let mut marks = HashMap::new();
    for &n in graph.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, graph, &mut marks, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N(&'static str, Vec<String>, bool);

    impl GraphNode for N {
        fn name(&self) -> &str {
            self.0
        }
        fn depends_on(&self) -> &[String] {
            &self.1
        }
        fn bootstrap(&self) -> bool {
            self.2
        }
    }

    fn n(name: &'static str, deps: &[&str], bootstrap: bool) -> N {
        N(name, deps.iter().map(|d| d.to_string()).collect(), bootstrap)
    }

    #[test]
    fn cycles_are_named() {
        let mut g = BTreeMap::new();
        g.insert("a", vec!["b"]);
        g.insert("b", vec!["c"]);
        g.insert("c", vec!["a"]);
        g.insert("d", vec![]);
        assert_eq!(find_cycle(&g).unwrap(), vec!["a", "b", "c", "a"]);
        g.insert("c", vec![]);
        assert_eq!(find_cycle(&g), None);
    }

    #[test]
    fn rules_are_found_once() {
        let nodes = [
            n("a", &["a", "zz"], false),
            n("b", &["c"], false),
            n("c", &["b"], false),
            n("a", &[], false),
        ];
        let g = ReleaseGraph::new(&nodes);
        assert_eq!(g.duplicates(), [GraphProblem::Duplicate { release: 3, first: 0 }]);
        assert_eq!(
            g.bad_targets(),
            [
                GraphProblem::SelfDependency { release: 0, dep: 0 },
                GraphProblem::Unknown { release: 0, dep: 1 }
            ]
        );
        assert_eq!(
            g.cycle(),
            Some(GraphProblem::Cycle {
                cycle: vec!["b".into(), "c".into(), "b".into()]
            })
        );
    }

    #[test]
    fn install_order_puts_bootstrap_first_then_dependencies() {
        let nodes = [n("app", &["db"], false), n("db", &[], false), n("cni", &[], true)];
        assert_eq!(ReleaseGraph::new(&nodes).install_order(), Ok(vec![2, 1, 0]));
        let nodes = [n("cni", &["db"], true), n("db", &[], false)];
        assert_eq!(
            ReleaseGraph::new(&nodes).install_order(),
            Err(GraphProblem::NotBootstrap { release: 0, dep: 0 })
        );
        let nodes = [n("a", &["b"], false), n("b", &["a"], false)];
        assert_eq!(
            ReleaseGraph::new(&nodes).install_order(),
            Err(GraphProblem::Unordered { release: 0 })
        );
    }
}
